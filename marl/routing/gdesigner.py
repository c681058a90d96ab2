"""G-Designer: a task-conditioned communication topology from a graph auto-encoder over the agents.

Reference: Zhang et al., "G-Designer: Architecting Multi-agent Communication
Topologies via Graph Neural Networks", ICML 2025 (arXiv 2410.11782), section 3.

The multi-agent network has one node per agent, with features from its
profile (here: facts held per task type, skill per type, role), plus a *task
virtual node* whose features embed the query (here: the task type, one-hot)
and which is linked to every agent. An optional *anchor topology*
``A_anchor`` (a prior such as the role graph keepers -> experts -> answerer)
adds agent-agent links to the encoder graph. Per task:

    X~ = [X_agents W_a ; x_task W_t],      A~ = sym(A_anchor) + task-node links
    mu = GNN_mu(X~, A~),  log sigma = GNN_sigma(X~, A~)          (VGAE encoder)
    z_i = mu_i + sigma_i * eps_i,  eps ~ N(0, I)   (training; z = mu at test)
    S_ij = sigmoid(MLP([z_i, z_j, z_i * z_j]) + b)               (edge decoder)
    a_ij ~ Bernoulli(S_ij) on the candidate edges i < j          (the topology)

The GNN is a stack of GCN layers ``H' = D^-1/2 (A + I) D^-1/2 H W`` or GAT
layers (both written here in torch, dense, batched over tasks). Training
maximises the utility ``u = success - cost * messages`` by REINFORCE with a
moving-average baseline (:func:`societas.marl.routing.gptswarm.reinforce_update`)
and adds the paper's regularisers:

    L = -(u - b) log p(G | task)  +  beta_rank ||S||_*  +  beta_anchor BCE(S, A_anchor)  +  beta_kl KL(q(Z) || N(0, I))

``||S||_*`` (nuclear norm, the convex surrogate of rank) is the sparsity
regulariser that pushes the decoded topology to be sparse and low-rank;
the anchor term keeps it near the prior (off by default here, where the cost
per message already rewards sparsity); the KL term is the standard VGAE one.
One term is ours: ``logit_l2 * mean(logit^2)``, which stops edge
probabilities from saturating at 0 or 1 while the shared GNN weights are
still learning (a saturated edge is never flipped, so REINFORCE gets no
signal about it; GPTSwarm's independent logits do not need it).

Choices measured on the routing environment (8 agents, 4 task types): the
decoder is an MLP on ``(z_i, z_j, z_i * z_j)``, which contains the VGAE's
inner-product decoder (a linear read-out of ``z_i * z_j``) and is directed;
``decoder="inner"`` gives the bilinear ``<W_s z_i, W_d z_j>``, which learned
more slowly (8 messages a task after 800 updates, against 3.5). The anchor
is off by default: with the role anchor the keepers' embeddings mix over their
shared links, and in our runs the policy stalled at the role graph itself
(15 messages a task instead of 3).

What is implemented of the paper and what is not: the VGAE encoder with the
task virtual node, the decoder producing per-task edge probabilities, the
policy-gradient utility loss and the rank/anchor regularisers are. Not
implemented: the text encoder of agent profiles and queries (the features are
the structured profile and the task type, which is what the text would
encode here), the paper's two-stage decoder (a sketched dense topology refined
by a separate sparsity step — one decoder with the regulariser stands in for
both) and its temporal (multi-round) edges. Thresholding the decoded
probabilities at 0.5 gives each task's pruned :class:`societas.topology.Graph`
(:meth:`GDesignerRouter.graphs`).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F

from societas.topology import Graph

from .env import RoutingEnv, TaskBatch
from .gptswarm import RouterSample, sample_edges

__all__ = ["GATLayer", "GCNLayer", "GDesignerConfig", "GDesignerRouter", "normalized_adjacency"]


class GDesignerConfig(BaseModel):
    """G-Designer's hyper-parameters."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(0.03, gt=0.0, description="Adam learning rate")
    hidden: int = Field(32, ge=1, description="width of the GNN layers")
    latent: int = Field(16, ge=1, description="width of the latent agent embeddings z")
    layers: int = Field(2, ge=1, description="GNN layers before the mu / log sigma heads")
    gnn: Literal["gcn", "gat"] = "gcn"
    heads: int = Field(2, ge=1, description="attention heads of GAT layers")
    decoder: Literal["mlp", "inner"] = "mlp"
    anchor: Literal["none", "roles", "full", "chain"] = "none"
    variational: bool = True
    init_prob: float = Field(0.5, gt=0.0, lt=1.0, description="initial edge probability (decoder bias)")
    rank_weight: float = Field(0.002, ge=0.0, description="beta_rank: weight of the nuclear norm ||S||_*")
    anchor_weight: float = Field(0.0, ge=0.0, description="beta_anchor: weight of BCE(S, A_anchor)")
    kl_weight: float = Field(1e-3, ge=0.0, description="beta_kl: weight of the VGAE KL term")
    logit_l2: float = Field(0.01, ge=0.0, description="weight of mean(logit^2): keeps edges from saturating")
    baseline_momentum: float = Field(0.9, ge=0.0, lt=1.0)
    threshold: float = Field(0.5, gt=0.0, lt=1.0, description="edges with S > threshold are kept")


def normalized_adjacency(adj: torch.Tensor) -> torch.Tensor:
    """``D^-1/2 (A + I) D^-1/2`` of a (batched) symmetric adjacency (Kipf & Welling's GCN propagation)."""
    a = adj.float() + torch.eye(adj.shape[-1], device=adj.device)
    d = a.sum(-1).clamp(min=1e-12).rsqrt()
    return d[..., :, None] * a * d[..., None, :]


class GCNLayer(nn.Module):
    """``H' = A_norm H W + b`` on dense, batched graphs (``A_norm`` from :func:`normalized_adjacency`)."""

    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(d_in, d_out)

    def forward(self, h: torch.Tensor, a_norm: torch.Tensor, adj: torch.Tensor | None = None) -> torch.Tensor:
        return a_norm @ F.linear(h, self.lin.weight) + self.lin.bias


class GATLayer(nn.Module):
    """Graph attention (Velickovic et al. 2018) on dense, batched graphs: ``heads`` heads, concatenated.

    ``e_ij = LeakyReLU(a_s . W h_i + a_d . W h_j)`` over the neighbours of ``i``
    (itself included), softmax over ``j``, then ``h'_i = sum_j alpha_ij W h_j``.
    """

    def __init__(self, d_in: int, d_out: int, heads: int = 2) -> None:
        super().__init__()
        if d_out % heads:
            raise ValueError(f"GAT output width {d_out} is not divisible by {heads} heads")
        self.heads, self.d_head = heads, d_out // heads
        self.lin = nn.Linear(d_in, d_out, bias=False)
        self.att_src = nn.Parameter(torch.randn(heads, self.d_head) / math.sqrt(self.d_head))
        self.att_dst = nn.Parameter(torch.randn(heads, self.d_head) / math.sqrt(self.d_head))
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, h: torch.Tensor, a_norm: torch.Tensor, adj: torch.Tensor | None = None) -> torch.Tensor:
        if adj is None:
            raise ValueError("GATLayer needs the adjacency")
        *batch, m, _ = h.shape
        x = self.lin(h).view(*batch, m, self.heads, self.d_head)  # [.., M, H, D]
        s = (x * self.att_src).sum(-1)  # [.., M, H]
        d = (x * self.att_dst).sum(-1)
        e = F.leaky_relu(s.unsqueeze(-2) + d.unsqueeze(-3), 0.2)  # [.., M(i), M(j), H]
        nbr = (adj.bool() | torch.eye(m, dtype=torch.bool, device=h.device)).unsqueeze(-1)
        alpha = torch.softmax(e.masked_fill(~nbr, float("-inf")), dim=-2)
        out = torch.einsum("...ijh,...jhd->...ihd", alpha, x)
        return out.reshape(*batch, m, self.heads * self.d_head) + self.bias


def _anchor(env: RoutingEnv, kind: str) -> torch.Tensor:
    n = env.n_agents
    if kind == "roles":
        return env.role_adjacency()
    if kind == "full":
        return env.full_adjacency()
    if kind == "chain":
        a = torch.zeros(n, n, dtype=torch.bool, device=env.device)
        idx = torch.arange(n - 1, device=env.device)
        a[idx, idx + 1] = True
        return a
    return env.empty_adjacency()


class GDesignerRouter(nn.Module):
    """The task-conditioned graph policy: GNN encoder over agents + task node, edge decoder."""

    mask: torch.Tensor
    x_agents: torch.Tensor
    anchor: torch.Tensor
    enc_adj: torch.Tensor
    enc_norm: torch.Tensor

    def __init__(self, env: RoutingEnv, config: GDesignerConfig | None = None) -> None:
        super().__init__()
        cfg = config if config is not None else GDesignerConfig()
        self.config = cfg
        n = env.n_agents
        self.n_agents = n
        self._task_features = env.task_features
        self.register_buffer("mask", env.candidates.clone())
        self.register_buffer("x_agents", env.agent_features().float())
        anchor = _anchor(env, cfg.anchor)
        self.register_buffer("anchor", anchor.float())
        # Encoder graph over N agents + the task node (index N): the anchor, symmetrised,
        # plus task <-> every agent.
        m = n + 1
        enc = torch.zeros(m, m, device=env.device)
        enc[:n, :n] = (anchor | anchor.T).float()
        enc[n, :n] = 1.0
        enc[:n, n] = 1.0
        self.register_buffer("enc_adj", enc)
        self.register_buffer("enc_norm", normalized_adjacency(enc))
        self.agent_in = nn.Linear(self.x_agents.shape[-1], cfg.hidden)
        self.task_in = nn.Linear(env.n_types, cfg.hidden)

        def layer(d_in: int, d_out: int) -> nn.Module:
            if cfg.gnn == "gat":
                heads = cfg.heads if d_out % cfg.heads == 0 else 1
                return GATLayer(d_in, d_out, heads)
            return GCNLayer(d_in, d_out)

        self.gnn = nn.ModuleList(layer(cfg.hidden, cfg.hidden) for _ in range(cfg.layers))
        self.mu = layer(cfg.hidden, cfg.latent)
        self.logstd = layer(cfg.hidden, cfg.latent) if cfg.variational else None
        if cfg.decoder == "inner":
            self.src = nn.Linear(cfg.latent, cfg.latent, bias=False)
            self.dst = nn.Linear(cfg.latent, cfg.latent, bias=False)
        else:
            self.edge_mlp = nn.Sequential(
                nn.Linear(3 * cfg.latent, cfg.hidden), nn.ReLU(), nn.Linear(cfg.hidden, 1)
            )
        p0 = cfg.init_prob
        self.bias = nn.Parameter(torch.tensor(math.log(p0 / (1 - p0))))
        self.to(env.device)

    # -- encoder / decoder ----------------------------------------------------
    def encode(self, tasks: TaskBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``mu, log sigma`` of every node (agents, then the task node): ``[B, N + 1, latent]``."""
        b = len(tasks)
        xa = self.agent_in(self.x_agents).expand(b, -1, -1)
        xt = self.task_in(self._task_features(tasks)).unsqueeze(1)
        h = torch.cat([xa, xt], dim=1)
        for gnn in self.gnn:
            h = F.relu(gnn(h, self.enc_norm, self.enc_adj)) + h  # residual: keeps each agent's identity
        mu = self.mu(h, self.enc_norm, self.enc_adj)
        logstd = (
            self.logstd(h, self.enc_norm, self.enc_adj).clamp(-6.0, 2.0) if self.logstd is not None else None
        )
        return mu, logstd

    def edge_logits(self, z: torch.Tensor) -> torch.Tensor:
        """Edge logits ``[B, N, N]`` from agent latents ``z [B, N, d]``."""
        if self.config.decoder == "inner":
            return self.src(z) @ self.dst(z).transpose(-1, -2) / math.sqrt(z.shape[-1]) + self.bias
        n = z.shape[-2]
        zi = z.unsqueeze(-2).expand(*z.shape[:-2], n, n, z.shape[-1])  # source i along dim -3
        zj = z.unsqueeze(-3).expand(*z.shape[:-2], n, n, z.shape[-1])  # target j along dim -2
        return self.edge_mlp(torch.cat([zi, zj, zi * zj], dim=-1)).squeeze(-1) + self.bias

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Edge probabilities ``S [B, N, N]`` (0 off the candidate edges) from agent latents ``z [B, N, d]``."""
        return torch.sigmoid(self.edge_logits(z)) * self.mask

    def edge_probs(self, tasks: TaskBatch) -> torch.Tensor:
        """The deterministic per-task edge probabilities (``z = mu``)."""
        mu, _ = self.encode(tasks)
        return self.decode(mu[:, : self.n_agents])

    # -- the policy ---------------------------------------------------------------
    def sample(self, tasks: TaskBatch, generator: torch.Generator) -> RouterSample:
        cfg = self.config
        mu, logstd = self.encode(tasks)
        n = self.n_agents
        if logstd is not None:
            eps = torch.randn(mu.shape, generator=generator, device=mu.device)
            z = mu + logstd.exp() * eps
        else:
            z = mu
        logits = self.edge_logits(z[:, :n])
        s = torch.sigmoid(logits) * self.mask
        adj, log_prob = sample_edges(s, self.mask, generator)
        aux = torch.zeros((), device=s.device)
        if cfg.logit_l2:
            aux = aux + cfg.logit_l2 * (logits.pow(2) * self.mask).sum((-2, -1)).mean() / self.mask.sum()
        if cfg.rank_weight:
            aux = aux + cfg.rank_weight * torch.linalg.svdvals(s).sum(-1).mean()
        if cfg.anchor_weight:
            sel = self.mask.expand_as(s)
            target = self.anchor.expand_as(s)
            aux = aux + cfg.anchor_weight * F.binary_cross_entropy(s[sel].clamp(1e-6, 1 - 1e-6), target[sel])
        if cfg.kl_weight and logstd is not None:
            kl = -0.5 * (1 + 2 * logstd - mu.pow(2) - (2 * logstd).exp()).sum(-1).mean()
            aux = aux + cfg.kl_weight * kl
        return RouterSample(adj, log_prob, aux, s)

    @torch.no_grad()
    def adjacency(self, tasks: TaskBatch) -> torch.Tensor:
        """Each task's pruned topology: ``S > threshold`` (``[B, N, N]``)."""
        return (self.edge_probs(tasks) > self.config.threshold) & self.mask

    def make_optimizer(self, lr: float | None = None) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=lr if lr is not None else self.config.lr)

    def graphs(
        self, env: RoutingEnv, tasks: TaskBatch, *, prune: bool = True, name: str = "gdesigner"
    ) -> list[Graph]:
        """One :class:`societas.topology.Graph` per task (dead-end edges dropped when ``prune``)."""
        adj = self.adjacency(tasks)
        if prune:
            adj = env.prune_dead_ends(adj)
        return [env.graph(adj[i], name=f"{name}_{i}") for i in range(len(tasks))]

    def type_graphs(
        self, env: RoutingEnv, *, prune: bool = True, name: str = "gdesigner"
    ) -> dict[str, Graph]:
        """The topology designed for each task type (the task node sees only the type), by type name."""
        tasks = env.sample_tasks(env.n_types, split="test", generator=0, types=range(env.n_types))
        adj = self.adjacency(tasks)
        if prune:
            adj = env.prune_dead_ends(adj)
        return {
            tname: env.graph(adj[t], name=f"{name}_{tname}") for t, tname in enumerate(env.profile.type_names)
        }
