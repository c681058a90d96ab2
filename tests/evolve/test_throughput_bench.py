"""Smoke test of benchmarks/evolve_throughput.py --quick: it runs and ends with one JSON line."""

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
        [sys.executable, "benchmarks/evolve_throughput.py", "--quick"],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    head = json.loads(lines[-1])
    assert head["benchmark"] == "evolve_throughput" and head["quick"] is True
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
