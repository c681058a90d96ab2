"""Smoke test of benchmarks/react_batching_gpu.py on the CPU: the tool loops really run on both
sides (two tool calls per agent, the scripted answer), the batched side makes one model call per
turn, the baseline one per agent turn, and the JSON line holds the figures. No speed is asserted."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "react_batching_gpu.py"


def test_react_batching_benchmark_smoke(capsys):
    spec = importlib.util.spec_from_file_location("react_batching_gpu", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--device", "cpu", "--quick"])
    (row,) = out["rows"]
    b, s = row["batched"], row["one_at_a_time"]
    assert b["model_calls"] == 3 and s["model_calls"] == 6  # 2 agents x 3 turns, batched per step
    assert b["tool_calls"] == s["tool_calls"] == 4 and b["answers_ok"] and s["answers_ok"]
    assert b["tokens"] == s["tokens"] == 2 * 3 * 8
    assert math.isfinite(row["speedup"]) and row["speedup"] > 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith('{"benchmark": "react_batching_gpu"')
