"""Smoke test of benchmarks/evolve_throughput.py --quick: it runs and ends with one JSON line.

It runs on the cheap ``curve_fit`` task: what it checks is the benchmark's
executors (process pool, Ray), its table and its JSON, in half a minute
instead of four; the CFR task's evaluations have their own tests
(``test_cfr_task.py``), and ``make bench`` runs the benchmark on CFR.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_throughput_benchmark_ends_with_json():
    proc = subprocess.run(
        [sys.executable, "benchmarks/evolve_throughput.py", "--quick", "--task", "curve_fit"],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    head = json.loads(lines[-1])
    assert head["benchmark"] == "evolve_throughput" and head["quick"] is True and head["task"] == "curve_fit"
    assert head["candidates"] == 4
    assert head["process_1w_per_min"] > 0 and head["process_2w_per_min"] > 0
    assert head["same_metrics"] is True  # every configuration scored the same programs alike
    assert "process_speedup_2w" in head
    try:
        import ray  # noqa: F401
    except ImportError:
        assert head["ray"] == "ray not installed"
        assert any("ray not installed" in line for line in lines)
    else:
        assert head["ray_2w_per_min"] > 0
    assert "| executor | workers |" in proc.stdout
