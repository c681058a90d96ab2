"""Learned routing (GPTSwarm, G-Designer) on the device: training, held-out
evaluation, the Runtime check and the saved policy equal the CPU's."""

from __future__ import annotations

import pytest
import torch

from societas.marl.routing.live import load_policy
from societas.marl.routing.train import train_routing
from tests.cuda_emulation import emulated_cuda


@pytest.mark.parametrize("method", ["gptswarm", "gdesigner"])
def test_routing_on_the_device_equals_the_cpu(tmp_path, method):
    cfg = {"method": method, "steps": 4, "batch_size": 8, "eval_tasks": 16, "runtime_tasks": 4, "seed": 1}
    ref = train_routing(dict(cfg, device="cpu"), tmp_path / "cpu", progress=False).to_dict()
    with emulated_cuda():
        got = train_routing(dict(cfg, device="cuda"), tmp_path / "cuda", progress=False).to_dict()
    for key in ("table", "runtime", "runtime_agrees", "graphs"):
        assert got[key] == ref[key], key
    # the policy saved on the device loads (weights only) on the CPU, with the CPU run's weights
    on_device, _ = load_policy(tmp_path / "cuda")
    on_cpu, _ = load_policy(tmp_path / "cpu")
    a, b = on_device.state_dict(), on_cpu.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
