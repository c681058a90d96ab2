"""Device selection shared by every tensor computation in :mod:`marl`."""

from __future__ import annotations

import torch

__all__ = ["resolve_device"]


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"``: CUDA when present, else CPU; otherwise ``torch.device(device)``,
    refusing an unknown name or CUDA on a machine without it."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"unknown device {device!r}: {exc}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return dev
