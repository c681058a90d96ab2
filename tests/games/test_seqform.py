"""The sequence-form evaluator's kept buffers: per thread, bitwise the same
values as fresh tensors, and not part of what a pickled index carries.
(Its values against OpenSpiel are in test_engine.py.)"""

from __future__ import annotations

import pickle
import threading

import pytest
import torch

from societas.marl.games import evaluate, load_game, nash_conv, seqform
from societas.marl.games.seqform import sequence_index, values_and_best_responses


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SOCIETAS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("game", ["kuhn_poker(players=3)", "leduc_poker", "kuhn_poker(players=4)"])
@pytest.mark.parametrize("batch", [1, 3])
def test_kept_buffers_give_bitwise_the_values_of_fresh_ones(game, batch, monkeypatch):
    tree = load_game(game, "cpu")
    pol = tree.random_policy(batch=batch, seed=11)
    kept = [evaluate(tree, pol) for _ in range(2)]  # the second call reuses the first's buffers
    monkeypatch.setattr(seqform, "WORKSPACE_BYTES", 0)
    fresh = evaluate(tree, pol)
    for k in kept:
        assert torch.equal(k.on_policy, fresh.on_policy)
        assert torch.equal(k.best_response, fresh.best_response)
        assert torch.equal(k.nash_conv, fresh.nash_conv)


def test_a_call_with_another_batch_size_does_not_reuse_the_wrong_buffers():
    tree = load_game("kuhn_poker(players=3)", "cpu")
    one, three = tree.random_policy(seed=1), tree.random_policy(batch=3, seed=2)
    ref_one, ref_three = nash_conv(tree, one), nash_conv(tree, three)
    for _ in range(2):
        assert torch.equal(nash_conv(tree, three), ref_three)
        assert torch.equal(nash_conv(tree, one), ref_one)


def test_evaluation_in_and_out_of_inference_mode_alternates_freely():
    # buffers made under torch.inference_mode() cannot be written outside it (and the CFR solver
    # steps in inference mode)
    ref = nash_conv(
        load_game("kuhn_poker(players=3)", "cpu"),
        load_game("kuhn_poker(players=3)", "cpu").random_policy(seed=3),
    )
    tree = load_game("kuhn_poker(players=3)", "cpu", cache=False)  # a tree whose index has no buffers yet
    pol = tree.random_policy(seed=3)
    for _ in range(2):
        with torch.inference_mode():  # the first buffers are made here
            assert torch.equal(nash_conv(tree, pol), ref)
        assert torch.equal(nash_conv(tree, pol), ref)


def test_threads_evaluating_at_once_each_get_their_own_values():
    # a buffer shared between threads would mix one thread's reaches into another's sums
    tree = load_game("kuhn_poker(players=3)", "cpu")
    policies = [tree.random_policy(seed=s) for s in range(4)]
    expected = [values_and_best_responses(tree, p) for p in policies]
    wrong: list[str] = []
    start = threading.Barrier(len(policies))

    def work(k: int) -> None:
        start.wait()
        for i in range(300):
            on, br = values_and_best_responses(tree, policies[k])
            if not (torch.equal(on, expected[k][0]) and torch.equal(br, expected[k][1])):
                wrong.append(f"thread {k}, call {i}")
                return

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(policies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong, wrong


def test_a_pickled_index_carries_no_buffers_and_evaluates_the_same():
    tree = load_game("leduc_poker", "cpu")
    pol = tree.random_policy(seed=4)
    idx = sequence_index(tree)
    values_and_best_responses(tree, pol)  # this thread now holds buffers
    copy = pickle.loads(pickle.dumps(idx))
    x = copy.plans(pol)
    G = copy.best_response_values(copy.leaf_values(x))
    _, br = values_and_best_responses(tree, pol)
    assert torch.equal(G[: tree.num_players].T, br)
