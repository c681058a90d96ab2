"""The prepared GPU check (benchmarks/gpu_check.py) on the CPU: its dry run goes
through every section's code with tiny sizes and prints one JSON line whose
sections all succeed with sane values; its helpers and its refusal without CUDA.
Speed is not asserted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.py"
SECTIONS = ("cfr", "nash_conv", "mpe", "mappo_tarmac", "grpo")


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_dry_run_reports_every_section():
    proc = _run("--dry-run")
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout  # ONE JSON line on standard output, progress on standard error
    out = json.loads(lines[0])
    assert out["benchmark"] == "gpu_check" and out["dry_run"] is True and out["device"] == "cpu"
    assert out["failed"] == []
    for s in SECTIONS:
        assert out[s]["ok"] is True and "error" not in out[s], out[s]
        assert out[s]["seconds"] >= 0

    cfr = out["cfr"]
    assert cfr["iterations"] >= 1 and cfr["histories"] > 0 and cfr["infosets"] > 0
    assert _positive(cfr["cpu_it_s"]) and _positive(cfr["device_it_s"])
    assert _positive(cfr["exploitability_cpu"]) and _positive(cfr["exploitability_device"])
    assert cfr["exploitability_abs_diff"] <= 1e-9 and cfr["policy_max_abs_diff"] <= 1e-9 and cfr["agree"]

    nc = out["nash_conv"]
    assert _positive(nc["nash_conv_device"]) and nc["abs_diff"] <= 1e-9 and nc["agree"]
    assert _positive(nc["device_s"]) and _positive(nc["cpu_s"])

    rates = out["mpe"]["env_steps_per_s"]
    assert rates and all(_positive(v) for v in rates.values())

    runs = out["mappo_tarmac"]["runs"]
    assert runs
    for r in runs.values():
        assert r["updates"] >= 2 and _positive(r["updates_per_s"]) and _positive(r["env_steps_per_s"])

    g = out["grpo"]
    assert g["steps_timed"] >= 1 and _positive(g["step_s"]) and _positive(g["tokens_per_s"])
    assert g["tokens_per_step"] >= 1 and math.isfinite(g["loss"])
    assert g["precision"] == "fp32" and g["weights_moved_fraction"] > 0.95


def test_missing_wheels_lists_what_is_absent_or_older(tmp_path):
    (tmp_path / "pytest-1.0-py3-none-any.whl").write_bytes(b"")  # installed, newer: skipped
    (tmp_path / "pytest-99.0-py3-none-any.whl").write_bytes(b"")  # installed, older: listed
    (tmp_path / "societas_no_such_dist-0.1-py3-none-any.whl").write_bytes(b"")  # absent: listed
    proc = _run("--missing-wheels", str(tmp_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["pytest==99.0", "societas_no_such_dist==0.1"]


def test_refuses_cuda_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = _run("--device", "cuda", timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "CUDA is not available" in proc.stderr and "--dry-run" in proc.stderr
