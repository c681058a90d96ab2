"""A trained routing policy as a live router of :mod:`societas.topology.routing`.

:class:`PolicyRouter` wraps a trained :class:`~societas.marl.routing.GPTSwarmRouter`
or :class:`~societas.marl.routing.GDesignerRouter` with the
:class:`~societas.marl.routing.RoutingEnv` it was trained on, and implements
both :class:`societas.topology.routing.Router` (``route(ctx)``) and
:class:`societas.topology.routing.BatchRouter` (``route_batch(ctxs)``), so a
graph whose edges are chosen per message can be routed by the learned policy
while the topology layer never imports ``marl``.

For one output of source node ``s`` with allowed targets ``ctx.targets``, the
router reads the policy's probability of each edge ``s -> t``:

* GPTSwarm: the task-independent edge probabilities ``sigmoid(theta)``;
* G-Designer: the edge probabilities decoded for the task (``z = mu``, as at
  evaluation), conditioned on the same task features the policy was trained
  with: the task type is read from the task text (the environment's
  ``"Task <uid> (type: <name>)"``, or a ``task_type`` function), a
  :class:`~societas.marl.routing.TaskBatch` of those types is built by
  :meth:`RoutingEnv.sample_tasks` and the policy's own ``edge_probs`` embeds
  it through :meth:`RoutingEnv.task_features`, exactly as the trainer's
  evaluation does.

Only candidate edges of the environment (agent ``i`` to a later agent ``j >
i``) have a probability; any other edge has probability 0.

Decisions (``END`` is never given a probability of its own by the policy):

* ``mode="greedy"`` (default): every target with ``p >= threshold``. When
  none passes, the branch ends (``END``) when ``END`` is allowed — the
  trained policy sends no message then, as in its pruned graph — and
  otherwise the single most probable target goes.
* ``mode="sample"``: one Bernoulli draw per target, ``u < p``, from a
  ``torch.Generator`` seeded by a hash of ``(seed, ctx.task_index,
  ctx.source, ctx.instance, ctx.step)``, so a rerun reproduces every
  decision. When nothing is drawn: ``END`` when allowed, else the most
  probable target.
* ``multi=False`` (default) keeps only the most probable of the picked
  targets (the router then suits a node that routes to one target);
  ``multi=True`` returns every picked target. Ties go to the target
  declared first.

:meth:`PolicyRouter.explain` gives a context's probabilities (``END``: the
probability that no edge is drawn, ``prod(1 - p)``), and
:attr:`PolicyRouter.last_decisions` holds what the last ``route`` /
``route_batch`` call decided, with the probabilities, for a trace to record.

Checkpoints: :func:`train_routing` writes the run directory (configuration,
metrics, graphs) but not the policy's weights, so a trained policy is saved
with :func:`save_policy` (or :meth:`PolicyRouter.save`) into one file holding
the method, the environment's and the policy's configurations and the
weights; :meth:`PolicyRouter.from_checkpoint` and :func:`load_policy` read
that file, or ``policy.pt`` inside a run directory.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ValidationError

from societas.topology.routing import END, RouteContext, RouteDecision, RoutingError

from .env import RoutingEnv, RoutingEnvConfig
from .gdesigner import GDesignerConfig, GDesignerRouter
from .gptswarm import GPTSwarmConfig, GPTSwarmRouter

__all__ = [
    "CHECKPOINT_KIND",
    "POLICY_FILE",
    "PolicyCheckpointError",
    "PolicyDecision",
    "PolicyRouter",
    "load_policy",
    "save_policy",
    "task_type_from_text",
]

CHECKPOINT_KIND = "societas.marl.routing.policy"
"""The ``kind`` field of a policy checkpoint written by :func:`save_policy`."""
CHECKPOINT_VERSION = 1
POLICY_FILE = "policy.pt"
"""The checkpoint's file name inside a run directory."""

_TYPE_RE = re.compile(r"\(type: ([^)]+)\)")

Policy = GPTSwarmRouter | GDesignerRouter


class PolicyCheckpointError(ValueError):
    """A policy checkpoint is missing, unreadable or of the wrong kind; ``str()`` starts with the file."""

    def __init__(self, path: str | Path, message: str) -> None:
        self.path = Path(path)
        self.message = message
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class PolicyDecision:
    """One routing decision: where the output went and the probabilities it was decided on."""

    source: str
    step: int
    instance: int
    task_index: int
    probs: dict[str, float]  # target -> probability (END: probability that no edge is drawn)
    chosen: tuple[str, ...]


# ---------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------


def _method(policy: Any) -> str:
    if isinstance(policy, GPTSwarmRouter):
        return "gptswarm"
    if isinstance(policy, GDesignerRouter):
        return "gdesigner"
    raise TypeError(f"expected a GPTSwarmRouter or GDesignerRouter, got {type(policy).__name__}")


def save_policy(policy: Policy, env: RoutingEnv, path: str | Path) -> Path:
    """Write ``policy`` (trained on ``env``) to ``path`` (a file, or a directory: ``path/policy.pt``).

    The file holds the method, both configurations and the weights (on the
    CPU); it is written to a temporary name and renamed, so a reader never
    sees half a file. Returns the file's path.
    """
    method = _method(policy)
    if policy.n_agents != env.n_agents:
        raise ValueError(f"the policy routes {policy.n_agents} agents but the env has {env.n_agents}")
    target = Path(path)
    if target.is_dir():
        target = target / POLICY_FILE
    payload = {
        "kind": CHECKPOINT_KIND,
        "version": CHECKPOINT_VERSION,
        "method": method,
        "env": env.config.model_dump(mode="json"),
        "config": policy.config.model_dump(mode="json"),
        "state_dict": {k: v.detach().cpu() for k, v in policy.state_dict().items()},
    }
    tmp = target.with_name(target.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, target)
    return target


def _validated(model: type[BaseModel], data: Any, file: Path, key: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in (key, *err["loc"]))
        raise PolicyCheckpointError(file, f"{where}: {err['msg']}") from None


def load_policy(path: str | Path, *, device: str | torch.device = "cpu") -> tuple[Policy, RoutingEnv]:
    """The policy and its environment from a :func:`save_policy` file (or a run directory's ``policy.pt``).

    Every problem is a :class:`PolicyCheckpointError` naming the file: a
    missing path, a run directory without ``policy.pt``, a file torch cannot
    read, a torch file that is not a routing-policy checkpoint, a bad
    configuration or weights that do not fit the policy.
    """
    p = Path(path)
    if p.is_dir():
        file = p / POLICY_FILE
        if not file.is_file():
            raise PolicyCheckpointError(
                file,
                "missing: this directory holds no trained policy (a training run writes its configuration, "
                "metrics and graphs; the weights are saved with save_policy or PolicyRouter.save)",
            )
    elif not p.exists():
        raise PolicyCheckpointError(p, "no such file or directory")
    else:
        file = p
    try:
        obj = torch.load(file, map_location="cpu", weights_only=True)
    except OSError as exc:
        raise PolicyCheckpointError(file, f"cannot read: {exc.strerror or exc}") from None
    except (
        Exception
    ) as exc:  # torch.load raises many types (KeyError, EOFError, UnpicklingError...) on non-checkpoints
        detail = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise PolicyCheckpointError(
            file, f"not a routing-policy checkpoint (torch.load cannot read it: {detail})"
        ) from None
    if not isinstance(obj, dict) or obj.get("kind") != CHECKPOINT_KIND:
        what = f"kind {obj.get('kind')!r}" if isinstance(obj, dict) and "kind" in obj else "no 'kind' field"
        if not isinstance(obj, dict):
            what = f"a {type(obj).__name__}"
        raise PolicyCheckpointError(
            file, f"not a routing-policy checkpoint ({what}; expected kind {CHECKPOINT_KIND!r})"
        )
    version = obj.get("version")
    if version != CHECKPOINT_VERSION:
        raise PolicyCheckpointError(
            file, f"checkpoint version {version!r} is not supported (this code reads {CHECKPOINT_VERSION})"
        )
    method = obj.get("method")
    if method not in ("gptswarm", "gdesigner"):
        raise PolicyCheckpointError(file, f"method: {method!r} is not gptswarm or gdesigner")
    state = obj.get("state_dict")
    if not isinstance(state, dict):
        raise PolicyCheckpointError(file, "state_dict: missing or not a mapping of tensors")
    env_cfg = _validated(RoutingEnvConfig, obj.get("env"), file, "env")
    env = RoutingEnv(env_cfg, device=device)
    # Building the modules draws initial weights; keep the caller's global RNG where it was.
    with torch.random.fork_rng(devices=[]):
        policy: Policy
        if method == "gptswarm":
            policy = GPTSwarmRouter(env, _validated(GPTSwarmConfig, obj.get("config"), file, "config"))
        else:
            policy = GDesignerRouter(env, _validated(GDesignerConfig, obj.get("config"), file, "config"))
    try:
        policy.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        raise PolicyCheckpointError(
            file, f"the weights do not fit a {method} policy for its env: {' '.join(first[:3])[:300]}"
        ) from None
    policy.to(env.device)
    policy.eval()
    return policy, env


# ---------------------------------------------------------------------------
# the router
# ---------------------------------------------------------------------------


def task_type_from_text(env: RoutingEnv, text: str) -> int:
    """The task type named in a routing task's text (``"... (type: <name>) ..."``), as an index.

    Raises :class:`ValueError` when the text names no type or one the env does not know.
    """
    m = _TYPE_RE.search(text)
    names = env.profile.type_names
    if m is None:
        raise ValueError(f"the task text names no task type ('(type: <name>)'): {text[:80]!r}")
    name = m.group(1).strip()
    if name not in names:
        raise ValueError(f"the task text names type {name!r}, not one of {', '.join(names)}")
    return names.index(name)


def _seed_of(*parts: Any) -> int:
    h = hashlib.blake2b("|".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1  # a non-negative 63-bit seed


class PolicyRouter:
    """A trained routing policy behind the :class:`~societas.topology.routing.Router` and
    :class:`~societas.topology.routing.BatchRouter` protocols (see the module docstring).

    ``node_map`` maps a graph node id to the env agent it stands for
    (``{node_id: agent_name}``); a node not in it must be named like its
    agent. ``threshold=None`` takes the policy's own (``config.threshold``,
    0.5 by default). ``task_type`` (G-Designer only) maps a task text to a
    task type (index or name) when the texts are not the environment's. A
    source or target that is no agent of the team raises
    :class:`~societas.topology.routing.RoutingError` naming it at first use
    (or at :meth:`validate`).
    """

    def __init__(
        self,
        policy: Policy,
        env: RoutingEnv,
        *,
        node_map: Mapping[str, str] | None = None,
        mode: Literal["greedy", "sample"] = "greedy",
        threshold: float | None = None,
        seed: int = 0,
        multi: bool = False,
        task_type: Callable[[str], int | str] | None = None,
        name: str | None = None,
    ) -> None:
        self.method = _method(policy)
        if policy.n_agents != env.n_agents:
            raise ValueError(f"the policy routes {policy.n_agents} agents but the env has {env.n_agents}")
        if mode not in ("greedy", "sample"):
            raise ValueError(f"mode must be 'greedy' or 'sample', got {mode!r}")
        thr = float(policy.config.threshold if threshold is None else threshold)
        if not 0.0 < thr <= 1.0:
            raise ValueError(f"threshold must lie in (0, 1], got {thr}")
        self.policy = policy
        self.env = env
        self.mode = mode
        self.threshold = thr
        self.seed = int(seed)
        self.multi = bool(multi)
        self.name = name if name is not None else f"policy:{self.method}"
        self._task_type = task_type
        self._agents = {a: i for i, a in enumerate(env.profile.names)}
        node_map = dict(node_map or {})
        bad = {node: agent for node, agent in node_map.items() if agent not in self._agents}
        if bad:
            raise ValueError(
                "node_map maps "
                + ", ".join(f"{n!r} to {a!r}" for n, a in bad.items())
                + f", which is no agent of the policy's team ({', '.join(env.profile.names)})"
            )
        self.node_map = node_map
        self._checked: set[tuple[str, tuple[str, ...]]] = set()
        self.last_decisions: list[PolicyDecision] = []

    def __repr__(self) -> str:
        return (
            f"PolicyRouter({self.method}, mode={self.mode!r}, threshold={self.threshold}, "
            f"multi={self.multi}, seed={self.seed})"
        )

    # -- construction from a file --------------------------------------------------
    @classmethod
    def from_checkpoint(
        cls,
        path: str | Path,
        *,
        node_map: Mapping[str, str] | None = None,
        mode: Literal["greedy", "sample"] = "greedy",
        threshold: float | None = None,
        seed: int = 0,
        multi: bool = False,
        task_type: Callable[[str], int | str] | None = None,
        name: str | None = None,
        device: str | torch.device = "cpu",
    ) -> PolicyRouter:
        """A router over the policy in ``path`` (a :func:`save_policy` file or a run directory holding
        ``policy.pt``); errors are :class:`PolicyCheckpointError` naming the file."""
        policy, env = load_policy(path, device=device)
        return cls(
            policy,
            env,
            node_map=node_map,
            mode=mode,
            threshold=threshold,
            seed=seed,
            multi=multi,
            task_type=task_type,
            name=name,
        )

    def save(self, path: str | Path) -> Path:
        """Write the wrapped policy with :func:`save_policy` (the routing options are not saved)."""
        return save_policy(self.policy, self.env, path)

    # -- node ids ------------------------------------------------------------------
    def agent_of(self, node: str) -> str:
        """The env agent a graph node stands for."""
        return self.node_map.get(node, node)

    def validate(self, source: str, targets: Sequence[str]) -> None:
        """Raise :class:`RoutingError` naming every node of ``source`` / ``targets`` (``END`` aside) that
        maps to no agent of the policy's team."""
        key = (source, tuple(targets))
        if key in self._checked:
            return
        unknown = [n for n in (source, *targets) if n != END and self.agent_of(n) not in self._agents]
        if unknown:
            shown = ", ".join(
                repr(n) if self.agent_of(n) == n else f"{n!r} (mapped to {self.agent_of(n)!r})"
                for n in dict.fromkeys(unknown)
            )
            verb = "is not an agent" if len(set(unknown)) == 1 else "are not agents"
            raise RoutingError(
                f"router {self.name!r} on {source!r}: {shown} {verb} of the policy's team "
                f"({', '.join(self._agents)}); name the nodes after the agents "
                "or give node_map={node_id: agent}"
            )
        self._checked.add(key)

    # -- probabilities -------------------------------------------------------------------
    def _type_index(self, ctx: RouteContext) -> int:
        try:
            if self._task_type is None:
                return task_type_from_text(self.env, ctx.task)
            t = self._task_type(ctx.task)
            names = self.env.profile.type_names
            if isinstance(t, str):
                if t not in names:
                    raise ValueError(f"task_type returned {t!r}, not one of {', '.join(names)}")
                return names.index(t)
            if not 0 <= int(t) < len(names):
                raise ValueError(f"task_type returned {t!r}, not a type index in 0..{len(names) - 1}")
            return int(t)
        except ValueError as exc:
            raise RoutingError(
                f"router {self.name!r} on {ctx.source!r} (task {ctx.task_index}): {exc}"
            ) from None

    @torch.no_grad()
    def _rows(self, ctxs: Sequence[RouteContext]) -> list[list[float]]:
        """Each context's source row of edge probabilities (``[N]``), from one forward pass."""
        for ctx in ctxs:
            self.validate(ctx.source, ctx.targets)
        sources = [self._agents[self.agent_of(c.source)] for c in ctxs]
        if isinstance(self.policy, GPTSwarmRouter):
            probs = self.policy.edge_probs().cpu()
            return [probs[s].tolist() for s in sources]
        # G-Designer: one row of the batch per distinct task type among the contexts' texts.
        by_text: dict[str, int] = {}
        for ctx in ctxs:
            if ctx.task not in by_text:
                by_text[ctx.task] = self._type_index(ctx)
        types = sorted(set(by_text.values()))
        tasks = self.env.sample_tasks(len(types), split="test", generator=0, types=types)
        probs = self.policy.edge_probs(tasks).cpu()  # [len(types), N, N]
        row_of = {t: r for r, t in enumerate(types)}
        return [probs[row_of[by_text[c.task]], s].tolist() for c, s in zip(ctxs, sources)]

    def _probs(self, ctx: RouteContext, row: list[float]) -> dict[str, float]:
        out = {t: float(row[self._agents[self.agent_of(t)]]) for t in ctx.targets if t != END}
        if END in ctx.targets:
            out[END] = math.prod(1.0 - p for p in out.values())
        return {t: out[t] for t in ctx.targets}

    def probabilities(self, ctxs: Sequence[RouteContext]) -> list[dict[str, float]]:
        """Each context's ``{target: probability}`` (as :meth:`explain`), from one forward pass."""
        return [self._probs(c, r) for c, r in zip(ctxs, self._rows(ctxs))]

    def explain(self, ctx: RouteContext) -> dict[str, float]:
        """``{target: p(source -> target)}`` in declaration order; ``END`` (when allowed) gets the
        probability that no edge is drawn, ``prod(1 - p)``."""
        return self.probabilities([ctx])[0]

    # -- decisions -----------------------------------------------------------------------
    def _decide(self, ctx: RouteContext, probs: dict[str, float]) -> tuple[str, ...]:
        if not ctx.targets:
            raise RoutingError(f"router {self.name!r} on {ctx.source!r}: no targets to route to")
        edges = [t for t in ctx.targets if t != END]
        if self.mode == "greedy":
            picked = [t for t in edges if probs[t] >= self.threshold]
        else:
            g = torch.Generator().manual_seed(
                _seed_of(self.seed, ctx.task_index, ctx.source, ctx.instance, ctx.step)
            )
            draws = torch.rand(len(edges), generator=g).tolist()
            picked = [t for t, u in zip(edges, draws) if u < probs[t]]
        if not picked:
            if END in ctx.targets or not edges:
                return (END,)
            picked = [max(edges, key=lambda t: probs[t])]  # max keeps the first of equals
        if not self.multi and len(picked) > 1:
            picked = [max(picked, key=lambda t: probs[t])]
        return tuple(picked)

    def route_batch(self, ctxs: Sequence[RouteContext]) -> list[RouteDecision]:
        """Every context's decision, the policy evaluated once for all of them."""
        decisions: list[RouteDecision] = []
        log: list[PolicyDecision] = []
        if ctxs:
            for ctx, probs in zip(ctxs, self.probabilities(ctxs)):
                chosen = self._decide(ctx, probs)
                log.append(PolicyDecision(ctx.source, ctx.step, ctx.instance, ctx.task_index, probs, chosen))
                decisions.append(list(chosen) if self.multi else chosen[0])
        self.last_decisions = log
        return decisions

    def route(self, ctx: RouteContext) -> RouteDecision:
        """Where this output goes: one target id (``multi=False``) or a list of them (``multi=True``)."""
        return self.route_batch([ctx])[0]
