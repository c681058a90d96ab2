"""Data-parallel training over ``torch.distributed`` (``torchrun`` / ``societas train --nproc N``).

Under ``torchrun`` every process (rank) runs the same training loop. What is
split and what is shared::

    episodes   = recipe.train_episodes(step)           (the same list on every rank)
    own        = episodes[shard(rank)]                  (contiguous, sizes differ by at most one)
    results    = all_gather(run_episodes(own))          (every rank: the whole batch, in order)
    advantages = computed on the whole batch            (groups may span ranks)
    loss       = each rank's rows, normalised as the whole batch is (its sequences, its
                 tokens over the batch's), so the ranks' gradients sum to one process's
    gradients  = summed across ranks (DDP's bucketed all-reduce, or FSDP's reduce-scatter)
    update     = the same AdamW step everywhere (DDP) or on each rank's shard (FSDP)

so N processes take the same update as one process on the same global batch
(up to float summation order). ``GRPOConfig.sharding`` picks ``"ddp"`` (every
rank holds the whole model) or ``"fsdp"`` (torch's ``fully_shard``: parameters,
gradients and AdamW state split across ranks, for models whose training state
does not fit one device; each rank then generates with a full copy of the
weights, refreshed after every update). Checkpoints are written once, by rank
0, in the single-process format (full weights, optimizer state keyed by
parameter name), so a run resumes with any number of processes.

The process group is the one ``torchrun`` describes in the environment
(``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...): NCCL when the run's device is
CUDA (each rank on ``cuda:LOCAL_RANK``), gloo on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, TypeVar

import torch
import torch.distributed as dist

__all__ = [
    "DistEnv",
    "agree",
    "all_gather_list",
    "all_reduce_max",
    "all_reduce_sum",
    "barrier",
    "broadcast_object",
    "dist_env",
    "init_from_env",
    "own_slice",
    "rank_device",
    "shards",
    "shutdown",
]

T = TypeVar("T")


@dataclass(frozen=True)
class DistEnv:
    """Where this process stands: ``rank`` of ``world_size`` (``local_rank`` on its machine)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def main(self) -> bool:
        """The process that writes files and prints (rank 0)."""
        return self.rank == 0


def dist_env() -> DistEnv:
    """This process's place in the initialised process group (one process when there is none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return DistEnv()
    return DistEnv(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def _env_int(name: str) -> int:
    raw = os.environ[name]
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def init_from_env(device: str = "auto") -> tuple[DistEnv, bool]:
    """Join the process group that ``torchrun`` describes in the environment.

    Returns the process's :class:`DistEnv` and whether this call created the
    group (the caller then destroys it at the end). Without ``WORLD_SIZE`` (or
    with ``WORLD_SIZE=1``) nothing is initialised. With a CUDA ``device``
    (``auto`` on a machine with a GPU) each rank takes ``cuda:LOCAL_RANK`` and
    the group uses NCCL; otherwise gloo.
    """
    if dist.is_available() and dist.is_initialized():
        return dist_env(), False
    if "WORLD_SIZE" not in os.environ or _env_int("WORLD_SIZE") <= 1:
        return DistEnv(), False
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE is set but this torch build has no torch.distributed")
    for var in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if var not in os.environ:
            raise ValueError(
                f"WORLD_SIZE={os.environ['WORLD_SIZE']} but {var} is not set: start the run with torchrun "
                "(or `societas train ... --nproc N`), which sets RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT"
            )
    local = int(os.environ.get("LOCAL_RANK", 0))
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        if not torch.cuda.is_available():
            raise RuntimeError(f"device {device!r} asks for CUDA but torch sees no GPU")
        if local >= torch.cuda.device_count():
            raise RuntimeError(
                f"LOCAL_RANK {local} but only {torch.cuda.device_count()} GPU(s) are visible: "
                "start at most one process per GPU"
            )
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return dist_env(), True


def shutdown() -> None:
    """Leave the process group (what :func:`init_from_env` joined)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_device(device: str, env: DistEnv) -> str:
    """The device of this rank's models: ``cuda:LOCAL_RANK`` for a CUDA run, else ``device``."""
    if not env.distributed:
        return device
    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        return f"cuda:{env.local_rank}"
    return device


def shards(n_items: int, n: int) -> list[slice]:
    """``n`` contiguous slices covering ``range(n_items)``, sizes differing by at most one."""
    q, r = divmod(n_items, n)
    bounds = [0]
    for i in range(n):
        bounds.append(bounds[-1] + q + (i < r))
    return [slice(a, b) for a, b in pairwise(bounds)]


def own_slice(n_items: int, env: DistEnv | None = None) -> slice:
    """This rank's contiguous share of ``range(n_items)``."""
    env = env or dist_env()
    return shards(n_items, env.world_size)[env.rank]


def all_gather_list(items: Sequence[T]) -> list[T]:
    """Every rank's ``items`` concatenated in rank order (the items pickled; one process: a copy)."""
    env = dist_env()
    if not env.distributed:
        return list(items)
    parts: list[Any] = [None] * env.world_size
    dist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]


def all_reduce_sum(values: Sequence[float]) -> list[float]:
    """The element-wise sum of ``values`` over ranks (float64; one process: the values)."""
    env = dist_env()
    if not env.distributed:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t)
    return [float(v) for v in t.cpu()]


def all_reduce_max(value: int) -> int:
    """The largest ``value`` over ranks (one process: the value)."""
    if not dist_env().distributed:
        return int(value)
    t = torch.tensor([int(value)], dtype=torch.long)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` as rank ``src`` has it, on every rank."""
    if not dist_env().distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    if dist_env().distributed:
        dist.barrier()


def agree(ok: bool, error: BaseException | None = None) -> None:
    """Raise on every rank if any rank failed (with the first failing rank's error text),
    so that one rank's error does not leave the others waiting in a collective."""
    env = dist_env()
    if not env.distributed:
        if error is not None:
            raise error
        return
    flags: list[Any] = [None] * env.world_size
    msg = None if ok else f"{type(error).__name__}: {error}" if error is not None else "failed"
    dist.all_gather_object(flags, msg)
    for rank, m in enumerate(flags):
        if m is not None:
            if error is not None:
                raise error
            raise RuntimeError(f"rank {rank} failed: {m}")
