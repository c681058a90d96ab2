"""Batched multi-agent environments for communication MARL.

:class:`BatchedMultiAgentEnv` is the contract (``B`` env copies stepped as
tensors, auto-reset, centralised ``state()``); :class:`SpeakerListenerEnv`
and :class:`ReferenceEnv` are torch re-implementations of the MPE tasks
``simple_speaker_listener_v4`` and ``simple_reference_v3`` (Lowe et al.
2017; mpe2) with tested parity; :mod:`societas.marl.comm.envs.pettingzoo` has the
adapters both ways (:class:`BatchedParallelEnv`: one row as a PettingZoo
``ParallelEnv``; :class:`PettingZooBatchedEnv`: any discrete-action PettingZoo
``ParallelEnv`` as a batched env). :func:`make_env` builds one by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from societas.marl.comm.envs.base import BatchedMultiAgentEnv, MPEBatchedEnv, resolve_device
from societas.marl.comm.envs.reference import ReferenceEnv
from societas.marl.comm.envs.speaker_listener import SpeakerListenerEnv

__all__ = [
    "ENVS",
    "BatchedMultiAgentEnv",
    "BatchedParallelEnv",
    "MPEBatchedEnv",
    "PettingZooBatchedEnv",
    "ReferenceEnv",
    "SpeakerListenerEnv",
    "make_env",
    "resolve_device",
]

#: Registry of the batched torch environments, by name.
ENVS: dict[str, Callable[..., BatchedMultiAgentEnv]] = {
    "speaker_listener": SpeakerListenerEnv,
    "reference": ReferenceEnv,
}


def make_env(name: str, **kw: Any) -> BatchedMultiAgentEnv:
    """Build the batched env registered as ``name`` with keyword arguments ``kw``.

    Names: ``"speaker_listener"``, ``"reference"``; e.g.
    ``make_env("reference", num_envs=1024, device="auto", seed=0, local_ratio=0.5)``.
    """
    try:
        cls = ENVS[name]
    except KeyError:
        raise ValueError(f"unknown env {name!r}; known envs: {', '.join(sorted(ENVS))}") from None
    return cls(**kw)


def __getattr__(name: str) -> Any:
    # The PettingZoo adapters import pettingzoo; load them only when asked for.
    if name in ("BatchedParallelEnv", "PettingZooBatchedEnv"):
        from societas.marl.comm.envs import pettingzoo as _pz

        return getattr(_pz, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
