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

from societas.marl.comm.envs.base import BatchedMultiAgentEnv, MPEBatchedEnv, resolve_device
from societas.marl.comm.envs.pettingzoo import BatchedParallelEnv, PettingZooBatchedEnv
from societas.marl.comm.envs.reference import ReferenceEnv
from societas.marl.comm.envs.registry import ENVS, make_env
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
