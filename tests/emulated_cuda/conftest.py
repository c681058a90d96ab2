"""The package's CUDA paths, run on a CUDA device emulated on the CPU
(:mod:`tests.cuda_emulation`): each test runs a path with ``device="cuda"`` and
checks that it computes what the same path computes on the CPU, which fails
where a tensor is left on the wrong device.

These tests run in a process of their own, which ``tests/test_emulated_cuda.py``
starts (the main run does not collect this folder): the emulated device is
registered when this file imports the emulation, before the process's first
backward pass, where torch's autograd engine sets up its devices.
"""

from __future__ import annotations

import tests.cuda_emulation  # noqa: F401  (first: registers the emulated device)
