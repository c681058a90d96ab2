"""The prepared GPU check (benchmarks/gpu_check.py) with ``--dry-run --device
cuda`` on the emulated device: every section runs its CUDA branch of the code
(synchronisation, memory statistics, the GRPO step on a bfloat16-loaded model) and succeeds, with
the same exploitability on the device as on the CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.cuda_emulation import emulated_cuda

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def test_the_dry_run_passes_on_the_device(capsys):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    with emulated_cuda():
        rc = gpu_check.main(["--dry-run", "--device", "cuda"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    out = json.loads(lines[-1])
    assert rc == 0 and out["failed"] == [], out
    assert out["device"] == "cuda" and out["gpu"] == "emulated CUDA (on the CPU)"
    assert all(out[s]["ok"] and "peak_gpu_mem_gb" in out[s] for s in gpu_check.SECTIONS)
    assert out["cfr"]["exploitability_abs_diff"] == 0.0 and out["cfr"]["agree"]
    assert out["nash_conv"]["abs_diff"] == 0.0
    assert out["grpo"]["dtype"] == "bfloat16"
    assert out["grpo"]["weights_moved_fraction"] > 0.95  # the updates land (float32 master weights)
