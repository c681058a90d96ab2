"""The emulation itself: it refuses what CUDA refuses, accepts what CUDA accepts,
and computes what the CPU computes."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from societas.marl.comm import compute_gae
from tests.cuda_emulation import EmulatedTensor, PlacementError, emulated_cuda


def test_it_refuses_what_cuda_refuses():
    with emulated_cuda():
        x = torch.ones(3, device="cuda")
        cpu = torch.ones(3)
        refused = {
            "add": lambda: x + cpu,
            "matmul": lambda: x @ torch.ones(3, 3),
            "cat": lambda: torch.cat([x, cpu]),
            "where": lambda: torch.where(cpu > 0, x, x),
            "index_select with a CPU index": lambda: x.index_select(0, torch.arange(2)),
            "a CPU tensor indexed on the device": lambda: cpu[torch.arange(2, device="cuda")],
            "a CPU value written into a device tensor": lambda: x.index_put_((torch.arange(2),), cpu[:2]),
            "a CPU generator for a device tensor": lambda: torch.rand(
                2, device="cuda", generator=torch.Generator()
            ),
            "a device generator for a CPU tensor": lambda: torch.rand(
                2, generator=torch.Generator(device="cuda")
            ),
        }
        for what, op in refused.items():
            with pytest.raises(PlacementError):
                op()
                pytest.fail(f"{what} passed")
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()


def test_it_accepts_what_cuda_accepts_and_computes_what_the_cpu_computes():
    with emulated_cuda():
        assert torch.cuda.is_available()
        x = torch.arange(6.0, device="cuda").reshape(2, 3)
        assert isinstance(x, EmulatedTensor) and x.device.type == "emucuda"
        y = x * torch.tensor(2.0)  # a 0-dimensional CPU tensor is a scalar
        z = x[torch.tensor([1, 0])]  # CPU indices into a device tensor
        x[torch.tensor([0])] = 5.0
        w = torch.empty(2, 3, device="cuda").copy_(torch.ones(2, 3))  # copies cross devices
        g = torch.Generator(device="cuda").manual_seed(3)
        r = torch.rand(4, device="cuda", generator=g)
        total = (y.sum() + z.sum() + w.sum()).cpu()
        assert type(total) is torch.Tensor and total.device.type == "cpu"
        assert x.tolist() == [[5.0, 5.0, 5.0], [3.0, 4.0, 5.0]]
        back = r.cpu()
    assert total.item() == 2 * 15 + 15 + 6
    assert torch.equal(back, torch.rand(4, generator=torch.Generator().manual_seed(3)))


def test_a_moved_module_keeps_its_tied_weights_and_trains_as_on_the_cpu():
    def make() -> nn.ModuleDict:
        torch.manual_seed(0)
        emb, head = nn.Embedding(5, 4), nn.Linear(4, 5, bias=False)
        head.weight = emb.weight  # tied, as a language model's input and output embeddings
        return nn.ModuleDict({"emb": emb, "head": head})

    def step(device: str) -> tuple[float, torch.Tensor, bool]:
        m = make().to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        loss = m["head"](m["emb"](torch.tensor([0, 3, 4], device=device))).logsumexp(-1).sum()
        loss.backward()
        opt.step()
        return loss.item(), m["emb"].weight.detach().cpu(), m["head"].weight is m["emb"].weight

    ref = step("cpu")
    with emulated_cuda():
        got = step("cuda")
    assert ref[2] and got[2]
    assert got[0] == ref[0] and torch.equal(got[1], ref[1])


def test_a_placement_bug_in_package_code_fails():
    with emulated_cuda():
        r = torch.ones(4, 2, device="cuda")
        adv, _ = compute_gae(r, r, r, torch.zeros(4, 2, device="cuda"), 0.9, 0.9)
        assert adv.device.type == "emucuda"
        with pytest.raises(PlacementError, match="same device"):
            compute_gae(r, r, r, torch.zeros(4, 2), 0.9, 0.9)  # the episode ends left on the CPU


def test_saved_device_tensors_load_on_the_cpu():
    buf = io.BytesIO()
    with emulated_cuda():
        torch.save({"w": torch.arange(3.0, device="cuda")}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="cpu", weights_only=True)
    assert type(loaded["w"]) is torch.Tensor and loaded["w"].tolist() == [0.0, 1.0, 2.0]
