"""Train a routing policy (GPTSwarm or G-Designer) on the routing environment and write a run directory.

:func:`train_routing` takes a :class:`RoutingTrainConfig` (pydantic; from
code, a dict or a YAML file) and writes to ``out_dir``:

- ``config.yaml`` — the resolved configuration (learning rate filled in);
- ``metrics.jsonl`` — one line per update: sampled-graph success, messages,
  reward, baseline, loss, mean edge probability; every ``eval_every``
  updates also the pruned policy's held-out ``eval_success``,
  ``eval_messages``, ``eval_reward`` and ``eval_edges``;
- ``learning_curve.png`` — success, reward and messages against updates,
  with the fully connected graph for reference;
- the learned topology as a :class:`societas.topology.Graph`: ``graph.yaml``,
  ``graph.mmd`` (Mermaid) and ``graph.png`` for GPTSwarm (one graph for every
  task); ``graph_<type>.{yaml,mmd,png}`` per task type for G-Designer;
- ``tensorboard/`` — TensorBoard event files (``tensorboard: false`` for none), at
  the update: ``train/<key>`` for each ``metrics.jsonl`` key of the sampled graphs,
  ``train/entropy`` (entropy of the routing policy's edge distribution, nats per
  graph, before the update) and ``train/edge_entropy`` (per candidate edge),
  ``eval/<key>`` for the ``eval_<key>`` figures, and at the last update the final
  comparison as ``final/<topology>/<key>``;
- ``summary.md`` and ``result.json`` — the learned routing on held-out tasks
  against the fully connected graph, the empty graph and random graphs with
  the same number of edges (success, messages per task, reward), and the same
  learned graphs run through :class:`societas.topology.Runtime` with skill-profile
  :class:`societas.agents.FunctionLLM` agents (which must agree with the fast path).

Training shows a rich progress bar on standard error when ``progress=True``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from societas.agents.documents import DocumentError, load_yaml_file
from societas.marl.board import open_board
from societas.marl.device import resolve_device
from societas.marl.progress import progress_bar
from societas.topology import Graph, graph_to_mermaid, render_graph_png
from societas.topology.errors import SpecError, spec_error_from_validation

from .env import RoutingEnv, RoutingEnvConfig, TaskBatch, run_runtime
from .gdesigner import GDesignerConfig, GDesignerRouter
from .gptswarm import (
    GPTSwarmConfig,
    GPTSwarmRouter,
    MovingAverageBaseline,
    reinforce_update,
)
from .live import POLICY_FILE, save_policy

log = logging.getLogger(__name__)

__all__ = [
    "RoutingConfigError",
    "RoutingRunResult",
    "RoutingTrainConfig",
    "evaluate_routing",
    "train_routing",
]

_DEVICE_RE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


class RoutingConfigError(SpecError):
    """A routing configuration value is invalid; ``str()`` reads ``"field.path: what is wrong"``."""


class RoutingTrainConfig(BaseModel):
    """Everything a routing run needs. ``lr=None`` uses the method's own default (GPTSwarm 0.1, G-Designer 0.03)."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["gptswarm", "gdesigner"] = "gdesigner"
    env: RoutingEnvConfig = Field(default_factory=RoutingEnvConfig)
    steps: int = Field(1500, ge=1, description="REINFORCE updates")
    batch_size: int = Field(128, ge=2, description="tasks (one sampled graph each) per update")
    lr: float | None = Field(None, gt=0.0)
    seed: int = 0
    device: str = "auto"
    eval_every: int = Field(50, ge=1, description="updates between held-out evaluations in metrics.jsonl")
    eval_tasks: int = Field(2000, ge=1, description="held-out tasks of the final comparison")
    runtime_tasks: int = Field(
        100, ge=0, description="held-out tasks also run through societas.topology.Runtime"
    )
    prune_dead_ends: bool = Field(True, description="drop learned edges that cannot reach the answerer")
    tensorboard: bool = Field(True, description="write TensorBoard event files into OUT/tensorboard/")
    gptswarm: GPTSwarmConfig = Field(default_factory=GPTSwarmConfig)
    gdesigner: GDesignerConfig = Field(default_factory=GDesignerConfig)

    @field_validator("device")
    @classmethod
    def _check_device(cls, v: str) -> str:
        if not _DEVICE_RE.match(v):
            raise ValueError(f"unknown device {v!r} (use auto, cpu, cuda, cuda:N or mps)")
        return v

    @property
    def resolved_lr(self) -> float:
        if self.lr is not None:
            return self.lr
        return self.gptswarm.lr if self.method == "gptswarm" else self.gdesigner.lr

    @classmethod
    def from_data(cls, data: Any) -> RoutingTrainConfig:
        """Validate a mapping; errors become :class:`RoutingConfigError` naming the field path."""
        if not isinstance(data, dict):
            raise RoutingConfigError("", f"a routing config must be a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_error_from_validation(exc, cls, error_cls=RoutingConfigError) from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> RoutingTrainConfig:
        """The config in the YAML file ``path``; every error names the file (``"c.yaml: steps: ..."``)."""
        try:
            data = load_yaml_file(path)  # the project's guarded loader: UTF-8, size and alias limits
        except DocumentError as exc:
            raise RoutingConfigError("", f"cannot read {exc}") from None
        try:
            return cls.from_data(data if data is not None else {})
        except RoutingConfigError as exc:
            raise RoutingConfigError("", f"{path}: {exc}") from None


@dataclass
class RoutingRunResult:
    """What a routing run produced (also written to ``out_dir``)."""

    out_dir: Path
    config: RoutingTrainConfig
    table: dict[str, dict[str, float]]  # topology -> success / messages / reward on held-out tasks
    runtime: dict[str, dict[str, float]]  # topology -> success / messages / calls through the Runtime
    runtime_agrees: bool
    graphs: dict[str, Graph]  # "graph" (GPTSwarm) or task type name (G-Designer)
    wall_s: float
    router: Any = field(repr=False, default=None)
    env: RoutingEnv | None = field(repr=False, default=None)

    def to_dict(self) -> dict[str, Any]:
        learned, full = self.table["learned"], self.table["fully_connected"]
        return {
            "method": self.config.method,
            "seed": self.config.seed,
            "steps": self.config.steps,
            "out": str(self.out_dir),
            "table": self.table,
            "runtime": self.runtime,
            "runtime_agrees": self.runtime_agrees,
            "message_reduction": 1.0 - learned["messages"] / full["messages"] if full["messages"] else 0.0,
            "success_gap": full["success"] - learned["success"],
            "graphs": {k: [f"{a} -> {b}" for a, b in g.edges] for k, g in self.graphs.items()},
            "wall_s": self.wall_s,
        }


# ---------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------


@torch.no_grad()
def _policy_entropy(router: Any, env: RoutingEnv, tasks: TaskBatch) -> tuple[float, float]:
    """Entropy (nats) of the edges a router samples for ``tasks``: per graph (edges are
    independent Bernoulli draws, so their entropies add) and per candidate edge.
    G-Designer's latent noise is left out (its edge probabilities at ``z = mu``)."""
    probs = router.edge_probs() if isinstance(router, GPTSwarmRouter) else router.edge_probs(tasks)
    p = probs.clamp(1e-7, 1 - 1e-7)
    h = -(p * p.log() + (1 - p) * (1 - p).log()) * env.candidates
    per_graph = float(h.sum(dim=(-2, -1)).mean())
    return per_graph, per_graph / max(int(env.candidates.sum()), 1)


def _learned_adjacency(router: Any, env: RoutingEnv, tasks: TaskBatch, prune: bool) -> torch.Tensor:
    adj = router.adjacency(tasks)
    if adj.dim() == 2:
        adj = adj.expand(len(tasks), *adj.shape)
    return env.prune_dead_ends(adj) if prune else adj


def evaluate_routing(
    env: RoutingEnv, learned: torch.Tensor, tasks: TaskBatch, *, seed: int = 0
) -> dict[str, dict[str, float]]:
    """Success, messages per task and reward of ``learned`` (``[B, N, N]``) and of the reference graphs."""
    g = torch.Generator().manual_seed(int(seed) + 20_000)
    counts = learned.sum(dim=(-2, -1))
    rows = {
        "fully_connected": env.full_adjacency(),
        "empty": env.empty_adjacency(),
        "random_same_edges": env.random_adjacency(counts, g),
        "learned": learned,
    }
    return {name: env.evaluate(adj, tasks).summary() for name, adj in rows.items()}


# ---------------------------------------------------------------------------
# plotting and writing
# ---------------------------------------------------------------------------


def _plot_learning_curve(rows: list[dict[str, Any]], full: dict[str, float], path: Path, title: str) -> Path:
    steps = [r["step"] for r in rows]
    ev = [r for r in rows if "eval_success" in r]
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(
        steps, [r["success"] for r in rows], color="tab:blue", alpha=0.35, lw=0.8, label="success (sampled)"
    )
    ax1.plot(
        steps, [r["reward"] for r in rows], color="tab:green", alpha=0.35, lw=0.8, label="reward (sampled)"
    )
    if ev:
        xs = [r["step"] for r in ev]
        ax1.plot(
            xs, [r["eval_success"] for r in ev], color="tab:blue", lw=2, label="success (pruned, held-out)"
        )
        ax1.plot(
            xs, [r["eval_reward"] for r in ev], color="tab:green", lw=2, label="reward (pruned, held-out)"
        )
    ax1.axhline(full["success"], color="k", ls="--", lw=1, label="fully connected success")
    ax1.axhline(full["reward"], color="gray", ls=":", lw=1, label="fully connected reward")
    ax1.set_xlabel("update")
    ax1.set_ylim(min(-0.05, min(r["reward"] for r in rows) - 0.05), 1.05)
    ax1.legend(fontsize=7, loc="lower right")
    ax1.set_title("success and reward")
    ax2.plot(
        steps,
        [r["messages"] for r in rows],
        color="tab:orange",
        alpha=0.35,
        lw=0.8,
        label="messages (sampled)",
    )
    if ev:
        ax2.plot([r["step"] for r in ev], [r["eval_messages"] for r in ev], color="tab:orange", lw=2,
                 label="messages (pruned, held-out)")  # fmt: skip
    ax2.axhline(full["messages"], color="k", ls="--", lw=1, label="fully connected")
    ax2.set_xlabel("update")
    ax2.set_ylabel("messages per task")
    ax2.set_ylim(bottom=0)
    ax2.legend(fontsize=7)
    ax2.set_title("messages per task")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path


def _write_graph(graph: Graph, stem: Path) -> None:
    graph.spec.save(stem.with_suffix(".yaml"))
    stem.with_suffix(".mmd").write_text(graph_to_mermaid(graph, direction="LR"), encoding="utf-8")
    render_graph_png(graph, stem.with_suffix(".png"))


def _fmt(row: dict[str, float], keys: tuple[str, ...] = ("success", "messages", "reward")) -> str:
    return " | ".join(f"{row[k]:.3f}" if k != "messages" else f"{row[k]:.2f}" for k in keys)


def _summary_md(res: RoutingRunResult, env: RoutingEnv) -> str:
    cfg = res.config
    p = env.profile
    roles = {r: p.roles.count(r) for r in ("keeper", "expert", "answerer")}
    t = res.table
    names = {
        "fully_connected": "fully connected DAG",
        "empty": "empty graph",
        "random_same_edges": "random DAG, same edge count as learned",
        "learned": f"learned ({cfg.method})",
    }
    lines = [
        f"# Learned routing: {cfg.method}, seed {cfg.seed}",
        "",
        (
            f"Environment: {env.n_agents} agents ({roles['keeper']} fact keepers, {roles['expert']} experts, "
            f"1 answerer), {env.n_types} task types ({', '.join(p.type_names)}), {cfg.env.facts_per_task} facts "
            f"per task, cost {cfg.env.cost_per_message} per message. Reward = success - cost x messages."
        ),
        (
            f"Training: {cfg.steps} REINFORCE updates of {cfg.batch_size} tasks, lr {cfg.resolved_lr}, "
            f"{res.wall_s:.1f} s. Evaluation on {cfg.eval_tasks} held-out tasks (odd uids, never trained on)."
        ),
        "",
        "| topology | success | messages / task | reward |",
        "|---|---|---|---|",
    ]
    lines += [f"| {names[k]} | {_fmt(t[k])} |" for k in names]
    full, learned = t["fully_connected"], t["learned"]
    red = 1.0 - learned["messages"] / full["messages"] if full["messages"] else 0.0
    lines += [
        "",
        (
            f"Learned routing: success {learned['success']:.3f} vs {full['success']:.3f} for the fully connected "
            f"graph, with {learned['messages']:.2f} instead of {full['messages']:.0f} messages per task "
            f"({100 * red:.0f}% fewer)."
        ),
        "",
    ]
    if res.runtime:
        n = cfg.runtime_tasks
        lines += [
            f"Through `societas.topology.Runtime` with skill-profile FunctionLLM agents ({n} held-out tasks):",
            "",
            "| topology | success | messages / task | LLM calls / task |",
            "|---|---|---|---|",
        ]
        for k, row in res.runtime.items():
            lines.append(
                f"| {names.get(k, k)} | {row['success']:.3f} | {row['messages']:.2f} | {row['calls']:.2f} |"
            )
        verdict = "yes" if res.runtime_agrees else "NO"
        lines += [
            "",
            f"Runtime and fast path agree on every task's success and message count: {verdict}.",
            "",
        ]
    lines.append("Learned topologies (Mermaid files beside this summary):")
    lines.append("")
    for k, g in res.graphs.items():
        edges = ", ".join(f"{a} -> {b}" for a, b in g.edges) or "(no edges)"
        label = "every task" if k == "graph" else f"type {k}"
        lines.append(f"- {label}: {edges}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# training
# ---------------------------------------------------------------------------


def train_routing(
    config: RoutingTrainConfig | dict[str, Any], out_dir: str | Path, progress: bool = True
) -> RoutingRunResult:
    """Train ``config.method`` on the routing environment; write the run directory (see the module docstring)."""
    cfg = config if isinstance(config, RoutingTrainConfig) else RoutingTrainConfig.from_data(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        device = resolve_device(cfg.device)
    except ValueError as exc:
        raise RoutingConfigError("device", str(exc)) from None
    t0 = time.perf_counter()
    env = RoutingEnv(cfg.env, device=device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        if cfg.method == "gptswarm":
            router: Any = GPTSwarmRouter(env, cfg.gptswarm)
            momentum = cfg.gptswarm.baseline_momentum
        else:
            router = GDesignerRouter(env, cfg.gdesigner)
            momentum = cfg.gdesigner.baseline_momentum
    optimizer = router.make_optimizer(cfg.resolved_lr)
    baseline = MovingAverageBaseline(momentum)
    task_gen = torch.Generator().manual_seed(cfg.seed)
    policy_gen = torch.Generator(device=device).manual_seed(cfg.seed + 1)
    test = env.sample_tasks(cfg.eval_tasks, split="test", generator=cfg.seed + 10_000)
    monitor = test.select(slice(0, min(len(test), 500)))
    full_ref = env.evaluate(env.full_adjacency(), test).summary()

    resolved = cfg.model_dump(mode="json")
    resolved["lr"] = cfg.resolved_lr
    resolved["device"] = str(device)
    (out / "config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False), encoding="utf-8")

    rows: list[dict[str, Any]] = []
    log.info("training %s routing for %d updates on %s", cfg.method, cfg.steps, device)
    # A run starts over in its directory (metrics.jsonl is rewritten): earlier event files' points are purged.
    board = open_board(out, enabled=cfg.tensorboard, purge_step=0)
    with board:
        with (
            (out / "metrics.jsonl").open("w", encoding="utf-8") as mf,
            progress_bar(progress, field="stats") as bar,
        ):
            task_id = bar.add_task(f"routing {cfg.method}", total=cfg.steps, stats="")
            for step in range(1, cfg.steps + 1):
                tasks = env.sample_tasks(cfg.batch_size, split="train", generator=task_gen)
                router.train()
                if board.enabled:  # no random draw: the run is the same with the event files off
                    entropy, edge_entropy = _policy_entropy(router, env, tasks)
                    board.scalars({"entropy": entropy, "edge_entropy": edge_entropy}, step, prefix="train/")
                row: dict[str, Any] = {
                    "step": step,
                    **reinforce_update(router, env, tasks, optimizer, baseline, policy_gen),
                }
                if step % cfg.eval_every == 0 or step == cfg.steps or step == 1:
                    router.eval()
                    learned = _learned_adjacency(router, env, monitor, cfg.prune_dead_ends)
                    ev = env.evaluate(learned, monitor).summary()
                    row.update({f"eval_{k}": v for k, v in ev.items()})
                    row["eval_edges"] = float(learned.sum(dim=(-2, -1)).float().mean())
                    bar.update(task_id, stats=f"success {ev['success']:.2f} msgs {ev['messages']:.1f}")
                rows.append(row)
                mf.write(json.dumps(row) + "\n")
                for key, value in row.items():
                    if key != "step":
                        tag = f"eval/{key[5:]}" if key.startswith("eval_") else f"train/{key}"
                        board.scalar(tag, value, step)
                bar.advance(task_id)
        train_s = time.perf_counter() - t0

        router.eval()
        learned = _learned_adjacency(router, env, test, cfg.prune_dead_ends)
        table = evaluate_routing(env, learned, test, seed=cfg.seed)
        for name, figures in table.items():
            board.scalars(figures, cfg.steps, prefix=f"final/{name}/")

    runtime: dict[str, dict[str, float]] = {}
    agrees = True
    if cfg.runtime_tasks:
        sub = test.select(slice(0, min(cfg.runtime_tasks, len(test))))
        for name, adj in (("learned", learned[: len(sub)]), ("fully_connected", env.full_adjacency())):
            rt = run_runtime(env, adj, sub, seed=cfg.seed)
            fast = env.evaluate(adj, sub)
            agrees &= (
                rt.success == fast.success.tolist()
                and [float(m) for m in rt.messages] == fast.messages.tolist()
            )
            runtime[name] = rt.summary()
        if not agrees:
            log.warning("the Runtime path and the fast path disagree on some task")

    if cfg.method == "gptswarm":
        graphs = {"graph": router.graph(env, prune=cfg.prune_dead_ends, name="gptswarm")}
    else:
        graphs = router.type_graphs(env, prune=cfg.prune_dead_ends, name="gdesigner")
    for key, g in graphs.items():
        _write_graph(g, out / ("graph" if key == "graph" else f"graph_{key}"))

    res = RoutingRunResult(out, cfg, table, runtime, agrees, graphs, train_s, router, env)
    # The trained weights, so that PolicyRouter.from_checkpoint(out) routes a Runtime's messages live.
    save_policy(router, env, out / POLICY_FILE)
    _plot_learning_curve(rows, full_ref, out / "learning_curve.png", f"{cfg.method} routing, seed {cfg.seed}")
    (out / "summary.md").write_text(_summary_md(res, env), encoding="utf-8")
    (out / "result.json").write_text(json.dumps(res.to_dict(), indent=2), encoding="utf-8")
    log.info("routing run written to %s", out)
    return res
