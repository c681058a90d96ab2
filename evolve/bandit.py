"""Adaptive choice of the mutation operator and LLM model: UCB1 turned into sampling weights.

The arms are the LLM-free operators (``"constant"``, ``"crossover"``, ...)
and each configured LLM model (``"llm:gpt-4o"``, ...); :class:`OperatorBandit`
learns which of them produce children that beat their parent.

**Reward.** :meth:`OperatorBandit.update` takes the child's *improvement*
over its parent (child fitness minus parent fitness; ``None`` for a child
that failed or could not be made, see :func:`improvement`) and credits the
arm with ``1`` when it is ``> 0``, else ``0``: the success rate that
adaptive operator selection uses as credit, and the ``improved_rate`` the
controller already reports per operator. It is bounded in [0, 1] as UCB1's
analysis assumes, free of the task's fitness scale (which differs between
tasks and shrinks as a run converges), and one huge jump, say from a
lucky evaluation, counts no more than a small real improvement. A failed
child counts as a miss: it cost an evaluation or an LLM call and gave nothing.

**Index.** Arm ``i``, pulled ``n_i`` times with mean reward ``mu_i``, out of
``N = sum_j n_j`` pulls, has the UCB1 index (Auer, Cesa-Bianchi & Fischer
2002, "Finite-time analysis of the multiarmed bandit problem")::

    U_i = mu_i + c * sqrt(ln(N) / n_i)        (c = exploration; sqrt(2) is UCB1)

With ``window``, the counts cover the last ``window`` updates only
(sliding-window UCB, Garivier & Moulines 2011), so the statistics follow
operators whose usefulness changes as the search moves on; an arm with no
update left in the window is untried again.

**Weights.** The controller plans a whole batch of children from one
snapshot, so the bandit gives a distribution, not an argmax (an argmax would
send the whole batch to one arm before any of its results is seen). With
prior weights ``pi_i`` (the configured operator weights, normalised), ``K``
arms and ``m = min_weight``:

1. while some arm is untried, the untried arms share the mass in proportion
   to their prior, ``q_i = pi_i / sum_{untried} pi_j``, and tried arms get
   ``q_i = 0`` (UCB1's "pull every arm once": an untried arm's index is
   infinite);
2. once every arm has been tried, ``q_i ∝ pi_i * exp((U_i - max_j U_j) / T)``
   with temperature ``T``: a Boltzmann (softmax) distribution over the UCB
   indices, the prior entering as the initial weights of the exponential
   weights family (Hedge, Freund & Schapire 1997). Arms whose optimistic
   values are close share the batch, a clear winner takes most of it; with
   equal indices the weights *are* the configured weights, so the bandit
   starts from, and without evidence stays at, what the configuration says.
   Softmax over plain means can stop exploring too early (Cesa-Bianchi et
   al. 2017, "Boltzmann exploration done right"); over UCB indices the
   exploration bonus of a neglected arm keeps growing with ``ln N`` until it
   is drawn again;
3. every arm keeps a floor: ``p_i = m + (1 - K m) q_i``, the minimum
   probability of probability matching and adaptive pursuit (Thierens 2005),
   so no arm starves whatever the estimates.

The weights sum to 1 and each is at least ``min_weight``.
(ShinkaEvolve's bandit, for comparison, splits the mass epsilon-greedily:
``1 - eps`` to the UCB argmax, ``eps`` to the rest.)

:meth:`OperatorBandit.snapshot` records the weights at an iteration (for a
"weights over time" plot); :meth:`OperatorBandit.state_dict` /
:meth:`OperatorBandit.load_state_dict` carry the statistics across a resume
as JSON. For runs to stay reproducible, call :meth:`~OperatorBandit.update`
in iteration order (as the controller applies a batch's programs) and plan a
batch from the weights of one snapshot.
"""

from __future__ import annotations

import collections
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OperatorBandit", "improvement"]

STATE_VERSION = 1


def improvement(child_fitness: float | None, parent_fitness: float | None) -> float | None:
    """The child's improvement over its parent, as :meth:`OperatorBandit.update` takes it.

    ``None`` when the child has no finite fitness (it failed); ``inf`` when
    the parent has none (any valid child beats a failed parent); else
    ``child_fitness - parent_fitness``.
    """
    if child_fitness is None or not math.isfinite(child_fitness):
        return None
    if parent_fitness is None or not math.isfinite(parent_fitness):
        return math.inf
    return child_fitness - parent_fitness


def _positive_number(name: str, value: Any, *, allow_zero: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


class OperatorBandit:
    """UCB1 over mutation operators and LLM models, as sampling weights (see the module docstring).

    ``arms``: the arm names (distinct, non-empty). ``prior_weights``: a
    positive weight for every arm (normalised; default uniform), e.g. the
    configured mutation weights; leave disabled operators out of ``arms``.
    ``exploration``: UCB1's ``c`` (``sqrt(2)``: Auer et al.'s UCB1; 0: greedy
    on the means). ``window``: count only the last ``window`` updates (None:
    all). ``min_weight``: every arm's least sampling probability, at most
    ``1 / len(arms)`` (which makes the weights uniform). ``temperature``: the
    softmax temperature, in reward units (rewards are 0 or 1): an index
    ``T * ln 2`` higher doubles an arm's weight, and a prior ``r`` times
    larger is worth ``T * ln r`` of index. The default 0.05 is a middle
    choice: in a simulated run (five operators with success rates 0.03-0.25,
    the default mutation weights as prior, 60 batches of 16, ten seeds) the
    successes fell as the temperature rose (0.02: 150, 0.05: 143, 0.1: 136,
    0.2: 131 of 960 children; the static weights: 128), while a lower
    temperature reacts more sharply to the early, noisy estimates.
    """

    def __init__(
        self,
        arms: Sequence[str],
        prior_weights: Mapping[str, float] | None = None,
        exploration: float = math.sqrt(2),
        window: int | None = None,
        min_weight: float = 0.02,
        temperature: float = 0.05,
    ) -> None:
        if isinstance(arms, str):
            raise ValueError(f"arms must be a sequence of names, not the string {arms!r}")
        names = list(arms)
        if not names:
            raise ValueError("a bandit needs at least one arm")
        bad = [a for a in names if not isinstance(a, str) or not a]
        if bad:
            raise ValueError(f"arm names must be non-empty strings, got {bad!r}")
        duplicates = sorted({a for a in names if names.count(a) > 1})
        if duplicates:
            raise ValueError(f"arm names must be distinct; repeated: {duplicates}")
        self.arms: tuple[str, ...] = tuple(names)
        self._index = {arm: i for i, arm in enumerate(self.arms)}

        if prior_weights is None:
            raw = dict.fromkeys(self.arms, 1.0)
        else:
            unknown = sorted(set(prior_weights) - set(self.arms))
            missing = [a for a in self.arms if a not in prior_weights]
            if unknown or missing:
                raise ValueError(
                    f"prior_weights must give a weight for exactly the arms {list(self.arms)}; "
                    f"unknown: {unknown}, missing: {missing}"
                )
            raw = {
                arm: _positive_number(f"prior weight of arm {arm!r}", prior_weights[arm]) for arm in self.arms
            }
        self._raw_prior = raw  # kept for state_dict: normalising it again gives the same floats
        total = math.fsum(raw.values())
        self.prior: dict[str, float] = {arm: raw[arm] / total for arm in self.arms}

        self.exploration = _positive_number("exploration", exploration, allow_zero=True)
        self.temperature = _positive_number("temperature", temperature)
        self.min_weight = _positive_number("min_weight", min_weight, allow_zero=True)
        if self.min_weight * len(self.arms) > 1.0 + 1e-12:
            raise ValueError(
                f"min_weight {min_weight} is too large for {len(self.arms)} arms: "
                f"it must be at most 1/{len(self.arms)} = {1 / len(self.arms):.6g}"
            )
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be an integer >= 1 or None, got {window!r}")
        self.window = window

        k = len(self.arms)
        self._pulls = [0] * k  # within the window
        self._successes = [0] * k  # within the window
        self._total_pulls = [0] * k  # over the whole run
        self._total_successes = [0] * k
        self._recent: collections.deque[tuple[int, int]] = collections.deque()  # (arm, reward), windowed
        self.history: list[tuple[int, dict[str, float]]] = []

    # ------------------------------------------------------------------ learning

    def _arm_index(self, arm: str) -> int:
        try:
            return self._index[arm]
        except (KeyError, TypeError):
            raise KeyError(f"unknown arm {arm!r}; known arms: {list(self.arms)}") from None

    def update(self, arm: str, reward: float | None) -> float:
        """Credit ``arm`` with one child; returns the reward credited, 1.0 or 0.0.

        ``reward`` is the child's improvement over its parent (child minus
        parent fitness, :func:`improvement`); it counts as 1 when ``> 0``, as 0
        otherwise, for ``None`` (a failed child) and for NaN. Unknown arm:
        KeyError naming the known arms.
        """
        i = self._arm_index(arm)
        success = int(reward is not None and not math.isnan(reward) and reward > 0)
        self._pulls[i] += 1
        self._successes[i] += success
        self._total_pulls[i] += 1
        self._total_successes[i] += success
        if self.window is not None:
            self._recent.append((i, success))
            if len(self._recent) > self.window:
                old, old_success = self._recent.popleft()
                self._pulls[old] -= 1
                self._successes[old] -= old_success
        return float(success)

    # ------------------------------------------------------------------ statistics

    def pulls(self) -> dict[str, int]:
        """Updates per arm that count now (within the window)."""
        return dict(zip(self.arms, self._pulls))

    def total_pulls(self) -> dict[str, int]:
        """Updates per arm over the whole run (the window aside)."""
        return dict(zip(self.arms, self._total_pulls))

    def means(self) -> dict[str, float | None]:
        """Success rate per arm within the window (None for an untried arm)."""
        return {arm: (s / n if n else None) for arm, n, s in zip(self.arms, self._pulls, self._successes)}

    def ucb_scores(self) -> dict[str, float]:
        """UCB1 index ``mu_i + c sqrt(ln N / n_i)`` per arm; ``inf`` for an untried arm."""
        total = sum(self._pulls)
        log_total = math.log(total) if total > 0 else 0.0
        scores: dict[str, float] = {}
        for arm, n, s in zip(self.arms, self._pulls, self._successes):
            scores[arm] = math.inf if n == 0 else s / n + self.exploration * math.sqrt(log_total / n)
        return scores

    def weights(self) -> dict[str, float]:
        """Sampling probabilities over the arms (sum 1, each >= ``min_weight``); see the module docstring."""
        scores = self.ucb_scores()
        untried = [arm for arm in self.arms if scores[arm] == math.inf]
        if untried:
            mass = math.fsum(self.prior[arm] for arm in untried)
            base = {arm: (self.prior[arm] / mass if arm in untried else 0.0) for arm in self.arms}
        else:
            top = max(scores.values())
            raw = {
                arm: self.prior[arm] * math.exp((scores[arm] - top) / self.temperature) for arm in self.arms
            }
            total = math.fsum(raw.values())
            base = {arm: raw[arm] / total for arm in self.arms}
        spread = 1.0 - self.min_weight * len(self.arms)
        return {arm: self.min_weight + spread * base[arm] for arm in self.arms}

    def choose(self, rng: random.Random) -> str:
        """One arm drawn from :meth:`weights` with ``rng``."""
        weights = self.weights()
        return rng.choices(self.arms, weights=[weights[arm] for arm in self.arms])[0]

    def snapshot(self, iteration: int) -> dict[str, float]:
        """Append ``(iteration, weights())`` to :attr:`history` and return the weights."""
        weights = self.weights()
        self.history.append((int(iteration), dict(weights)))
        return weights

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per arm: prior, weight, UCB index, windowed pulls and mean, and run totals (for reports)."""
        weights, scores, means = self.weights(), self.ucb_scores(), self.means()
        return {
            arm: {
                "prior": self.prior[arm],
                "weight": weights[arm],
                "ucb": scores[arm],
                "pulls": self._pulls[i],
                "mean": means[arm],
                "total_pulls": self._total_pulls[i],
                "total_successes": self._total_successes[i],
            }
            for i, arm in enumerate(self.arms)
        }

    # ------------------------------------------------------------------ persistence

    def state_dict(self) -> dict[str, Any]:
        """Settings, statistics and history as plain JSON types (``json.dumps`` takes it as is)."""
        return {
            "version": STATE_VERSION,
            "arms": list(self.arms),
            "prior_weights": dict(self._raw_prior),
            "exploration": self.exploration,
            "window": self.window,
            "min_weight": self.min_weight,
            "temperature": self.temperature,
            "pulls": self.pulls(),
            "successes": dict(zip(self.arms, self._successes)),
            "total_pulls": self.total_pulls(),
            "total_successes": dict(zip(self.arms, self._total_successes)),
            "recent": [[self.arms[i], reward] for i, reward in self._recent]
            if self.window is not None
            else None,
            "history": [[iteration, dict(weights)] for iteration, weights in self.history],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the statistics and history of :meth:`state_dict` (this bandit's settings stay).

        The arms (in any order) and the window must match the state's: the
        counts mean something else otherwise (ValueError). The weights then
        equal the saved bandit's whenever the settings are the same.
        """
        version = state.get("version")
        if version != STATE_VERSION:
            raise ValueError(f"unsupported bandit state version {version!r} (expected {STATE_VERSION})")
        saved = list(state["arms"])
        if set(saved) != set(self.arms) or len(saved) != len(self.arms):
            raise ValueError(
                f"the state is for arms {saved}, this bandit has {list(self.arms)}; "
                f"missing from the state: {sorted(set(self.arms) - set(saved))}, "
                f"not in this bandit: {sorted(set(saved) - set(self.arms))}"
            )
        if state.get("window") != self.window:
            raise ValueError(
                f"the state was made with window={state.get('window')!r}, this bandit has {self.window!r}"
            )

        def counts(key: str) -> list[int]:
            table = state[key]
            values = [int(table[arm]) for arm in self.arms]
            if any(v < 0 for v in values):
                raise ValueError(f"negative counts in the state's {key!r}: {table}")
            return values

        pulls, successes = counts("pulls"), counts("successes")
        total_pulls, total_successes = counts("total_pulls"), counts("total_successes")
        if any(s > n for s, n in zip(successes + total_successes, pulls + total_pulls)):
            raise ValueError("the state has more successes than pulls for some arm")
        recent: collections.deque[tuple[int, int]] = collections.deque()
        if self.window is not None:
            for arm, reward in state.get("recent") or []:
                recent.append((self._arm_index(arm), int(reward)))
            by_arm, wins = [0] * len(self.arms), [0] * len(self.arms)
            for i, reward in recent:
                by_arm[i] += 1
                wins[i] += reward
            if by_arm != pulls or wins != successes or len(recent) > self.window:
                raise ValueError("the state's recent updates do not match its windowed pulls and successes")
        self._pulls, self._successes = pulls, successes
        self._total_pulls, self._total_successes = total_pulls, total_successes
        self._recent = recent
        self.history = [
            (int(iteration), {str(arm): float(w) for arm, w in weights.items()})
            for iteration, weights in state.get("history", [])
        ]

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> OperatorBandit:
        """A bandit with the settings, statistics and history of :meth:`state_dict`."""
        bandit = cls(
            state["arms"],
            prior_weights=state["prior_weights"],
            exploration=state["exploration"],
            window=state["window"],
            min_weight=state["min_weight"],
            temperature=state["temperature"],
        )
        bandit.load_state_dict(state)
        return bandit
