"""Communication modules for multi-agent policies (same-time-step message passing).

This module is long because it holds the seven communication modules side by
side behind one interface and one registry, so that their differences can be
read and compared in one place.

Every module maps the agents' hidden states ``h [B, N, H]`` (and optionally an
adjacency) to hidden states with the received messages integrated, also
``[B, N, H]``. A policy sits a module between its per-agent encoder and its
action heads (see :mod:`societas.marl.comm.mappo`). The modules and their references:

=============  ==================================================================
``none``       no communication (``h' = h``), the baseline.
``commnet``    CommNet, Sukhbaatar, Szlam & Fergus (NeurIPS 2016), arXiv 1605.07736:
               continuous broadcast of the mean of the other agents' hidden states.
``tarmac``     TarMAC, Das et al. (ICML 2019), arXiv 1810.11187: targeted
               communication by signature/query soft attention, several rounds.
``ic3net``     IC3Net, Singh, Jain & Sukhbaatar (ICLR 2019), arXiv 1812.09755:
               CommNet with a learned binary gate per agent (communicate or not).
``dial``       DIAL, Foerster et al. (NeurIPS 2016), arXiv 1605.06676: a
               differentiable channel with Gaussian noise in training, discretised
               at execution (the DRU, discretise/regularise unit).
``gat``        graph-attention message passing (Velickovic et al. 2018) over a
               given adjacency, as MAGIC's message processor (Niu, Paleja &
               Gombolay, AAMAS 2021); ``scheduler=True`` adds MAGIC's learned
               hard-attention scheduler that picks the graph per step.
``commformer`` CommFormer, Hu, Shen, Zhang & Tao (ICLR 2024), arXiv 2405.08550: a learned
               adjacency (continuous relaxation of the edge choice, Gumbel top-k
               edges per agent, straight-through) with attention over the kept edges.
=============  ==================================================================

Conventions
-----------
* ``adj[b, i, j] = 1`` means *agent i receives from agent j* (row = receiver).
  ``adj`` may be ``[N, N]`` (shared by the batch) or ``[B, N, N]``; ``None``
  means the complete graph. The diagonal is ignored: an agent's own state is
  not a message.
* ``forward(h, adj=None, samples=None) -> CommOutput``. In training mode
  (``module.train()``) stochastic modules draw their randomness (DIAL's noise,
  IC3Net's gate actions, CommFormer's and MAGIC's Gumbel noise) and return the
  draws in ``CommOutput.samples``; passing those ``samples`` back replays the
  same draws, so that PPO's update evaluates exactly the policy that acted.
  In evaluation mode (``module.eval()``) every module is deterministic (DIAL
  sends discretised bits, gates open iff ``p > 1/2``, top-k without noise).
* ``CommOutput.messages [B]`` counts directed messages (sender -> receiver,
  ``i != j``) actually sent in this forward, summed over rounds, and
  ``CommOutput.edges [B, N, N]`` holds the graph used in the last round; the
  trainer logs the mean of ``messages`` as *messages per step*.
* ``CommOutput.log_prob`` / ``entropy [B, N]`` are set only by modules with a
  discrete communication *action* (IC3Net's gate); PPO adds them to the
  agents' action log-probabilities and entropies.
* Randomness comes from ``module.generator`` (a ``torch.Generator`` the trainer
  sets, for reproducibility) or the global generator when it is ``None``.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "COMM_MODULES",
    "DIAL",
    "CommFormer",
    "CommModule",
    "CommNet",
    "CommOutput",
    "GATComm",
    "IC3Net",
    "NoComm",
    "TarMAC",
    "check_comm_kwargs",
    "comm_names",
    "make_comm",
]


@dataclass
class CommOutput:
    """What a communication module returns (see the module docstring)."""

    h: Tensor  # [B, N, H] hidden states with messages integrated
    messages: Tensor  # [B] directed messages sent (all rounds)
    edges: Tensor  # [B, N, N] receiver-row graph of the last round
    samples: dict[str, Tensor] = field(default_factory=dict)  # random draws, to replay
    log_prob: Tensor | None = None  # [B, N] log-prob of discrete comm actions
    entropy: Tensor | None = None  # [B, N] entropy of discrete comm actions
    extras: dict[str, Any] = field(default_factory=dict)  # e.g. attention weights


def full_adjacency(adj: Tensor | None, batch: int, n: int, device, dtype) -> Tensor:
    """``adj`` as a float ``[B, N, N]`` receiver-row mask with a zero diagonal
    (``None`` -> the complete graph without self-loops)."""
    eye = torch.eye(n, device=device, dtype=dtype)
    if adj is None:
        a = (1.0 - eye).expand(batch, n, n)
    else:
        a = adj.to(device=device, dtype=dtype)
        if a.dim() == 2:
            a = a.expand(batch, n, n)
        if a.shape != (batch, n, n):
            raise ValueError(f"adjacency of shape {tuple(adj.shape)} does not fit {batch} envs x {n} agents")
        a = (a != 0).to(dtype) * (1.0 - eye)
    return a


def masked_softmax(scores: Tensor, mask: Tensor, dim: int = -1) -> Tensor:
    """Softmax over the entries where ``mask`` is non-zero; rows with no entry give 0."""
    scores = scores.masked_fill(mask == 0, float("-inf"))
    w = torch.softmax(scores, dim=dim)
    return torch.nan_to_num(w, nan=0.0)


def _gumbel(shape, like: Tensor, generator: torch.Generator | None) -> Tensor:
    u = torch.rand(
        shape,
        generator=generator,
        device=like.device if generator is None else generator.device,
        dtype=like.dtype,
    ).to(like.device)
    return -torch.log(-torch.log(u.clamp(1e-10, 1.0 - 1e-7)))


class CommModule(nn.Module):
    """Base class: ``forward(h [B,N,H], adj=None, samples=None) -> CommOutput``."""

    name = "base"

    def __init__(self, hidden_size: int, num_agents: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_agents = num_agents
        self.generator: torch.Generator | None = None

    def _check(self, h: Tensor) -> tuple[int, int]:
        if h.dim() != 3 or h.shape[2] != self.hidden_size:
            raise ValueError(f"{self.name}: expected h [B, N, {self.hidden_size}], got {tuple(h.shape)}")
        return h.shape[0], h.shape[1]

    def _randn(self, shape, like: Tensor) -> Tensor:
        g = self.generator
        x = torch.randn(shape, generator=g, device=like.device if g is None else g.device, dtype=like.dtype)
        return x.to(like.device)


# --------------------------------------------------------------------- none --


class NoComm(CommModule):
    """No communication: ``h' = h`` and zero messages (the baseline)."""

    name = "none"

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        return CommOutput(h=h, messages=h.new_zeros(b), edges=h.new_zeros(b, n, n))


# ------------------------------------------------------------------ CommNet --


class CommNet(CommModule):
    """CommNet (Sukhbaatar et al., NeurIPS 2016, arXiv 1605.07736).

    For ``K = rounds`` communication steps, with ``h^0 = h``::

        c_i^k     = 1/|N(i)| * sum_{j in N(i)} h_j^k          (N(i): i's senders, j != i;
                                                                 the complete graph gives 1/(N-1))
        h_i^{k+1} = tanh(H^k h_i^k + C^k c_i^k)

    and ``h' = h^K``. Every agent broadcasts to every neighbour in every round:
    ``messages = K * sum_ij adj_ij``.
    """

    name = "commnet"

    def __init__(self, hidden_size: int, num_agents: int, rounds: int = 2):
        super().__init__(hidden_size, num_agents)
        if rounds < 1:
            raise ValueError("commnet: rounds must be >= 1")
        self.rounds = rounds
        self.H = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(rounds))
        self.C = nn.ModuleList(nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(rounds))

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        a = full_adjacency(adj, b, n, h.device, h.dtype)
        deg = a.sum(-1, keepdim=True).clamp_min(1.0)
        for k in range(self.rounds):
            c = torch.bmm(a, h) / deg  # mean over senders
            h = torch.tanh(self.H[k](h) + self.C[k](c))
        return CommOutput(h=h, messages=a.sum((1, 2)) * self.rounds, edges=a)


# ------------------------------------------------------------------- TarMAC --


class TarMAC(CommModule):
    """TarMAC (Das et al., ICML 2019, arXiv 1810.11187): targeted multi-round communication.

    In each of ``rounds`` rounds every agent j emits a signature (key)
    ``k_j = W_k h_j`` and a value ``v_j = W_v h_j``; a receiver i forms a query
    ``q_i = W_q h_i`` and attends::

        alpha_ij = softmax_j( q_i . k_j / sqrt(d_k) )     over j in N(i) (plus i itself
                                                           when ``self_attention``, as in the paper)
        c_i      = sum_j alpha_ij v_j
        h_i     <- tanh(W_h h_i + W_c c_i)

    ``alpha`` of every round is returned in ``extras["attention"]`` (``[B, N, N]``
    each) and the contexts in ``extras["context"]``. Every agent's message
    reaches every neighbour (soft, targeted by the weights):
    ``messages = rounds * sum_ij adj_ij``.
    """

    name = "tarmac"

    def __init__(
        self,
        hidden_size: int,
        num_agents: int,
        rounds: int = 2,
        key_size: int = 16,
        value_size: int | None = None,
        self_attention: bool = True,
    ):
        super().__init__(hidden_size, num_agents)
        if rounds < 1:
            raise ValueError("tarmac: rounds must be >= 1")
        value_size = value_size or hidden_size
        self.rounds, self.key_size, self.self_attention = rounds, key_size, self_attention
        self.W_k = nn.ModuleList(nn.Linear(hidden_size, key_size) for _ in range(rounds))
        self.W_q = nn.ModuleList(nn.Linear(hidden_size, key_size) for _ in range(rounds))
        self.W_v = nn.ModuleList(nn.Linear(hidden_size, value_size) for _ in range(rounds))
        self.W_h = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(rounds))
        self.W_c = nn.ModuleList(nn.Linear(value_size, hidden_size, bias=False) for _ in range(rounds))

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        a = full_adjacency(adj, b, n, h.device, h.dtype)
        att_mask = a + torch.eye(n, device=h.device, dtype=h.dtype) if self.self_attention else a
        attention, contexts = [], []
        for r in range(self.rounds):
            k, q, v = self.W_k[r](h), self.W_q[r](h), self.W_v[r](h)
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.key_size)  # [B, N(recv), N(send)]
            alpha = masked_softmax(scores, att_mask)
            c = torch.bmm(alpha, v)
            h = torch.tanh(self.W_h[r](h) + self.W_c[r](c))
            attention.append(alpha)
            contexts.append(c)
        return CommOutput(
            h=h,
            messages=a.sum((1, 2)) * self.rounds,
            edges=a,
            extras={"attention": attention, "context": contexts},
        )


# ------------------------------------------------------------------- IC3Net --


class IC3Net(CommModule):
    """IC3Net (Singh, Jain & Sukhbaatar, ICLR 2019, arXiv 1812.09755): CommNet with a
    learned binary communication gate per agent.

    Each agent i chooses a gate action ``g_i ~ Bernoulli(p_i)``, ``p_i =
    sigmoid(w_g . h_i + b_g)``; only open gates send::

        c_i^k     = 1/|N(i)| * sum_{j in N(i)} g_j h_j^k
        h_i^{k+1} = tanh(H^k h_i^k + C^k c_i^k)

    The gate is trained as IC3Net trains it: as an *extra discrete action with
    its own log-probability*, ``log pi(g_i) = g_i log p_i + (1-g_i) log(1-p_i)``,
    which PPO adds to the agent's action log-probability (``CommOutput.log_prob``;
    its entropy joins the entropy bonus). No gradient flows through ``g``. In
    evaluation mode the gate is greedy (open iff ``p_i > 1/2``); ``samples["gate"]``
    (``[B, N]`` in {0, 1}) replays or forces gates. ``messages = rounds *
    sum_ij adj_ij g_j``. ``gate_bias`` initialises ``b_g`` (0: p = 1/2).
    """

    name = "ic3net"

    def __init__(self, hidden_size: int, num_agents: int, rounds: int = 2, gate_bias: float = 0.0):
        super().__init__(hidden_size, num_agents)
        if rounds < 1:
            raise ValueError("ic3net: rounds must be >= 1")
        self.rounds = rounds
        self.gate = nn.Linear(hidden_size, 1)
        nn.init.normal_(self.gate.weight, std=0.01)
        nn.init.constant_(self.gate.bias, gate_bias)
        self.H = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(rounds))
        self.C = nn.ModuleList(nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(rounds))

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        a = full_adjacency(adj, b, n, h.device, h.dtype)
        logit = self.gate(h).squeeze(-1)  # [B, N]
        if samples is not None and "gate" in samples:
            g = samples["gate"].to(h.dtype)
        elif self.training:
            u = torch.rand(
                logit.shape,
                generator=self.generator,
                device=h.device if self.generator is None else self.generator.device,
                dtype=h.dtype,
            ).to(h.device)
            g = (u < torch.sigmoid(logit).detach()).to(h.dtype)
        else:
            g = (logit > 0).to(h.dtype)
        log_prob = -F.binary_cross_entropy_with_logits(logit, g, reduction="none")
        p = torch.sigmoid(logit)
        entropy = F.binary_cross_entropy_with_logits(logit, p, reduction="none")
        sent = a * g.unsqueeze(1)  # i receives from j iff j's gate is open
        deg = a.sum(-1, keepdim=True).clamp_min(1.0)
        for k in range(self.rounds):
            c = torch.bmm(sent, h) / deg
            h = torch.tanh(self.H[k](h) + self.C[k](c))
        return CommOutput(
            h=h,
            messages=sent.sum((1, 2)) * self.rounds,
            edges=sent,
            samples={"gate": g.detach()},
            log_prob=log_prob,
            entropy=entropy,
            extras={"gate_prob": p},
        )


# --------------------------------------------------------------------- DIAL --


class DIAL(CommModule):
    """DIAL (Foerster, Assael, de Freitas & Whiteson, NeurIPS 2016, arXiv 1605.06676).

    Each agent j emits real-valued message logits ``m_j = W_m h_j`` (``message_size``
    bits) which pass through the discretise/regularise unit (DRU)::

        DRU(m) = sigmoid(m + eps), eps ~ N(0, sigma^2)     in training (differentiable:
                                                            gradients flow from receivers
                                                            back into the sender)
        DRU(m) = 1{m > 0}                                  at execution (discrete bits)

    A receiver i concatenates the messages of all agents in fixed agent order,
    zeroing its own slot and non-neighbours (``c_i = [adj_ij DRU(m_j)]_j``), and
    ``h_i' = tanh(W_h h_i + W_c c_i)``. One round. ``samples["noise"]``
    (``[B, N, M]``, standard normal, scaled by ``sigma``) replays the noise.
    ``messages = sum_ij adj_ij``; ``extras["channel"]`` holds ``DRU(m)``.
    """

    name = "dial"

    def __init__(self, hidden_size: int, num_agents: int, message_size: int = 8, sigma: float = 2.0):
        super().__init__(hidden_size, num_agents)
        self.message_size, self.sigma = message_size, sigma
        self.W_m = nn.Linear(hidden_size, message_size)
        self.W_h = nn.Linear(hidden_size, hidden_size)
        self.W_c = nn.Linear(num_agents * message_size, hidden_size, bias=False)

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        a = full_adjacency(adj, b, n, h.device, h.dtype)
        m = self.W_m(h)  # [B, N, M]
        out_samples: dict[str, Tensor] = {}
        if self.training:
            noise = (
                samples["noise"] if samples is not None and "noise" in samples else self._randn(m.shape, m)
            )
            channel = torch.sigmoid(m + self.sigma * noise)
            out_samples["noise"] = noise.detach()
        else:
            channel = (m > 0).to(h.dtype)
        # receiver i sees sender j's message in slot j iff adj[i, j]
        c = (a.unsqueeze(-1) * channel.unsqueeze(1)).reshape(b, n, n * self.message_size)
        h_new = torch.tanh(self.W_h(h) + self.W_c(c))
        return CommOutput(
            h=h_new, messages=a.sum((1, 2)), edges=a, samples=out_samples, extras={"channel": channel}
        )


# ---------------------------------------------------------------------- GAT --


class GATComm(CommModule):
    """Graph-attention message passing over an adjacency (MAGIC-style).

    The message processor of MAGIC (Niu et al., AAMAS 2021) is a graph attention
    network (Velickovic et al., ICLR 2018). Per round and head::

        z_i      = W h_i
        e_ij     = LeakyReLU( a^T [z_i || z_j] )
        alpha_ij = softmax_{j in N(i) + {i}} e_ij        (only along edges: adj_ij = 1, or j = i)
        c_i      = ||_heads sum_j alpha_ij z_j
        h_i     <- tanh(W_h h_i + W_c ELU(c_i))

    so nothing flows along a missing edge. The graph is ``adj`` (``None`` ->
    complete), or, with ``scheduler=True``, MAGIC's scheduler: for each ordered
    pair an MLP on ``[h_i || h_j]`` gives two logits (drop, keep), sampled as a
    hard straight-through Gumbel-softmax in training (``samples["gumbel"]``
    ``[B, N, N, 2]`` replays it) and argmax at execution, and multiplied into the
    given ``adj``. ``messages = rounds * sum_ij graph_ij``; ``extras["attention"]``
    holds the weights of each round (``[B, heads, N, N]``).
    """

    name = "gat"

    def __init__(
        self,
        hidden_size: int,
        num_agents: int,
        rounds: int = 2,
        heads: int = 2,
        scheduler: bool = False,
        tau: float = 1.0,
    ):
        super().__init__(hidden_size, num_agents)
        if rounds < 1 or heads < 1 or hidden_size % heads:
            raise ValueError("gat: need rounds >= 1 and heads dividing hidden_size")
        self.rounds, self.heads, self.head_size, self.tau = rounds, heads, hidden_size // heads, tau
        self.W = nn.ModuleList(nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(rounds))
        self.a_src = nn.ParameterList(
            nn.Parameter(torch.randn(heads, self.head_size) * 0.1) for _ in range(rounds)
        )
        self.a_dst = nn.ParameterList(
            nn.Parameter(torch.randn(heads, self.head_size) * 0.1) for _ in range(rounds)
        )
        self.W_h = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(rounds))
        self.W_c = nn.ModuleList(nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(rounds))
        self.scheduler = (
            nn.Sequential(
                nn.Linear(2 * hidden_size, hidden_size // 2), nn.ReLU(), nn.Linear(hidden_size // 2, 2)
            )
            if scheduler
            else None
        )

    def _schedule(self, h: Tensor, a: Tensor, samples: dict | None, out: dict) -> Tensor:
        if self.scheduler is None:
            raise RuntimeError("_schedule needs the module built with scheduler=True")
        b, n, H = h.shape
        pair = torch.cat([h.unsqueeze(2).expand(b, n, n, H), h.unsqueeze(1).expand(b, n, n, H)], -1)
        logits = self.scheduler(pair)  # [B, N(recv), N(send), 2]
        if self.training:
            gumbel = (
                samples["gumbel"]
                if samples is not None and "gumbel" in samples
                else _gumbel(logits.shape, logits, self.generator)
            )
            out["gumbel"] = gumbel.detach()
            y = torch.softmax((logits + gumbel) / self.tau, -1)
            hard = F.one_hot(y.argmax(-1), 2).to(y.dtype)
            keep = (hard - y.detach() + y)[..., 1]  # straight-through
        else:
            keep = (logits[..., 1] > logits[..., 0]).to(h.dtype)
        return a * keep

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        a = full_adjacency(adj, b, n, h.device, h.dtype)
        out_samples: dict[str, Tensor] = {}
        if self.scheduler is not None:
            a = self._schedule(h, a, samples, out_samples)
        eye = torch.eye(n, device=h.device, dtype=h.dtype)
        mask = ((a != 0).to(h.dtype) + eye).unsqueeze(1)  # [B, 1, N, N] with self-loops
        weight = (a + eye).unsqueeze(1)  # 1 on edges (carries the scheduler's straight-through grad)
        attention = []
        for r in range(self.rounds):
            z = self.W[r](h).view(b, n, self.heads, self.head_size).transpose(1, 2)  # [B, h, N, d]
            e_dst = (z * self.a_dst[r].view(1, self.heads, 1, -1)).sum(-1)  # receiver term
            e_src = (z * self.a_src[r].view(1, self.heads, 1, -1)).sum(-1)  # sender term
            e = F.leaky_relu(e_dst.unsqueeze(-1) + e_src.unsqueeze(-2), 0.2)  # [B, h, N, N]
            alpha = masked_softmax(e, mask) * weight
            c = torch.matmul(alpha, z).transpose(1, 2).reshape(b, n, self.hidden_size)
            h = torch.tanh(self.W_h[r](h) + self.W_c[r](F.elu(c)))
            attention.append(alpha)
        return CommOutput(
            h=h,
            messages=(a != 0).to(h.dtype).sum((1, 2)) * self.rounds,
            edges=a,
            samples=out_samples,
            extras={"attention": attention},
        )


# --------------------------------------------------------------- CommFormer --


class CommFormer(CommModule):
    """CommFormer (Hu, Shen, Zhang & Tao, ICLR 2024, arXiv 2405.08550): learning the
    communication graph by continuous relaxation.

    The architecture parameter ``alpha in R^{N x N}`` scores every directed edge.
    In training each receiver i keeps exactly ``k`` senders by Gumbel top-k and
    the choice is relaxed for gradients (straight-through)::

        s_ij   = alpha_ij + g_ij,  g_ij ~ Gumbel(0, 1)          (j != i)
        A_ij   = 1{ j in top-k_j s_ij }  (forward)
        dA_ij  = d softmax_j(s_ij / tau)  (backward)

    and at execution ``A = top-k(alpha)`` without noise. Messages then pass by
    attention restricted to the graph (the self-loop always kept), ``rounds``
    times::

        w_ij = softmax_{j: A_ij = 1 or j = i}( q_i . k_j / sqrt(d) ),   c_i = sum_j A'_ij w_ij v_j
        h_i <- tanh(W_h h_i + W_c c_i)                         (A' = A with the diagonal set to 1)

    ``alpha`` is trained jointly with the policy by the PPO loss (the paper
    alternates policy and graph updates; one joint step is the simplification
    here). The paper's sparsity ratio S corresponds to ``k = S * (N - 1)``
    senders per agent. ``adj`` is ignored: the graph is what this module learns.
    ``samples["gumbel"]`` (``[B, N, N]``) replays the noise. Exactly ``N * k``
    messages per round: ``messages = rounds * N * k``.
    """

    name = "commformer"

    def __init__(
        self,
        hidden_size: int,
        num_agents: int,
        k: int = 1,
        rounds: int = 2,
        key_size: int = 16,
        tau: float = 1.0,
    ):
        super().__init__(hidden_size, num_agents)
        if not 1 <= k <= max(num_agents - 1, 1):
            raise ValueError(f"commformer: k must be in [1, {max(num_agents - 1, 1)}], got {k}")
        if rounds < 1:
            raise ValueError("commformer: rounds must be >= 1")
        self.k, self.rounds, self.key_size, self.tau = k, rounds, key_size, tau
        self.alpha = nn.Parameter(torch.zeros(num_agents, num_agents))
        self.W_k = nn.ModuleList(nn.Linear(hidden_size, key_size) for _ in range(rounds))
        self.W_q = nn.ModuleList(nn.Linear(hidden_size, key_size) for _ in range(rounds))
        self.W_v = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(rounds))
        self.W_h = nn.ModuleList(nn.Linear(hidden_size, hidden_size) for _ in range(rounds))
        self.W_c = nn.ModuleList(nn.Linear(hidden_size, hidden_size, bias=False) for _ in range(rounds))

    def graph(self, batch: int, samples: dict | None = None, out: dict | None = None) -> Tensor:
        """The ``[B, N, N]`` receiver-row graph with exactly ``k`` senders per agent."""
        n = self.num_agents
        eye = torch.eye(n, device=self.alpha.device, dtype=torch.bool)
        if n == 1:
            return self.alpha.new_zeros(batch, 1, 1)
        logits = self.alpha.expand(batch, n, n)
        if self.training:
            g = (
                samples["gumbel"]
                if samples is not None and "gumbel" in samples
                else _gumbel((batch, n, n), self.alpha, self.generator)
            )
            if out is not None:
                out["gumbel"] = g.detach()
            s = (logits + g).masked_fill(eye, float("-inf"))
            soft = torch.softmax(s / self.tau, -1)
        else:
            s = logits.masked_fill(eye, float("-inf"))
            soft = None
        idx = s.topk(self.k, dim=-1).indices
        hard = torch.zeros_like(logits).scatter(-1, idx, 1.0)
        return hard if soft is None else hard - soft.detach() + soft

    def forward(self, h: Tensor, adj: Tensor | None = None, samples: dict | None = None) -> CommOutput:
        b, n = self._check(h)
        out_samples: dict[str, Tensor] = {}
        A = self.graph(b, samples, out_samples).to(h.dtype)
        eye = torch.eye(n, device=h.device, dtype=h.dtype)
        mask = (A.detach() != 0).to(h.dtype) + eye
        weight = A + eye
        attention = []
        for r in range(self.rounds):
            k, q, v = self.W_k[r](h), self.W_q[r](h), self.W_v[r](h)
            scores = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(self.key_size)
            w = masked_softmax(scores, mask) * weight
            h = torch.tanh(self.W_h[r](h) + self.W_c[r](torch.bmm(w, v)))
            attention.append(w)
        hard = (A.detach() != 0).to(h.dtype)
        return CommOutput(
            h=h,
            messages=hard.sum((1, 2)) * self.rounds,
            edges=hard,
            samples=out_samples,
            extras={"attention": attention},
        )


# ----------------------------------------------------------------- registry --

COMM_MODULES: dict[str, type[CommModule]] = {
    "none": NoComm,
    "commnet": CommNet,
    "tarmac": TarMAC,
    "ic3net": IC3Net,
    "dial": DIAL,
    "gat": GATComm,
    "commformer": CommFormer,
}


def comm_names() -> list[str]:
    """The registered communication module names."""
    return list(COMM_MODULES)


def check_comm_kwargs(name: str, kwargs: dict[str, Any]) -> type[CommModule]:
    """The class registered as ``name`` after checking that it accepts ``kwargs``;
    ``ValueError`` names the bad value and the known/accepted ones."""
    try:
        cls = COMM_MODULES[name]
    except KeyError:
        raise ValueError(f"unknown comm module {name!r}; known: {', '.join(COMM_MODULES)}") from None
    accepted = [
        p
        for p in inspect.signature(cls.__init__).parameters
        if p not in ("self", "hidden_size", "num_agents")
    ]
    bad = sorted(set(kwargs) - set(accepted))
    if bad:
        raise ValueError(
            f"comm module {name!r}: unknown comm_kwargs {', '.join(bad)} "
            f"(accepted: {', '.join(accepted) or 'none'})"
        )
    return cls


def make_comm(name: str, hidden_size: int, num_agents: int, **kwargs: Any) -> CommModule:
    """Build the registered module ``name``; an unknown name or keyword raises
    ``ValueError`` naming the bad value and the known ones."""
    return check_comm_kwargs(name, kwargs)(hidden_size, num_agents, **kwargs)
