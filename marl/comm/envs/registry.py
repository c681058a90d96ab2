"""The batched torch environments by name, and :func:`make_env`, which builds one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from societas.marl.comm.envs.base import BatchedMultiAgentEnv
from societas.marl.comm.envs.reference import ReferenceEnv
from societas.marl.comm.envs.speaker_listener import SpeakerListenerEnv

__all__ = ["ENVS", "make_env"]

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
