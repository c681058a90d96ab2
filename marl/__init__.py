"""societas.marl — how agents learn.

Policy optimisation of LLM agents from graph rollouts (GRPO/GDPO), neural
communication and learned routing over agent graphs, and exact game solvers
(CFR family, PSRO) on OpenSpiel games. Filled by its own work items; this
package exists so that the layering agents <- topology <- marl <- evolve holds
from the start.
"""
