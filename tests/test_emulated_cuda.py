"""The package's CUDA paths on a CUDA device emulated on the CPU
(tests/cuda_emulation.py, tests/emulated_cuda/): run in a pytest process of
their own, which this test starts. No GPU is needed; a GPU run is still what
measures CUDA's kernels and speed (``make gpu-check``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_cuda_paths_pass_on_an_emulated_cuda_device():
    env = dict(os.environ, SOCIETAS_EMULATED_CUDA="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS"):
        env.pop(var, None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "tests/emulated_cuda",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " skipped" not in proc.stdout, proc.stdout[-2000:]
