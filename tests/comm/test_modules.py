"""Communication modules: each against a hand computation or an information-flow check."""

from __future__ import annotations

import pytest
import torch

from societas.marl.comm.modules import (
    COMM_MODULES,
    DIAL,
    CommFormer,
    CommNet,
    GATComm,
    IC3Net,
    TarMAC,
    make_comm,
)

torch.set_num_threads(1)
H = 8


def _h(b=3, n=3, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, n, H, generator=g).requires_grad_(requires_grad)


def _seeded(cls, *args, **kw):
    torch.manual_seed(0)
    return cls(*args, **kw)


@pytest.mark.parametrize("name", list(COMM_MODULES))
def test_every_module_shapes_replay_and_eval_determinism(name):
    m = _seeded(make_comm, name, H, 3)
    h = _h()
    m.train()
    out = m(h)
    assert out.h.shape == h.shape and out.messages.shape == (3,) and out.edges.shape == (3, 3, 3)
    # replaying the recorded draws gives exactly the same output
    again = m(h, samples=out.samples)
    assert torch.equal(out.h, again.h)
    m.eval()
    assert torch.equal(m(h).h, m(h).h)
    assert torch.isfinite(out.h).all()


def test_registry_errors_name_known_values():
    with pytest.raises(ValueError, match="known: none, commnet"):
        make_comm("telepathy", H, 2)
    with pytest.raises(ValueError, match="unknown comm_kwargs bogus.*accepted: rounds"):
        make_comm("commnet", H, 2, bogus=1)


def test_commnet_equals_hand_computed_mean_of_others():
    m = _seeded(CommNet, H, 3, rounds=2)
    h = _h()
    out = m(h)
    x = h.clone()
    for k in range(2):
        c = torch.stack([(x.sum(1) - x[:, i]) / 2 for i in range(3)], 1)  # mean of the OTHER agents
        x = torch.tanh(x @ m.H[k].weight.T + m.H[k].bias + c @ m.C[k].weight.T)
    torch.testing.assert_close(out.h, x)
    assert out.messages.tolist() == [12.0] * 3  # 3 * 2 directed pairs * 2 rounds
    # with a given adjacency the mean is over the neighbours only
    adj = torch.tensor([[0, 1, 0], [1, 0, 1], [0, 0, 0]])
    m1 = _seeded(CommNet, H, 3, rounds=1)
    o = m1(h, adj)
    c = torch.stack([h[:, 1], (h[:, 0] + h[:, 2]) / 2, torch.zeros_like(h[:, 0])], 1)
    torch.testing.assert_close(o.h, torch.tanh(m1.H[0](h) + m1.C[0](c)))
    assert o.messages.tolist() == [3.0] * 3


def test_tarmac_attention_sums_to_one_and_identical_keys_give_the_mean():
    m = _seeded(TarMAC, H, 4, rounds=2)
    h = _h(n=4)
    out = m(h)
    for alpha in out.extras["attention"]:
        torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 4))
        assert (alpha >= 0).all()
    # identical signatures (keys) for every agent: soft attention is uniform, c = mean of values
    with torch.no_grad():
        m.W_k[0].weight.zero_()
    out = m(h)
    torch.testing.assert_close(out.extras["attention"][0], torch.full((3, 4, 4), 0.25))
    v = m.W_v[0](h)
    torch.testing.assert_close(out.extras["context"][0], v.mean(1, keepdim=True).expand(-1, 4, -1))
    # the attention respects a given adjacency (and keeps the self-loop)
    adj = torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 0, 1], [0, 0, 1, 0]])
    alpha = m(h, adj).extras["attention"][1]
    allowed = (adj + torch.eye(4)) > 0
    assert (alpha[:, ~allowed] == 0).all()
    torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 4))


def test_ic3net_closed_gate_sends_nothing():
    m = _seeded(IC3Net, H, 3, rounds=2)
    h = _h(requires_grad=True)
    gate = torch.tensor([[0.0, 1.0, 1.0]]).expand(3, 3)
    out = m(h, samples={"gate": gate})
    # others' outputs do not depend on agent 0's hidden state (gradient and perturbation)
    (grad,) = torch.autograd.grad(out.h[:, 1:].sum(), h)
    assert grad[:, 0].abs().max() == 0
    assert grad[:, 1:].abs().max() > 0
    h2 = h.detach().clone()
    h2[:, 0] += 5.0
    out2 = m(h2, samples={"gate": gate})
    torch.testing.assert_close(out2.h[:, 1:], out.h[:, 1:].detach())
    assert not torch.allclose(out2.h[:, 0], out.h[:, 0].detach())
    # with the gate open, agent 0 is heard
    open_ = m(h2, samples={"gate": torch.ones(3, 3)}).h
    assert not torch.allclose(open_[:, 1:], m(h.detach(), samples={"gate": torch.ones(3, 3)}).h[:, 1:])
    assert out.messages.tolist() == [8.0] * 3  # 2 open senders * 2 receivers * 2 rounds
    # the gate's log-probability is the Bernoulli log-likelihood of the chosen gates
    p = torch.sigmoid(m.gate(h.detach())).squeeze(-1)
    expect = gate * p.log() + (1 - gate) * (1 - p).log()
    torch.testing.assert_close(out.log_prob.detach(), expect)


def test_ic3net_eval_gate_is_greedy():
    m = _seeded(IC3Net, H, 3, gate_bias=-10.0).eval()
    out = m(_h())
    assert out.messages.sum() == 0 and out.samples["gate"].sum() == 0
    m2 = _seeded(IC3Net, H, 3, gate_bias=10.0).eval()
    assert m2(_h()).samples["gate"].min() == 1


def test_dial_is_noisy_in_training_and_discrete_at_execution():
    m = _seeded(DIAL, H, 3, message_size=4, sigma=2.0)
    h = _h(requires_grad=True)
    m.train()
    a, b = m(h), m(h)
    assert not torch.allclose(a.extras["channel"], b.extras["channel"])  # fresh noise each pass
    ch = a.extras["channel"]
    assert ((ch > 0) & (ch < 1)).all()  # continuous in training
    # the channel is differentiable: a receiver's output has gradient w.r.t. a sender's state
    (grad,) = torch.autograd.grad(a.h[:, 1].sum(), h)
    assert grad[:, 0].abs().max() > 0
    m.eval()
    e1, e2 = m(h), m(h)
    torch.testing.assert_close(e1.h, e2.h)
    ch = e1.extras["channel"]
    assert set(ch.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(ch, (m.W_m(h) > 0).float())


def test_gat_no_information_along_missing_edges():
    # 0 <- 1, 1 <- 0, 2 <- {0, 1}: nothing ever reaches 0 or 1 from 2
    adj = torch.tensor([[0, 1, 0], [1, 0, 0], [1, 1, 0]])
    m = _seeded(GATComm, H, 3, rounds=3, heads=2)
    h = _h()
    out = m(h, adj)
    h2 = h.clone()
    h2[:, 2] += 3.0
    out2 = m(h2, adj)
    torch.testing.assert_close(out2.h[:, :2], out.h[:, :2])
    h3 = h.clone()
    h3[:, 0] += 3.0
    assert not torch.allclose(m(h3, adj).h[:, 2], out.h[:, 2])  # 0 -> 2 exists
    assert not torch.allclose(m(h3, adj).h[:, 1], out.h[:, 1])  # 0 -> 1 exists
    for alpha in out.extras["attention"]:
        torch.testing.assert_close(alpha.sum(-1), torch.ones(3, 2, 3))
        assert (alpha[..., 0, 2] == 0).all() and (alpha[..., 1, 2] == 0).all()
    assert out.messages.tolist() == [12.0] * 3  # 4 edges * 3 rounds


def test_gat_scheduler_only_removes_edges():
    adj = torch.tensor([[0, 1, 0], [1, 0, 0], [1, 1, 0]])
    m = _seeded(GATComm, H, 3, scheduler=True)
    for mode in (True, False):
        m.train(mode)
        out = m(_h(b=16), adj)
        assert ((out.edges != 0) <= (adj > 0)).all()


@pytest.mark.parametrize("n,k", [(5, 2), (4, 3), (2, 1)])
def test_commformer_picks_exactly_k_edges_per_agent(n, k):
    m = _seeded(CommFormer, H, n, k=k, rounds=2)
    torch.nn.init.normal_(m.alpha)
    for mode in (True, False):
        m.train(mode)
        out = m(_h(b=6, n=n))
        hard = out.edges
        assert (hard.sum(-1) == k).all()
        assert (hard.diagonal(dim1=1, dim2=2) == 0).all()
        assert out.messages.tolist() == [float(n * k * 2)] * 6
    # execution graph: the top-k of alpha
    m.eval()
    top = m.alpha.masked_fill(torch.eye(n, dtype=torch.bool), float("-inf")).topk(k, -1).indices
    g = m.graph(1)[0]
    for i in range(n):
        assert set(torch.nonzero(g[i]).flatten().tolist()) == set(top[i].tolist())


def test_commformer_graph_is_learned_by_gradient_and_blocks_unselected_senders():
    m = _seeded(CommFormer, H, 4, k=1, rounds=1)
    h = _h(n=4)
    m.train()
    m(h).h.sum().backward()
    assert m.alpha.grad is not None and m.alpha.grad.abs().sum() > 0  # straight-through
    m.eval()
    g = m.graph(1)[0]
    out = m(h)
    for i in range(4):
        j = next(x for x in range(4) if x != i and g[i, x] == 0)  # a sender i does not hear
        h2 = h.clone()
        h2[:, j] += 3.0
        torch.testing.assert_close(m(h2).h[:, i], out.h[:, i])
    with pytest.raises(ValueError, match="k must be"):
        CommFormer(H, 3, k=3)
