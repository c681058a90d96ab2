"""The operator bandit: UCB1 indices, their weights, rewards, the window and the saved state."""

from __future__ import annotations

import json
import math
import random

import pytest

from societas.evolve.bandit import OperatorBandit, improvement

ARMS = ["constant", "crossover", "llm:gpt-4o"]


def _fed(bandit: OperatorBandit, rewards: dict[str, list[float | None]]) -> OperatorBandit:
    for arm, values in rewards.items():
        for value in values:
            bandit.update(arm, value)
    return bandit


# ----------------------------------------------------------------------------- UCB1 by hand


def test_ucb1_scores_match_a_hand_computation() -> None:
    # a: 1 success in 2 pulls, b: 1 in 1, c: 0 in 3; N = 6, ln 6 = 1.791759469
    bandit = _fed(OperatorBandit(["a", "b", "c"]), {"a": [0.3, -0.1], "b": [2.0], "c": [0.0, None, -5.0]})
    assert bandit.pulls() == {"a": 2, "b": 1, "c": 3}
    assert bandit.means() == {"a": 0.5, "b": 1.0, "c": 0.0}
    scores = bandit.ucb_scores()
    # U = mean + sqrt(2) * sqrt(ln N / n):
    #   a: 0.5 + sqrt(2 * 1.791759 / 2) = 0.5 + 1.338566 = 1.838566
    #   b: 1.0 + sqrt(2 * 1.791759 / 1) = 1.0 + 1.893018 = 2.893018
    #   c: 0.0 + sqrt(2 * 1.791759 / 3) = 0.0 + 1.092935 = 1.092935
    assert scores["a"] == pytest.approx(1.838566, abs=1e-6)
    assert scores["b"] == pytest.approx(2.893018, abs=1e-6)
    assert scores["c"] == pytest.approx(1.092935, abs=1e-6)


def test_weights_are_the_floored_softmax_of_the_indices() -> None:
    bandit = _fed(
        OperatorBandit(["a", "b", "c"], temperature=0.5, min_weight=0.1),
        {"a": [1, 0], "b": [1], "c": [0, 0, 0]},
    )
    # q ∝ exp((U - U_b) / 0.5): a exp(-2.108904) = 0.121362, b 1, c exp(-3.600167) = 0.027319,
    # sum 1.148681 -> q = (0.105660, 0.870557, 0.023783); p = 0.1 + (1 - 3 * 0.1) q
    weights = bandit.weights()
    assert weights["a"] == pytest.approx(0.173962, abs=1e-6)
    assert weights["b"] == pytest.approx(0.709390, abs=1e-6)
    assert weights["c"] == pytest.approx(0.116648, abs=1e-6)
    assert math.fsum(weights.values()) == pytest.approx(1.0, abs=1e-12)


def test_prior_multiplies_the_softmax() -> None:
    bandit = _fed(
        OperatorBandit(
            ["a", "b", "c"], prior_weights={"a": 1, "b": 2, "c": 1}, temperature=0.5, min_weight=0.1
        ),
        {"a": [1, 0], "b": [1], "c": [0, 0, 0]},
    )
    # q ∝ pi * exp(...): (0.25 * 0.121362, 0.5 * 1, 0.25 * 0.027319) / 0.537170
    weights = bandit.weights()
    assert weights["a"] == pytest.approx(0.139540, abs=1e-6)
    assert weights["b"] == pytest.approx(0.751560, abs=1e-6)
    assert weights["c"] == pytest.approx(0.108900, abs=1e-6)


def test_equal_indices_give_back_the_prior() -> None:
    prior = {"constant": 0.2, "crossover": 0.05, "llm:gpt-4o": 0.75}
    bandit = _fed(OperatorBandit(ARMS, prior_weights=prior, min_weight=0.0), {arm: [1, 0] for arm in ARMS})
    assert bandit.weights() == pytest.approx(prior, abs=1e-12)


# ----------------------------------------------------------------------------- untried arms, floor


def test_untried_arms_share_the_mass_by_prior() -> None:
    prior = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    bandit = OperatorBandit(list(prior), prior_weights=prior, min_weight=0.05)
    # nothing tried yet: all arms untried, so the weights follow the prior (above the floor)
    assert bandit.weights() == pytest.approx({arm: 0.05 + 0.8 * w / 10 for arm, w in prior.items()})
    bandit.update("a", 1.0)  # a success does not make a tried arm beat an untried one
    bandit.update("b", -1.0)
    weights = bandit.weights()
    assert weights["a"] == pytest.approx(0.05) and weights["b"] == pytest.approx(0.05)
    assert weights["c"] == pytest.approx(0.05 + 0.8 * 3 / 7)
    assert weights["d"] == pytest.approx(0.05 + 0.8 * 4 / 7)
    assert bandit.ucb_scores()["c"] == math.inf


def test_untried_arms_are_the_only_ones_drawn_without_a_floor() -> None:
    bandit = _fed(OperatorBandit(["a", "b", "c"], min_weight=0.0), {"a": [1, 1, 1]})
    rng = random.Random(0)
    assert {bandit.choose(rng) for _ in range(200)} == {"b", "c"}


def test_min_weight_is_respected_however_bad_an_arm_is() -> None:
    bandit = OperatorBandit(ARMS, exploration=0.0, min_weight=0.07, temperature=0.01)
    _fed(bandit, {"constant": [1.0] * 50, "crossover": [-1.0] * 50, "llm:gpt-4o": [None] * 50})
    weights = bandit.weights()
    assert weights["crossover"] == pytest.approx(0.07, abs=1e-12)
    assert weights["llm:gpt-4o"] == pytest.approx(0.07, abs=1e-12)
    assert min(weights.values()) >= 0.07 - 1e-15
    assert math.fsum(weights.values()) == pytest.approx(1.0, abs=1e-12)
    uniform = _fed(OperatorBandit(ARMS, min_weight=1 / 3), {"constant": [1.0] * 5, "crossover": [0.0]})
    assert uniform.weights() == pytest.approx(dict.fromkeys(ARMS, 1 / 3))


# ----------------------------------------------------------------------------- learning


def test_best_arm_gains_weight_in_a_bernoulli_bandit() -> None:
    success = {"constant": 0.1, "operator": 0.1, "crossover": 0.15, "llm:good": 0.5}
    bandit = OperatorBandit(list(success))
    plan, env = random.Random(7), random.Random(8)
    chosen = dict.fromkeys(success, 0)
    for batch in range(50):  # like the controller: a batch planned from one snapshot, then its results
        arms = [bandit.choose(plan) for _ in range(8)]
        for arm in arms:
            chosen[arm] += 1
            bandit.update(arm, 1.0 if env.random() < success[arm] else -1.0)
        bandit.snapshot(batch * 8)
    best = [weights["llm:good"] for _, weights in bandit.history]
    assert sum(best[-10:]) / 10 > sum(best[1:11]) / 10 + 0.1
    assert best[-1] > 0.5
    share = chosen["llm:good"] / sum(chosen.values())
    assert share > 0.25 + 0.15, share  # uniform would give 0.25
    assert max(bandit.weights(), key=bandit.weights().__getitem__) == "llm:good"


def test_rewards_are_success_indicators() -> None:
    bandit = OperatorBandit(["a"])
    assert [bandit.update("a", r) for r in (0.3, 1e-12, math.inf, 0.0, -2.0, None, math.nan)] == [
        1.0,
        1.0,
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]
    assert bandit.summary()["a"]["total_successes"] == 3
    assert improvement(None, 1.0) is None
    assert improvement(math.nan, 1.0) is None
    assert improvement(0.5, None) == math.inf
    assert improvement(0.5, 0.25) == 0.25


def test_unknown_arm_is_a_key_error_naming_the_arms() -> None:
    bandit = OperatorBandit(ARMS)
    with pytest.raises(KeyError, match=r"'llm:gpt-5'.*'constant', 'crossover', 'llm:gpt-4o'"):
        bandit.update("llm:gpt-5", 1.0)


def test_choose_is_reproducible_and_follows_the_weights() -> None:
    bandit = _fed(
        OperatorBandit(ARMS, temperature=0.2), {"constant": [1, 1, 0], "crossover": [0], "llm:gpt-4o": [1]}
    )
    first = [bandit.choose(random.Random(3)) for _ in range(5)]
    assert first == [bandit.choose(random.Random(3)) for _ in range(5)]
    rng = random.Random(11)
    draws = [bandit.choose(rng) for _ in range(20000)]
    for arm, weight in bandit.weights().items():
        assert draws.count(arm) / len(draws) == pytest.approx(weight, abs=0.015)


# ----------------------------------------------------------------------------- window, history, state


def test_window_forgets_old_updates() -> None:
    bandit = OperatorBandit(["a", "b"], window=3)
    _fed(bandit, {"a": [1, 1, 1]})
    assert bandit.means()["a"] == 1.0
    _fed(bandit, {"a": [0, 0, 0]})
    assert bandit.means()["a"] == 0.0  # the three successes left the window
    assert bandit.pulls() == {"a": 3, "b": 0}
    _fed(bandit, {"b": [0, 0, 0]})
    assert bandit.pulls() == {"a": 0, "b": 3}  # a is untried again: it gets the priority back
    assert bandit.total_pulls() == {"a": 6, "b": 3}
    assert bandit.weights()["a"] == pytest.approx(1 - 0.02)
    unwindowed = _fed(OperatorBandit(["a", "b"]), {"a": [1, 1, 1, 0, 0, 0], "b": [0, 0, 0]})
    assert unwindowed.means() == {"a": 0.5, "b": 0.0}


def test_snapshot_records_weights_over_time() -> None:
    bandit = OperatorBandit(ARMS)
    first = bandit.snapshot(0)
    bandit.update("constant", 1.0)
    bandit.snapshot(8)
    first["constant"] = 99.0  # the returned dict is the caller's
    assert [it for it, _ in bandit.history] == [0, 8]
    assert bandit.history[0][1] == pytest.approx(dict.fromkeys(ARMS, 1 / 3))
    assert bandit.history[1][1] == bandit.weights()


@pytest.mark.parametrize("window", [None, 5])
def test_state_round_trip_gives_identical_weights(window: int | None) -> None:
    prior = {"constant": 0.3, "crossover": 0.1, "llm:gpt-4o": 0.7}
    bandit = OperatorBandit(ARMS, prior_weights=prior, window=window, exploration=0.8, temperature=0.07)
    rng = random.Random(5)
    for step in range(40):
        bandit.update(rng.choice(ARMS), rng.choice([0.5, -0.5, None]))
        if step % 10 == 0:
            bandit.snapshot(step)
    state = json.loads(json.dumps(bandit.state_dict()))
    restored = OperatorBandit.from_state_dict(state)
    assert restored.weights() == bandit.weights()
    assert restored.history == bandit.history
    assert restored.summary() == bandit.summary()
    same_config = OperatorBandit(
        list(reversed(ARMS)), prior_weights=prior, window=window, exploration=0.8, temperature=0.07
    )
    same_config.load_state_dict(state)
    assert same_config.weights() == pytest.approx(bandit.weights(), abs=1e-15)
    for arm, value in [("crossover", 1.0), ("constant", None), ("crossover", 1.0), ("llm:gpt-4o", -1)] * 2:
        bandit.update(arm, value)
        restored.update(arm, value)
        assert restored.weights() == bandit.weights()  # the window continues where it was


def test_state_of_other_arms_or_window_is_refused() -> None:
    state = _fed(OperatorBandit(ARMS, window=4), {"constant": [1]}).state_dict()
    with pytest.raises(ValueError, match="missing from the state: \\['function'\\]"):
        OperatorBandit([*ARMS, "function"], window=4).load_state_dict(state)
    with pytest.raises(ValueError, match="window"):
        OperatorBandit(ARMS).load_state_dict(state)
    tampered = {**state, "recent": [["constant", 0]]}
    with pytest.raises(ValueError, match="recent updates"):
        OperatorBandit(ARMS, window=4).load_state_dict(tampered)
    with pytest.raises(ValueError, match="version"):
        OperatorBandit(ARMS, window=4).load_state_dict({**state, "version": 99})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arms": []}, "at least one arm"),
        ({"arms": ["a", "a"]}, "distinct"),
        ({"arms": "abc"}, "sequence of names"),
        ({"arms": ["a", ""]}, "non-empty"),
        ({"arms": ["a", "b"], "prior_weights": {"a": 1.0}}, "missing: \\['b'\\]"),
        ({"arms": ["a"], "prior_weights": {"a": 1.0, "z": 1.0}}, "unknown: \\['z'\\]"),
        ({"arms": ["a", "b"], "prior_weights": {"a": 1.0, "b": 0.0}}, "prior weight of arm 'b'"),
        ({"arms": ["a"], "exploration": -1.0}, "exploration"),
        ({"arms": ["a"], "temperature": 0.0}, "temperature"),
        ({"arms": ["a", "b", "c"], "min_weight": 0.4}, "at most 1/3"),
        ({"arms": ["a"], "min_weight": -0.1}, "min_weight"),
        ({"arms": ["a"], "window": 0}, "window"),
    ],
)
def test_bad_arguments_are_value_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OperatorBandit(**kwargs)
