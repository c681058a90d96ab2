"""GRPO / Dr. GRPO / GDPO advantages against numbers worked out by hand, and against TRL."""

from __future__ import annotations

import math

import pytest
import torch

from societas.marl.llm import gdpo_advantages, group_ids, grpo_advantages
from societas.marl.llm.advantages import HopGroup, raw_singletons

torch.set_num_threads(1)

# Two interleaved groups; weights (1, 0.5) give weighted sums
#   group 0 (samples 0, 2, 4): 1, 2, 3   -> mean 2, unbiased std 1
#   group 1 (samples 1, 3):    0, 4      -> mean 2, unbiased std sqrt(((-2)^2 + 2^2) / 1) = sqrt(8)
REWARDS = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 2.0], [3.0, 2.0], [2.0, 2.0]])
GROUPS = torch.tensor([0, 1, 0, 1, 0])
WEIGHTS = [1.0, 0.5]


def test_grpo_two_groups_by_hand():
    adv = grpo_advantages(REWARDS, GROUPS, weights=WEIGHTS)
    s8 = 2.8284271247461903  # sqrt(8)
    expected = torch.tensor([-1 / 1.0001, -2 / (s8 + 1e-4), 0.0, 2 / (s8 + 1e-4), 1 / 1.0001])
    torch.testing.assert_close(adv, expected)
    # printed out: -0.99990001, -0.70708268, 0, 0.70708268, 0.99990001
    torch.testing.assert_close(adv, torch.tensor([-0.99990001, -0.70708268, 0.0, 0.70708268, 0.99990001]))


def test_dr_grpo_only_centres():
    adv = grpo_advantages(REWARDS, GROUPS, weights=WEIGHTS, scale=False)
    torch.testing.assert_close(adv, torch.tensor([-1.0, -2.0, 0.0, 2.0, 1.0]))


def test_one_dimensional_rewards():
    adv = grpo_advantages(torch.tensor([1.0, 3.0, 10.0, 10.0]), torch.tensor([7, 7, 9, 9]), eps=0.0)
    # group 7: 1, 3 -> mean 2, std sqrt(2); (+-1)/sqrt(2); group 9 constant -> 0
    r = 1 / math.sqrt(2)
    torch.testing.assert_close(adv, torch.tensor([-r, r, 0.0, 0.0]))


def test_gdpo_separates_what_grpo_collapses():
    # Two binary rewards, groups of two. Group A's totals are (0, 1), group B's (0, 2).
    rewards = torch.tensor(
        [
            [0.0, 0.0],
            [1.0, 0.0],  # group A
            [0.0, 0.0],
            [1.0, 1.0],
        ]
    )  # group B
    groups = torch.tensor([0, 0, 1, 1])
    grpo = grpo_advantages(rewards, groups, eps=0.0)
    # GRPO: A: (0 - .5)/sqrt(.5) = -1/sqrt(2); B: (0 - 1)/sqrt(2) = -1/sqrt(2). Identical.
    c = 1 / math.sqrt(2)
    torch.testing.assert_close(grpo, torch.tensor([-c, c, -c, c]))
    assert grpo[1] == pytest.approx(grpo[3])
    assert grpo[0] == pytest.approx(grpo[2])

    gdpo = gdpo_advantages(rewards, groups, eps=0.0)
    # Per reward in group: A: r1 -> (-c, c), r2 constant -> (0, 0); sum (-c, c).
    #                      B: r1 -> (-c, c), r2 -> (-c, c);          sum (-2c, 2c).
    # Batch: s = (-c, c, -2c, 2c), mean 0, unbiased var = 10 c^2 / 3 = 5/3.
    # A_i = s_i / sqrt(5/3): c / sqrt(5/3) = sqrt(3/10) = 0.5477226, 2c / sqrt(5/3) = sqrt(6/5) = 1.0954451
    torch.testing.assert_close(gdpo, torch.tensor([-0.5477226, 0.5477226, -1.0954451, 1.0954451]))
    assert gdpo[3] > gdpo[1] + 0.5  # (0,2) rewarded more than (0,1)


def test_gdpo_weights_by_hand():
    rewards = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    groups = torch.tensor([0, 0, 1, 1])
    adv = gdpo_advantages(rewards, groups, weights=[1.0, 3.0], eps=0.0)
    # s = (-c, c, -4c, 4c); unbiased var = (1+1+16+16) c^2 / 3 = 34/6 = 17/3
    # A = (+-c, +-4c) / sqrt(17/3): c/sqrt(17/3) = sqrt(3/34) = 0.2970443, 4c/... = 1.1881771
    torch.testing.assert_close(adv, torch.tensor([-0.2970443, 0.2970443, -1.1881771, 1.1881771]))


def test_group_ids_from_keys():
    assert group_ids(["q1", "q2", "q1", ("hop", 3), "q2"]).tolist() == [0, 1, 0, 2, 1]
    assert group_ids([]).tolist() == []
    # HRPO-style: group by hop count. hops 1: rewards 0, 2 ; hops 2: rewards 4, 8, 6
    hops = [1, 2, 1, 2, 2]
    rewards = torch.tensor([0.0, 4.0, 2.0, 8.0, 6.0])
    adv = grpo_advantages(rewards, group_ids(hops), eps=0.0)
    # hop 1: mean 1, std sqrt(2) -> -+1/sqrt(2); hop 2: mean 6, std 2 -> -1, +1, 0
    r = 1 / math.sqrt(2)
    torch.testing.assert_close(adv, torch.tensor([-r, -1.0, r, 1.0, 0.0]))
    # labels need not be 0..G-1: the same grouping with arbitrary integer labels
    torch.testing.assert_close(grpo_advantages(rewards, torch.tensor([40, -3, 40, -3, -3]), eps=0.0), adv)


def test_singleton_and_zero_variance_groups_are_zero():
    rewards = torch.tensor([0.1, 0.1, 5.0, 0.0, 3.0, 6.0, 0.1, 0.1, 0.1])
    groups = torch.tensor([0, 0, 1, 2, 2, 2, 3, 3, 3])
    adv = grpo_advantages(rewards, groups)
    # group 0 constant, group 1 singleton, group 3 constant (0.1 * 3 / 3 != 0.1 in float: still exactly 0)
    # group 2: 0, 3, 6 -> mean 3, std 3 -> (-3, 0, 3) / 3.0001
    expected = torch.tensor([0.0, 0.0, 0.0, -3 / 3.0001, 0.0, 3 / 3.0001, 0.0, 0.0, 0.0])
    torch.testing.assert_close(adv, expected)
    assert adv[[0, 1, 2, 6, 7, 8]].eq(0).all()
    assert grpo_advantages(rewards, groups, scale=False)[[0, 1, 2, 6, 7, 8]].eq(0).all()
    # GDPO: per-reward constants and singletons are zero; a batch with one sample or equal s is zero
    assert gdpo_advantages(torch.tensor([[1.0, 2.0]]), torch.tensor([0])).eq(0).all()
    assert gdpo_advantages(torch.tensor([[1.0, 2.0], [1.0, 2.0]]), torch.tensor([0, 0])).eq(0).all()
    assert gdpo_advantages(torch.tensor([[1.0], [2.0]]), torch.tensor([0, 1])).eq(0).all()


def test_hrpo_hop_groups_keep_a_lone_samples_raw_reward():
    # Dr. Zero's reference HRPO: advantages standardised within each hop group, and a hop
    # group with one sample keeps its raw reward (worked by hand below).
    keys = [HopGroup("hops=1"), HopGroup("hops=2"), HopGroup("hops=1"), HopGroup("hops=3"), "q7", "q7", "q8"]
    rewards = torch.tensor([1.0, 0.8, 3.0, 0.0, 1.0, 0.0, 0.6])
    keep = raw_singletons(keys)
    assert keep.tolist() == [True, True, True, True, False, False, False]
    adv = grpo_advantages(rewards, group_ids(keys), keep_raw=keep, eps=0.0)
    # hops=1: 1, 3 -> mean 2, std sqrt(2); hops=2 and hops=3 alone: 0.8 and 0.0 raw;
    # q7: 1, 0 -> mean 0.5, std sqrt(0.5); q8 alone but a GRPO group: 0.
    r2, rh = math.sqrt(2.0), math.sqrt(0.5)
    expected = torch.tensor([-1 / r2, 0.8, 1 / r2, 0.0, 0.5 / rh, -0.5 / rh, 0.0])
    torch.testing.assert_close(adv, expected)
    assert grpo_advantages(rewards, group_ids(keys))[[1, 3]].eq(0).all()  # without the rule: 0
    with pytest.raises(ValueError, match="keep_raw"):
        grpo_advantages(rewards, group_ids(keys), keep_raw=keep[:3])


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="groups"):
        grpo_advantages(torch.ones(3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="weights"):
        grpo_advantages(torch.ones(3, 2), torch.tensor([0, 0, 1]), weights=[1.0])
    with pytest.raises(ValueError, match="finite"):
        gdpo_advantages(torch.tensor([[float("nan")], [1.0]]), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="integer"):
        grpo_advantages(torch.ones(2), torch.tensor([0.0, 1.0]))


def test_matches_trl_formulas():
    """TRL's GRPOTrainer advantage block (grpo_trainer.py, both aggregations), with its ``nanstd``,
    on contiguous groups of ``num_generations`` (its layout)."""
    pytest.importorskip("trl")
    from trl.trainer.utils import nanstd

    gen = torch.Generator().manual_seed(0)
    G, num_gen, R = 5, 4, 3
    rewards_per_func = torch.randint(0, 3, (G * num_gen, R), generator=gen).float()
    weights = torch.tensor([1.0, 0.5, 2.0])
    groups = torch.arange(G).repeat_interleave(num_gen)

    # sum_then_normalize, scale_rewards="group"
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
    mean_g = torch.nanmean(rewards.view(-1, num_gen), dim=1).repeat_interleave(num_gen)
    std_g = nanstd(rewards.view(-1, num_gen), dim=1).repeat_interleave(num_gen)
    trl_grpo = (rewards - mean_g) / (std_g + 1e-4)
    torch.testing.assert_close(
        grpo_advantages(rewards_per_func, groups, weights), trl_grpo, atol=1e-5, rtol=1e-5
    )
    # scale_rewards="none"
    torch.testing.assert_close(
        grpo_advantages(rewards_per_func, groups, weights, scale=False),
        rewards - mean_g,
        atol=1e-5,
        rtol=1e-5,
    )

    # normalize_then_sum (GDPO)
    grouped = rewards_per_func.view(-1, num_gen, R)
    mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
    std_k = nanstd(grouped, dim=1, keepdim=True)
    reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, R)
    summed = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
    trl_gdpo = (summed - torch.nanmean(summed)) / (nanstd(summed) + 1e-4)
    torch.testing.assert_close(
        gdpo_advantages(rewards_per_func, groups, weights), trl_gdpo, atol=1e-5, rtol=1e-5
    )


def test_batch_scaling_divides_the_group_centred_rewards_by_the_batch_std():
    """TRL's scale_rewards='batch' (Lite PPO), by hand: rewards 1, 0 | 3, 1 | 2, 2 in three groups."""
    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0, 2.0, 2.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    batch_std = math.sqrt(sum((r - 1.5) ** 2 for r in (1, 0, 3, 1, 2, 2)) / 5)  # unbiased
    expected = torch.tensor([0.5, -0.5, 1.0, -1.0, 0.0, 0.0]) / (batch_std + 1e-4)  # a constant group: 0
    got = grpo_advantages(rewards, groups, scale="batch")
    torch.testing.assert_close(got, expected)
    assert got[4:].eq(0).all()
    with pytest.raises(ValueError, match="scale must be True, False or 'batch', got 'group'"):
        grpo_advantages(rewards, groups, scale="group")
    # Through the trainer's config: 'batch' here, the group's std by default, none for Dr. GRPO.
    from societas.marl.llm import GRPOConfig

    assert GRPOConfig(scale_rewards="batch").scale_rewards == "batch"
    with pytest.raises(ValueError, match="scale_rewards applies to grpo advantages"):
        GRPOConfig(advantage="gdpo", scale_rewards="batch")
