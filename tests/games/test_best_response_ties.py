"""Best-response ties: the first action (OpenSpiel's BestResponsePolicy) or uniform over the
tied best actions (the PSRO convention of arXiv 2602.16928), with the same value either way."""

from __future__ import annotations

import pyspiel
import pytest
import torch
from open_spiel.python.algorithms import best_response as os_best_response

from societas.marl.games import load_game, run_psro
from societas.marl.games.evaluate import best_response


def _openspiel_value(game, tree, policy, player):
    tab = tree.to_tabular_policy(policy, game)
    return os_best_response.BestResponsePolicy(game, player, tab).value(game.new_initial_state())


def _openspiel_tied_policy(game, tab, player):
    """OpenSpiel's best-response values per information set, made into the uniform-over-ties policy."""
    br = os_best_response.BestResponsePolicy(game, player, tab)
    out = {}
    for key, states in br.infosets.items():
        actions = states[0][0].legal_actions(player)
        values = {a: sum(cf * br.q_value(s, a) for s, cf in states) for a in actions}
        top = max(values.values())
        scale = max(1.0, max(abs(v) for v in values.values()))
        tied = [a for a, v in values.items() if v >= top - 1e-10 * scale]
        out[key] = {a: (1.0 / len(tied) if a in tied else 0.0) for a in actions}
    return out, br.value(game.new_initial_state())


def test_rock_paper_scissors_against_uniform_ties_all_three_actions():
    tree = load_game("matrix_rps", "cpu")
    policy = tree.uniform_policy(1)
    for player in (0, 1):
        sl = tree.infoset_slices[player]
        uniform = best_response(tree, policy, player, ties="uniform")
        first = best_response(tree, policy, player, ties="first")
        torch.testing.assert_close(uniform.policy[0], torch.full((1, 3), 1 / 3, dtype=policy.dtype))
        torch.testing.assert_close(first.policy[0], torch.tensor([[1.0, 0.0, 0.0]], dtype=policy.dtype))
        # by hand: every action wins 1/3, loses 1/3 against the uniform policy
        assert float(uniform.value[0]) == float(first.value[0]) == 0.0
        assert sl.stop - sl.start == 1


@pytest.mark.parametrize("opponent", ["uniform", "never_bets"])
def test_kuhn_best_response_is_uniform_over_openspiels_tied_actions(opponent):
    tree = load_game("kuhn_poker", "cpu")
    game = pyspiel.load_game("kuhn_poker")
    policy = tree.uniform_policy(1).clone()
    if opponent == "never_bets":  # player 0 then never reaches "pb": every action there ties
        pass_only = torch.zeros(tree.max_actions, dtype=policy.dtype)
        pass_only[0] = 1.0
        policy[0, tree.infoset_slices[1]] = pass_only
    expected, value = _openspiel_tied_policy(game, tree.to_tabular_policy(policy, game), 0)
    result = best_response(tree, policy, 0, ties="uniform")
    full = policy.clone()
    full[:, tree.infoset_slices[0]] = result.policy
    ours = tree.to_tabular_policy(full, game)
    ties = 0
    for key, probs in expected.items():
        row = ours.policy_for_key(key)
        assert [row[a] for a in sorted(probs)] == pytest.approx([probs[a] for a in sorted(probs)], abs=1e-12)
        ties += max(probs.values()) < 1.0
    assert ties >= (3 if opponent == "never_bets" else 1)
    assert float(result.value[0]) == pytest.approx(value, abs=1e-12)
    first = best_response(tree, policy, 0, ties="first")
    assert float(first.value[0]) == pytest.approx(value, abs=1e-12)


def test_psro_uses_uniform_ties_by_default_and_refuses_unknown_rules():
    tree = load_game("kuhn_poker", "cpu")
    uniform = run_psro(tree, 2, "nash")
    first = run_psro(tree, 2, "nash", br_ties="first")
    new_u, new_f = uniform.populations[0][1], first.populations[0][1]
    differ = (new_u - new_f).abs().sum(-1) > 0
    assert differ.any()  # against the uniform first member, Kuhn has a tied best response
    assert torch.all(new_u[differ].max(-1).values == 0.5)  # mixed where first picked one action
    assert uniform.exploitability[-1] <= uniform.exploitability[0]
    with pytest.raises(ValueError, match="br_ties must be one of first, uniform"):
        run_psro(tree, 1, "nash", br_ties="random")
