"""Training runs of MAPPO/IPPO with communication: run directory, checkpoint, evaluation.

:func:`train_comm` trains one :class:`~societas.marl.comm.mappo.MAPPOConfig` and writes
a run directory::

    out_dir/
      config.yaml         the resolved config (every field, defaults included)
      metrics.jsonl       one JSON object per update: env_steps, mean_episode_return,
                          messages_per_step, losses, entropy, approx_kl, sps, ...
      model.pt            checkpoint (actor, critic, value norm, optimisers, config),
                          written atomically (temp file + rename) every
                          ``checkpoint_every`` updates and at the end
      learning_curve.png  return (and messages per step) against env steps
      eval.json           greedy evaluation of the final policy
      summary.md          a short human-readable report
      tensorboard/        TensorBoard event files (``tensorboard=False``: none), at env steps:
                          rollout/mean_episode_return, rollout/std_episode_return,
                          rollout/mean_episode_length, rollout/episodes,
                          comm/messages_per_step, losses/{policy_loss, value_loss, entropy,
                          approx_kl, clipfrac, grad_norm, explained_variance},
                          perf/{sps, rollout_s, update_s, wall_s}, train/update, and the
                          greedy evaluation as eval/{return_mean, return_std, messages_per_step}

``metrics.jsonl`` is flushed after every update and ``model.pt`` is replaced
atomically, so killing a run loses no saved work. :func:`evaluate` runs a
trained policy greedily (comm modules in eval mode: DIAL discretised, IC3Net
gates and CommFormer graphs without noise) for ``episodes`` episodes and
reports the mean return and its standard deviation; :func:`load_policy`
rebuilds a trained :class:`~societas.marl.comm.mappo.MAPPO` from ``model.pt``.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from mpe2 import simple_speaker_listener_v4
from pydantic import ValidationError

from societas.marl.board import Board, open_board
from societas.marl.progress import progress_bar
from societas.topology.errors import spec_error_from_validation

from .envs import ENVS, PettingZooBatchedEnv, make_env
from .mappo import ALGOS, MAPPO, MAPPOConfig
from .modules import COMM_MODULES
from .plots import plot_learning_curve

logger = logging.getLogger(__name__)

__all__ = ["TrainResult", "evaluate", "load_policy", "run_cli_training", "train_comm"]


@dataclass
class TrainResult:
    """What :func:`train_comm` returns (also the ``--json`` line of the CLI)."""

    out_dir: str
    env: str
    algo: str
    comm: str
    seed: int
    env_steps: int
    updates: int
    final_return: float | None  # mean episode return over the last updates (training policy)
    eval_return_mean: float | None  # greedy evaluation
    eval_return_std: float | None
    eval_episodes: int
    messages_per_step: float  # mean over the last updates
    wall_s: float
    sps: float
    files: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write_bytes(path, text.encode())


def save_checkpoint(algo: MAPPO, path: str | Path) -> Path:
    """``torch.save`` the trainer's state to ``path`` atomically."""
    path = Path(path)
    buf = io.BytesIO()
    torch.save(algo.state_dict(), buf)
    _atomic_write_bytes(path, buf.getvalue())
    return path


def load_policy(
    path: str | Path, *, num_envs: int | None = None, device: str | None = None, env=None
) -> MAPPO:
    """A :class:`MAPPO` rebuilt from a checkpoint file or a run directory holding ``model.pt``."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.pt"
    sd = torch.load(path, map_location="cpu", weights_only=False)
    cfg = MAPPOConfig.model_validate(sd["config"])
    upd: dict[str, Any] = {}
    if num_envs is not None:
        upd["num_envs"] = num_envs
    if device is not None:
        upd["device"] = device
    if upd:
        cfg = cfg.model_copy(update=upd)
    algo = MAPPO(cfg, env=env)
    algo.load_state_dict(sd)
    return algo


@torch.no_grad()
def evaluate(
    policy: MAPPO | str | Path,
    episodes: int = 100,
    *,
    seed: int = 12345,
    deterministic: bool = True,
    env=None,
    max_envs: int = 1024,
) -> dict[str, Any]:
    """Run ``policy`` (a trainer, a checkpoint or a run directory) for ``episodes``
    episodes on a fresh env (``seed``), greedily by default, and return
    ``{"mean", "std", "episodes", "messages_per_step"}`` (return = mean over
    agents of each agent's undiscounted episode return)."""
    algo = policy if isinstance(policy, MAPPO) else load_policy(policy)
    cfg = algo.config
    if env is None:
        env = make_env(
            cfg.env,
            num_envs=min(episodes, max_envs),
            device=algo.device,
            seed=seed,
            max_cycles=cfg.max_cycles,
            **cfg.env_kwargs,
        )
    B, n = env.num_envs, len(algo.agents)
    obs = env.reset(seed=seed)
    rnn = algo.actor.initial_state(B, algo.device, algo.dtype)
    first = torch.ones(B, dtype=torch.bool, device=algo.device)
    ep_ret = torch.zeros(B, n, device=algo.device, dtype=algo.dtype)
    returns: list[torch.Tensor] = []
    done_count, msgs, steps = 0, 0.0, 0
    max_steps = (math.ceil(episodes / B) + 1) * env.max_cycles * 4 + 10
    while done_count < episodes and steps < max_steps:
        actions, rnn, co = algo.act(obs, rnn, first, deterministic=deterministic)
        msgs += float(co.messages.float().mean())
        obs, rewards, terminated, truncated, _ = env.step(
            {a: actions[:, i] for i, a in enumerate(algo.agents)}
        )
        ep_ret += torch.stack([rewards[a].to(algo.dtype) for a in algo.agents], -1)
        first = terminated | truncated
        if bool(first.any()):
            returns.append(ep_ret[first].mean(-1))
            done_count += int(first.sum())
            ep_ret[first] = 0.0
        steps += 1
    r = torch.cat(returns)[:episodes] if returns else torch.zeros(0)
    return {
        "mean": float(r.mean()) if r.numel() else None,
        "std": float(r.std(unbiased=False)) if r.numel() else None,
        "episodes": int(r.numel()),
        "messages_per_step": msgs / max(steps, 1),
    }


def _fmt(x: float | None, nd: int = 2) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _summary(cfg: MAPPOConfig, res: TrainResult, history: list[dict]) -> str:
    first = next(
        (m["mean_episode_return"] for m in history if m.get("mean_episode_return") is not None), None
    )
    lines = [
        f"# {cfg.algo.upper()} + {cfg.comm} on {cfg.env} (seed {cfg.seed})",
        "",
        (
            f"- env steps: {res.env_steps:,} in {res.updates} updates "
            f"({cfg.num_envs} envs x {cfg.rollout_steps} steps), {res.wall_s:.1f} s, {res.sps:,.0f} steps/s"
        ),
        (
            f"- mean episode return, first update: {_fmt(first)}; last updates (training policy): "
            f"{_fmt(res.final_return)}"
        ),
        (
            f"- greedy evaluation over {res.eval_episodes} episodes: "
            f"{_fmt(res.eval_return_mean)} ± {_fmt(res.eval_return_std)}"
        ),
        f"- messages per step: {res.messages_per_step:.2f}",
        (
            f"- actor: {'shared' if cfg.share_actor else 'per-agent'}, "
            f"{'GRU' if cfg.recurrent else 'feed-forward'}, hidden {cfg.hidden_size}; critic: "
            f"{'centralised on env.state()' if cfg.algo == 'mappo' else 'local observations'}"
        ),
        f"- comm kwargs: {json.dumps(cfg.comm_kwargs) if cfg.comm_kwargs else 'defaults'}",
        "",
        "Files: `config.yaml`, `metrics.jsonl`, `model.pt`, `learning_curve.png`, `eval.json`.",
        "",
    ]
    return "\n".join(lines)


def train_comm(
    config: MAPPOConfig | dict[str, Any],
    out_dir: str | Path,
    progress: bool = True,
    *,
    env=None,
    eval_episodes: int = 100,
    checkpoint_every: int = 10,
    final_window: int = 5,
    tensorboard: bool = True,
) -> TrainResult:
    """Train ``config`` and write the run directory ``out_dir`` (see the module
    docstring). ``env`` overrides the env built from the config (tests);
    ``eval_episodes=0`` skips the greedy evaluation. ``final_return`` is the
    mean of the last ``final_window`` updates' mean episode returns.
    ``tensorboard=False`` writes no event files."""
    cfg = config if isinstance(config, MAPPOConfig) else MAPPOConfig.model_validate(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _atomic_write_text(out / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    t0 = time.perf_counter()
    algo = MAPPO(cfg, env=env)
    history: list[dict] = []
    n_updates = cfg.num_updates
    logger.info(
        "training %s+%s on %s: %d updates of %d env steps",
        cfg.algo,
        cfg.comm,
        cfg.env,
        n_updates,
        cfg.steps_per_update,
    )
    # A run starts over in its directory (metrics.jsonl is rewritten): earlier event files' points are purged.
    board = open_board(out, enabled=tensorboard, purge_step=0)
    try:
        with open(out / "metrics.jsonl", "w") as mf, progress_bar(progress, field="info") as bar:
            task = bar.add_task(f"{cfg.algo}+{cfg.comm}", total=n_updates, info="")
            for m in algo.train_iter(n_updates):
                m["wall_s"] = time.perf_counter() - t0
                history.append(m)
                mf.write(json.dumps(m) + "\n")
                mf.flush()
                _board_update(board, m)
                if checkpoint_every and m["update"] % checkpoint_every == 0:
                    save_checkpoint(algo, out / "model.pt")
                bar.update(
                    task,
                    advance=1,
                    info=f"return {_fmt(m['mean_episode_return'])} msgs {m['messages_per_step']:.1f}",
                )
        save_checkpoint(algo, out / "model.pt")
        wall = time.perf_counter() - t0

        tail = history[-final_window:]
        rets = [m["mean_episode_return"] for m in tail if m["mean_episode_return"] is not None]
        if eval_episodes > 0:
            ev = evaluate(
                algo, eval_episodes, seed=cfg.seed + 10_007, env=None if env is None else _fresh_like(env)
            )
        else:
            ev = {"mean": None, "std": None, "episodes": 0, "messages_per_step": None}
        board.scalars(
            {
                "return_mean": ev["mean"],
                "return_std": ev["std"],
                "messages_per_step": ev["messages_per_step"],
            },
            algo.env_steps,
            prefix="eval/",
        )
    finally:
        board.close()
    _atomic_write_text(out / "eval.json", json.dumps(ev, indent=2))

    plot_learning_curve(
        history,
        out / "learning_curve.png",
        title=f"{cfg.algo.upper()} + {cfg.comm} on {cfg.env} (seed {cfg.seed})",
    )
    res = TrainResult(
        out_dir=str(out),
        env=cfg.env,
        algo=cfg.algo,
        comm=cfg.comm,
        seed=cfg.seed,
        env_steps=algo.env_steps,
        updates=algo.updates,
        final_return=sum(rets) / len(rets) if rets else None,
        eval_return_mean=ev["mean"],
        eval_return_std=ev["std"],
        eval_episodes=ev["episodes"],
        messages_per_step=sum(m["messages_per_step"] for m in tail) / max(len(tail), 1),
        wall_s=wall,
        sps=algo.env_steps / max(wall, 1e-9),
        files={
            k: str(out / f)
            for k, f in (
                ("config", "config.yaml"),
                ("metrics", "metrics.jsonl"),
                ("checkpoint", "model.pt"),
                ("plot", "learning_curve.png"),
                ("eval", "eval.json"),
                ("summary", "summary.md"),
            )
        },
    )
    _atomic_write_text(out / "summary.md", _summary(cfg, res, history))
    logger.info("done: %s", res.to_dict())
    return res


# TensorBoard sections of the per-update metrics (any other key goes under train/).
_BOARD_GROUPS = {
    "mean_episode_return": "rollout",
    "std_episode_return": "rollout",
    "mean_episode_length": "rollout",
    "episodes": "rollout",
    "messages_per_step": "comm",
    "policy_loss": "losses",
    "value_loss": "losses",
    "entropy": "losses",
    "approx_kl": "losses",
    "clipfrac": "losses",
    "grad_norm": "losses",
    "explained_variance": "losses",
    "sps": "perf",
    "rollout_s": "perf",
    "update_s": "perf",
    "wall_s": "perf",
}


def _board_update(board: Board, m: dict[str, Any]) -> None:
    """One update's metrics as TensorBoard points at its env step count (``section/key``)."""
    step = int(m["env_steps"])
    for key, value in m.items():
        if key != "env_steps":
            board.scalar(f"{_BOARD_GROUPS.get(key, 'train')}/{key}", value, step)


def _fresh_like(env):
    """An evaluation env for a user-supplied training env: ``env.clone()`` when it
    has one, else the env itself (it is reset by :func:`evaluate`)."""
    return env.clone() if hasattr(env, "clone") else env


def run_cli_training(
    *,
    env: str,
    algo: str,
    comm: str,
    steps: int,
    seed: int,
    out: str | Path,
    num_envs: int | None = None,
    device: str = "auto",
    comm_kwargs: dict[str, Any] | None = None,
    recurrent: bool = False,
    eval_episodes: int = 100,
    progress: bool = True,
    config_overrides: dict[str, Any] | None = None,
    tensorboard: bool = True,
) -> TrainResult:
    """The function behind ``python -m societas.marl train comm``: validates the names
    (``ValueError`` naming the bad value and the known ones) and trains."""
    if env not in ENVS:
        raise ValueError(f"unknown env {env!r}; known: {', '.join(ENVS)}")
    if algo not in ALGOS:
        raise ValueError(f"unknown algo {algo!r}; known: {', '.join(ALGOS)}")
    if comm not in COMM_MODULES:
        raise ValueError(f"unknown comm {comm!r}; known: {', '.join(COMM_MODULES)}")
    fields: dict[str, Any] = dict(config_overrides or {})
    fields.update(
        env=env,
        algo=algo,
        comm=comm,
        total_steps=steps,
        seed=seed,
        device=device,
        comm_kwargs=comm_kwargs or {},
        recurrent=recurrent,
    )
    if num_envs is not None:
        fields["num_envs"] = num_envs
    try:
        cfg = MAPPOConfig.model_validate(fields)
    except ValidationError as exc:
        # One line naming the field and what is wrong, like every other settings error.
        raise spec_error_from_validation(exc, MAPPOConfig) from None
    return train_comm(cfg, out, progress=progress, eval_episodes=eval_episodes, tensorboard=tensorboard)


def benchmark_train_throughput(
    num_envs: int,
    device: str = "auto",
    seconds: float = 2.0,
    *,
    backend: str = "torch",
    comm: str = "tarmac",
    seed: int = 0,
) -> float:
    """Env steps per second of whole MAPPO+``comm`` updates (rollout + PPO
    update) on speaker-listener with ``num_envs`` envs, over at least
    ``seconds`` after one warm-up update. ``backend="torch"``: the batched
    :class:`~societas.marl.comm.envs.SpeakerListenerEnv`; ``"mpe2"``: the same
    algorithm on mpe2's PettingZoo env, ``num_envs`` copies stepped in a
    Python loop (:class:`~societas.marl.comm.envs.PettingZooBatchedEnv`)."""
    cfg = MAPPOConfig(env="speaker_listener", comm=comm, num_envs=num_envs, device=device, seed=seed)
    env = None
    if backend == "mpe2":
        env = PettingZooBatchedEnv(
            lambda: simple_speaker_listener_v4.parallel_env(max_cycles=cfg.max_cycles),
            num_envs=num_envs,
            device=device,
            seed=seed,
        )
    elif backend != "torch":
        raise ValueError(f"unknown backend {backend!r}; known: torch, mpe2")
    algo = MAPPO(cfg, env=env)
    it = algo.train_iter(10**9)
    next(it)  # warm-up: allocations, first rollout
    start_steps, t0 = algo.env_steps, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        next(it)
    return (algo.env_steps - start_steps) / (time.perf_counter() - t0)
