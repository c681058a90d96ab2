"""societas.marl — how agents learn.

Policy optimisation of LLM agents from graph rollouts (GRPO/GDPO), neural
communication and learned routing over agent graphs, and exact game solvers
(CFR family, PSRO) on OpenSpiel games:

- ``societas.marl.games``: tensor trees of OpenSpiel games, the CFR family, exact
  exploitability, PSRO;
- ``societas.marl.comm``: batched torch MPE environments (parity with mpe2, PettingZoo
  views), MAPPO/IPPO with CommNet, TarMAC, IC3Net, DIAL, graph attention and
  CommFormer communication;
- ``societas.marl.routing``: learned routing over a ``societas.topology.Graph`` of agents
  (GPTSwarm edge logits, a G-Designer-style task-conditioned GNN).
"""
