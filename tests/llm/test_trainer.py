"""societas.marl.llm.trainer: GRPO updates on a tiny random Llama — direction of the update,
exact gradient accumulation, zero initial KL, resumable checkpoints, a short
end-to-end run through societas.topology.Runtime that raises the reward, and role masking."""

from __future__ import annotations

import copy
import dataclasses
import math
import sys

import pytest
import torch

from societas.agents.llm.transformers_llm import TransformersLLM
from societas.marl.llm.advantages import HopGroup, grpo_advantages
from societas.marl.llm.rollouts import (
    SEGMENTS_KEY,
    RoleMap,
    TokenRecorder,
    TokenSample,
    collate,
    samples_from_trace,
    sequence_logprobs,
)
from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer
from societas.topology import Runtime
from societas.topology.graph import Graph
from societas.topology.trace import Trace, TraceEvent

torch.set_num_threads(1)

PARAMS = {"temperature": 1.0, "max_new_tokens": 4, "min_new_tokens": 2}


@pytest.fixture
def llm(tiny_llm):
    """A private copy of the tiny model (the session fixture is shared with other tests)."""
    return TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu", name="tiny-copy")


def _one_node(params=PARAMS) -> Graph:
    return Graph.build("one", [{"id": "a", "role": "answerer", "prompt": "Answer.", "params": params}], [])


def _rollout(llm, graph, tasks, role_map, seed=0):
    rec = TokenRecorder(llm)
    res = Runtime(graph, llm=rec, seed=seed, on_event=rec.on_event).run_many(tasks)
    return [
        s for k, r in enumerate(res) for s in samples_from_trace(r.trace, role_map, llm.tokenizer, trace_id=k)
    ]


def _logps(model, samples, pad):
    batch = collate(samples, pad)
    with torch.no_grad():
        lp = sequence_logprobs(model, batch)
    return (lp * batch["completion_mask"]).sum(1)


def _params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_positive_advantage_raises_logprob_negative_lowers(llm):
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["say hi", "say hi"], rm, seed=1)
    assert len(samples) == 2 and samples[0].completion_ids != samples[1].completion_ids
    pad = llm.tokenizer.pad_token_id
    before = _logps(llm.model, samples, pad)
    tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-3))
    m = tr.step(samples, torch.tensor([1.0, 0.0]), groups=[0, 0])
    after = _logps(llm.model, samples, pad)
    assert m["advantage_mean"] == pytest.approx(0.0, abs=1e-6)
    assert m["reward_mean"] == pytest.approx(0.5) and m["step"] == 1.0
    assert m["grad_norm"] > 0 and abs(m["kl"]) == 0.0 and m["clip_fraction"] == 0.0
    assert after[0] > before[0] + 1e-3  # rewarded completion is now more likely
    assert after[1] < before[1] - 1e-3  # the other one less likely
    assert not llm.model.training  # eval mode restored for generation


def test_hop_group_keys_give_a_lone_proposal_its_raw_reward(llm):
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["say hi", "say hi"], rm, seed=1)
    tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-3))
    m = tr.step(samples, torch.tensor([0.75, 0.25]), groups=[HopGroup(1), HopGroup(2)])
    assert m["advantage_mean"] == pytest.approx(0.5)  # each alone in its hop group: raw rewards
    plain = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-3))
    assert plain.step(samples, torch.tensor([0.75, 0.25]), groups=[1, 2])["advantage_mean"] == 0.0


def test_dr_grpo_named_once_gives_both_of_its_changes():
    assert GRPOConfig(loss_type="dr_grpo").advantage == "dr_grpo"
    assert GRPOConfig(advantage="dr_grpo").loss_type == "dr_grpo"
    assert GRPOConfig().loss_type == "grpo" and GRPOConfig().advantage == "grpo"
    # both given: an ablation of one change keeps what it says
    mixed = GRPOConfig(loss_type="dr_grpo", advantage="grpo")
    assert (mixed.loss_type, mixed.advantage) == ("dr_grpo", "grpo")
    assert GRPOConfig(loss_type="dapo").advantage == "grpo"


@pytest.mark.parametrize(
    "variant",
    [
        {"loss_type": "grpo"},
        {"loss_type": "bnpo"},
        {"loss_type": "dr_grpo"},
        {"loss_type": "dapo"},
        {"loss_type": "cispo", "clip_eps_high": 5.0},
        {"loss_type": "sapo"},
        {"loss_type": "grpo", "importance_sampling_level": "sequence"},
        {"loss_type": "dapo", "importance_sampling_level": "sequence", "delta": 1.5},
        {"loss_type": "grpo", "top_entropy_quantile": 0.3},
        {"loss_type": "dapo", "top_entropy_quantile": 0.5},
    ],
    ids=lambda v: "-".join(str(x) for x in v.values()),
)
def test_gradient_accumulation_equals_full_batch(llm, variant):
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["q1", "q1", "q2", "q2"], rm, seed=2)
    # unequal completion lengths so that token weighting matters
    samples[0] = TokenSample(
        samples[0].policy,
        samples[0].prompt_ids,
        samples[0].completion_ids[:2],
        samples[0].completion_mask[:2],
        samples[0].old_logprobs[:2],
        samples[0].group_key,
    )
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.3, 1.0], [0.0, 0.0]])
    width = max(len(s.prompt_ids) for s in samples) + max(len(s.completion_ids) for s in samples)
    out = []
    # one batch; two micro-batches; one row per micro-batch through the token cap
    for k, cap in ((1, None), (2, None), (1, width)):
        model = copy.deepcopy(llm.model)
        cfg = GRPOConfig(
            lr=1e-3,
            grad_accum_steps=k,
            micro_batch_tokens=cap,
            **variant,
            advantage="gdpo",
            kl_beta=0.05,
            max_grad_norm=0.5,
        )
        tr = PolicyTrainer(model, llm.tokenizer, cfg)
        assert len(tr._micro_batches(4, width)) == (4 if cap else k)
        m = tr.step(samples, rewards)
        out.append((_params(model), m))
    (p1, m1) = out[0]
    for p2, m2 in out[1:]:
        assert (p1 - p2).abs().max() < 1e-6
        for key in ("loss", "grad_norm", "kl", "ratio"):
            assert m1[key] == pytest.approx(m2[key], rel=1e-4, abs=1e-6)


def test_kl_is_zero_on_first_step_with_identical_reference(llm):
    samples = _rollout(llm, _one_node(), ["x", "x", "x"], RoleMap({"answerer": "p"}), seed=3)
    tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-3, kl_beta=0.1, epochs=1))
    assert tr.ref_model is not llm.model
    m = tr.step(samples, torch.tensor([0.0, 1.0, 2.0]))
    assert abs(m["kl"]) < 1e-7
    m2 = tr.step(samples, torch.tensor([0.0, 1.0, 2.0]))
    assert m2["kl"] > 0  # the policy has moved away from the frozen copy


def test_checkpoint_resume_equals_uninterrupted(llm, tmp_path):
    samples = _rollout(llm, _one_node(), ["a", "a", "b", "b"], RoleMap({"answerer": "p"}), seed=4)
    r1, r2 = torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 1.0, 0.0])
    cfg = GRPOConfig(lr=1e-3, kl_beta=0.05, epochs=2, grad_accum_steps=2)
    init = copy.deepcopy(llm.model)

    a = PolicyTrainer(copy.deepcopy(init), llm.tokenizer, cfg)
    a.step(samples, r1)
    a.save_checkpoint(tmp_path / "ck")
    a.save_checkpoint(tmp_path / "ck")  # a second save replaces the first cleanly
    a.step(samples, r2)

    b = PolicyTrainer(copy.deepcopy(init), llm.tokenizer, cfg)
    with torch.no_grad():  # scramble b's weights: loading must restore them all
        for p in b.model.parameters():
            p.add_(1.0)
    b.load_checkpoint(tmp_path / "ck")
    assert b.step_count == 2
    b.step(samples, r2)
    assert b.step_count == a.step_count == 4
    assert torch.equal(_params(a.model), _params(b.model))
    assert len([p for p in (tmp_path / "ck").iterdir() if p.is_dir()]) == 1
    # an interrupted write (a leftover temp dir) does not disturb loading
    (tmp_path / "ck" / ".tmp-ckpt-99").mkdir()
    b.load_checkpoint(tmp_path / "ck")
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at .*nothing \(missing LATEST\)"):
        b.load_checkpoint(tmp_path / "nothing")


def _trainer_pt(root):
    return next(root.glob("ckpt-*")) / "trainer.pt"


def test_checkpoint_size_is_predicted_and_tied_weights_are_written_once(llm, tmp_path):
    samples = _rollout(llm, _one_node(), ["a", "b"], RoleMap({"answerer": "p"}), seed=2)
    tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-3))
    n_params = sum(p.numel() for p in tr.params)
    embed = llm.model.get_input_embeddings().weight
    assert embed.data_ptr() == llm.model.get_output_embeddings().weight.data_ptr()  # the tiny model ties them
    # Hand count: fp32 weights with the tied matrix once, then AdamW's two fp32 moments per
    # parameter (plus a scalar step per tensor); the estimate before the first update counts the moments.
    weights = 4 * n_params
    assert tr.checkpoint_nbytes() == weights + 2 * 4 * n_params
    tr.save_checkpoint(tmp_path / "before")
    size = _trainer_pt(tmp_path / "before").stat().st_size
    assert weights <= size < weights + (1 << 20)
    tr.step(samples, torch.tensor([1.0, 0.0]))
    after = tr.checkpoint_nbytes()
    assert 3 * weights <= after <= 3 * weights + 8 * len(tr.params)
    tr.save_checkpoint(tmp_path / "after")
    size = _trainer_pt(tmp_path / "after").stat().st_size
    assert after <= size < after + (1 << 20)
    state = torch.load(_trainer_pt(tmp_path / "after"), weights_only=False)
    w = state["weights"]
    assert w["model.embed_tokens.weight"].data_ptr() == w["lm_head.weight"].data_ptr()


def test_checkpoint_without_room_is_a_clear_error_and_keeps_the_previous(llm, tmp_path, monkeypatch):
    import shutil

    from societas.marl.llm import CheckpointError
    from societas.marl.llm import trainer as trainer_mod

    samples = _rollout(llm, _one_node(), ["a", "b"], RoleMap({"answerer": "p"}), seed=3)
    tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-3), policy="p")
    tr.step(samples, torch.tensor([1.0, 0.0]))
    root = tmp_path / "ck"
    tr.save_checkpoint(root)
    kept = (root / "LATEST").read_text()
    saved = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.step(samples, torch.tensor([0.0, 1.0]))

    # 1) Not enough free space: refused before anything is written, naming both sizes.
    real = shutil.disk_usage
    monkeypatch.setattr(
        trainer_mod.shutil, "disk_usage", lambda p: real(p)._replace(free=tr.checkpoint_nbytes() // 2)
    )
    with pytest.raises(CheckpointError, match=r"policy 'p' at step 2 needs about .* MiB but .* free") as err:
        tr.save_checkpoint(root)
    assert err.value.errno == 28
    monkeypatch.setattr(trainer_mod.shutil, "disk_usage", real)

    # 2) The disk fills up mid-write (torch.save then raises a RuntimeError about file positions
    #    while handling the OSError): the error names the OS error, the partial file is removed.
    def full_disk(obj, f):
        f.write(b"x" * 1000)
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            # implicit chaining (__context__ only), as torch does
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1000 vs 900")  # noqa: B904

    monkeypatch.setattr(trainer_mod.torch, "save", full_disk)
    with pytest.raises(CheckpointError, match=r"No space left on device.*previous checkpoint is untouched"):
        tr.save_checkpoint(root)
    monkeypatch.undo()

    assert (root / "LATEST").read_text() == kept
    assert [p.name for p in root.iterdir() if p.is_dir()] == [kept.strip()]
    back = PolicyTrainer(copy.deepcopy(llm.model), llm.tokenizer, GRPOConfig(lr=1e-3))
    back.load_checkpoint(root)
    assert back.step_count == 1
    assert all(torch.equal(back.model.state_dict()[k], v) for k, v in saved.items())


def test_lora_trains_only_the_adapter_and_syncs_merged_weights(llm, tmp_path):
    pytest.importorskip("peft")
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["say hi", "say hi"], rm, seed=1)
    base = copy.deepcopy(llm.model)
    frozen_before = {k: v.clone() for k, v in base.state_dict().items()}
    tr = PolicyTrainer(
        base,
        llm.tokenizer,
        GRPOConfig(lr=1e-2, lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}),
    )
    trainable = [n for n, p in tr.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    pad = llm.tokenizer.pad_token_id
    before = _logps(tr.model, samples, pad)
    tr.step(samples, torch.tensor([1.0, 0.0]), groups=[0, 0])
    tr.step(
        samples, torch.tensor([1.0, 0.0]), groups=[0, 0]
    )  # B starts at 0: the second step moves the output
    after = _logps(tr.model, samples, pad)
    assert after[0] > before[0] and after[1] < before[1]
    # The base weights stayed as they were; only adapters moved.
    for k, v in tr.model.get_base_model().state_dict().items():
        key = k.replace("base_layer.", "")
        if key in frozen_before and "lora_" not in k:
            assert torch.equal(v, frozen_before[key]), k
    # sync_to a separate backend merges the adapter: it then computes the adapted log-probs.
    serve = TransformersLLM(copy.deepcopy(llm.model), llm.tokenizer, device="cpu")
    assert tr.sync_to(serve) is True
    assert torch.allclose(_logps(serve.model, samples, pad), after, atol=1e-4)
    # The checkpoint holds the adapter only and restores it.
    tr.save_checkpoint(tmp_path / "ck")
    state = torch.load(next((tmp_path / "ck").glob("ckpt-*")) / "trainer.pt", weights_only=False)
    assert state["weights"] and all("lora_" in k for k in state["weights"])
    tr2 = PolicyTrainer(copy.deepcopy(llm.model), llm.tokenizer, tr.config)
    tr2.load_checkpoint(tmp_path / "ck")
    assert torch.allclose(_logps(tr2.model, samples, pad), after, atol=1e-5)


def test_lora_without_peft_is_a_clear_error(llm, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft -> ImportError
    with pytest.raises(ImportError, match="needs the 'peft' package"):
        PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lora={"r": 4}))


def test_sync_to(llm, tiny_llm):
    tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(lr=1e-2))
    assert tr.sync_to(llm) is False  # shared model: nothing to copy
    other = TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu")
    samples = _rollout(llm, _one_node(), ["s", "s"], RoleMap({"answerer": "p"}), seed=6)
    tr.step(samples, [1.0, 0.0])
    assert not torch.equal(_params(other.model), _params(llm.model))
    assert tr.sync_to(other) is True
    assert torch.equal(_params(other.model), _params(llm.model))
    from societas.agents.llm.base import SamplingParams

    g = SamplingParams(temperature=1.0, max_new_tokens=5, seed=11)
    assert [c[0].token_ids for c in other.generate(["hello"], g)] == [
        c[0].token_ids for c in llm.generate(["hello"], g)
    ]


def _expected_first_reward(llm, tasks, score: torch.Tensor) -> float:
    """Exact expected reward E[score[first token]] under the model (averaged over tasks)."""
    ids = llm.encode_prompts(
        [[{"role": "system", "content": "Answer."}, {"role": "user", "content": t}] for t in tasks]
    )
    out = []
    with torch.no_grad():
        for x in ids:
            logits = llm.model(input_ids=torch.tensor([x])).logits[0, -1].float()
            out.append(float(torch.softmax(logits, -1) @ score))
    return sum(out) / len(out)


def test_end_to_end_reward_rises(llm):
    tok = llm.tokenizer
    # Reward: how close the first token is (in the initial embedding space) to the token " yes":
    # dense enough for a random tiny model to learn in a few steps.
    emb = llm.model.get_input_embeddings().weight.detach().clone()
    v = emb[tok.encode(" yes", add_special_tokens=False)[0]]
    score = torch.nn.functional.cosine_similarity(emb, v.unsqueeze(0), dim=-1)
    params = {"temperature": 1.0, "max_new_tokens": 2, "min_new_tokens": 1}
    graph = _one_node(params)
    rm = RoleMap({"answerer": "p"})
    tasks = ["count to three", "name a colour"]
    G = 4
    tr = PolicyTrainer(llm.model, tok, GRPOConfig(lr=3e-2, seed=0, max_grad_norm=1.0))
    e0 = _expected_first_reward(llm, tasks, score)
    rewards_seen = []
    for it in range(STEPS):
        samples = _rollout(llm, graph, [t for t in tasks for _ in range(G)], rm, seed=100 + it)
        assert len(samples) == len(tasks) * G and {s.group_key for s in samples} == set(tasks)
        r = score[[s.completion_ids[0] for s in samples]]
        m = tr.step(samples, r)  # groups: the task of each trace
        rewards_seen.append(m["reward_mean"])
        tr.sync_to(llm)
    e1 = _expected_first_reward(llm, tasks, score)
    print(f"E[reward]: {e0:.3f} -> {e1:.3f}; sampled {[round(x, 2) for x in rewards_seen]}")
    # cosine of random 64-d vectors has std ~0.125: +0.04 is a third of a std of the reward
    assert abs(e0) < 0.02 and e1 > e0 + 0.04
    # The loop's own sampled reward_mean agrees: its last 5 steps (40 samples) beat the
    # starting policy's exact expectation. (Against the first 5 sampled steps instead,
    # two 40-sample means with std ~0.02 each, the check was a coin toss on library versions.)
    assert sum(rewards_seen[-5:]) / 5 > e0 + 0.02


STEPS = 25


def _two_role_graph() -> Graph:
    nodes = [
        {"id": "prop", "role": "proposer", "prompt": "Propose a problem.", "params": PARAMS},
        {"id": "solve", "role": "solver", "prompt": "Solve the problem.", "params": PARAMS},
    ]
    return Graph.build("ps", nodes, [("prop", "solve")])


def test_only_the_trained_role_is_updated_and_masked_tokens_are_inert(llm):
    g = _two_role_graph()
    rm = RoleMap({"solver": "s"}).validate(g)
    samples = _rollout(llm, g, ["t1", "t1", "t2"], rm, seed=7)
    assert [s.meta["sender"] for s in samples] == ["solve"] * 3  # proposer is frozen: no samples
    # A trainer for policy "s" drops samples of any other policy (with their rewards).
    rm_all = RoleMap({"solver": "s", "proposer": "p"})
    both = _rollout(llm, g, ["t1", "t1", "t2"], rm_all, seed=7)
    assert sorted(s.policy for s in both) == ["p"] * 3 + ["s"] * 3
    rewards_both = torch.tensor([float(s.policy == "s") * (i % 3) for i, s in enumerate(both)])
    solver_rewards = torch.tensor([float(i % 3) for i, s in enumerate(both) if s.policy == "s"])
    m1 = copy.deepcopy(llm.model)
    m2 = copy.deepcopy(llm.model)
    t1 = PolicyTrainer(m1, llm.tokenizer, GRPOConfig(lr=1e-3), policy="s")
    t2 = PolicyTrainer(m2, llm.tokenizer, GRPOConfig(lr=1e-3))
    met = t1.step(both, rewards_both)
    t2.step([s for s in both if s.policy == "s"], solver_rewards)
    assert met["samples"] == 3
    assert met["tokens"] == sum(len(s.completion_ids) for s in both if s.policy == "s")
    assert torch.equal(_params(m1), _params(m2))

    # A transcript where the frozen proposer's tokens follow the solver's inside one
    # completion (generated=False): they are masked, so their values change nothing.
    base = samples[0]

    def with_foreign(junk):
        segs = [
            {"token_ids": base.completion_ids, "logprobs": base.old_logprobs, "generated": True},
            {"token_ids": junk, "generated": False},
        ]
        ev = TraceEvent(
            step=0,
            round=0,
            sender="solve",
            receivers=[],
            kind="agent",
            role="solver",
            prompt=[{"role": "user", "content": "hi"}],
            output="x",
            meta={SEGMENTS_KEY: segs},
        )
        return samples_from_trace(Trace([ev], {"task": "t"}), rm, llm.tokenizer)[0]

    after = []
    for junk in ([5, 6, 7], [900, 901, 902]):
        s = with_foreign(junk)
        assert s.completion_mask == [1] * len(base.completion_ids) + [0, 0, 0]
        model = copy.deepcopy(llm.model)
        m = PolicyTrainer(model, llm.tokenizer, GRPOConfig(lr=1e-3)).step([s, samples[1]], [1.0, 0.0], [0, 0])
        assert m["tokens"] == len(base.completion_ids) + len(samples[1].completion_ids)
        after.append(_params(model))
    assert torch.equal(after[0], after[1])


def test_truncated_completions_count_in_the_advantages_but_not_in_the_loss(llm):
    """DAPO's overlong filtering (TRL's mask_truncated_completions): the step equals one on the same
    samples with the cut ones' masks zeroed, the advantages computed over all of them."""
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["q", "q", "q", "q"], rm, seed=4)
    reasons = ["length", "stop", "length", "stop"]
    samples = [dataclasses.replace(s, meta={**s.meta, "finish_reason": r}) for s, r in zip(samples, reasons)]
    rewards = torch.tensor([1.0, 0.0, 0.5, 2.0])
    cfg = {"lr": 1e-3, "loss_type": "dapo"}

    def step(config, batch):
        tr = PolicyTrainer(copy.deepcopy(llm.model), llm.tokenizer, GRPOConfig(**config))
        metrics = tr.step(batch, rewards, groups=[0, 0, 0, 0])
        return _params(tr.model), metrics, tr

    masked, m, tr = step({**cfg, "mask_truncated_completions": True}, samples)
    assert m["truncated"] == 2.0
    zeroed = [
        dataclasses.replace(s, completion_mask=[0] * len(s.completion_mask)) if r == "length" else s
        for s, r in zip(samples, reasons)
    ]
    by_hand, m_hand, _ = step(cfg, zeroed)
    assert torch.equal(masked, by_hand) and m["tokens"] == m_hand["tokens"]
    unmasked, m_all, _ = step(cfg, samples)
    assert not torch.equal(masked, unmasked) and m_all["tokens"] > m["tokens"]
    # Without a recorded finish_reason, TRL's rule: cut where the last token is not EOS or padding.
    eos = llm.tokenizer.eos_token_id
    bare = [
        dataclasses.replace(
            samples[0], meta={}, completion_ids=[5, 6, eos], completion_mask=[1, 1, 1], old_logprobs=None
        ),
        dataclasses.replace(
            samples[0], meta={}, completion_ids=[5, 6, 7], completion_mask=[1, 1, 1], old_logprobs=None
        ),
    ]
    assert tr._truncated(bare) == [1]


def test_scale_rewards_chooses_what_divides_the_advantages(llm):
    rewards, groups = torch.tensor([1.0, 0.0, 3.0, 1.0]), torch.tensor([0, 0, 1, 1])
    for config, scale in (
        ({}, True),
        ({"scale_rewards": "batch"}, "batch"),
        ({"scale_rewards": "none"}, False),
        ({"advantage": "dr_grpo"}, False),
        ({"advantage": "dr_grpo", "scale_rewards": "group"}, True),
    ):
        tr = PolicyTrainer(llm.model, llm.tokenizer, GRPOConfig(**config))
        assert torch.equal(tr.advantages(rewards, groups), grpo_advantages(rewards, groups, scale=scale)), (
            config
        )


def test_the_entropies_beside_the_logprobs_are_the_policys_own(llm):
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["q1", "q2"], rm, seed=5)
    batch = collate(samples, llm.tokenizer.pad_token_id)
    with torch.no_grad():
        plain = sequence_logprobs(llm.model, batch)
        logp, entropy = sequence_logprobs(llm.model, batch, with_entropy=True)
        C = batch["completion_mask"].shape[1]
        logits = llm.model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
        ).logits[:, -(C + 1) : -1]
    assert torch.equal(logp, plain)
    expected = torch.distributions.Categorical(logits=logits.float()).entropy()
    torch.testing.assert_close(entropy, expected, atol=1e-5, rtol=1e-5)


def test_top_entropy_quantile_trains_only_the_high_entropy_tokens(llm):
    """The step's mask keeps the top quarter of the kept tokens by the policy's entropy (every
    kept one above every dropped one), and the step still counts every kept token."""
    rm = RoleMap({"answerer": "p"})
    samples = _rollout(llm, _one_node(), ["q", "q", "q"], rm, seed=6)
    tr = PolicyTrainer(
        copy.deepcopy(llm.model), llm.tokenizer, GRPOConfig(lr=1e-3, top_entropy_quantile=0.25)
    )
    batch = collate(samples, tr.pad_id)
    with torch.no_grad():
        _, ent = sequence_logprobs(tr.model, batch, with_entropy=True)
    keep = tr._high_entropy_mask(ent, batch["completion_mask"], len(samples))
    kept = int(batch["completion_mask"].sum())
    assert 0 < int(keep.sum()) <= kept // 4 + 1
    assert ent[keep > 0].min() >= ent[(keep == 0) & (batch["completion_mask"] > 0)].max()
    m = tr.step(samples, torch.tensor([1.0, 0.0, 2.0]), groups=[0, 0, 0])
    assert math.isfinite(m["loss"]) and m["tokens"] == kept  # every kept token still counts
