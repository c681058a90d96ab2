"""The remul and society recipes: episodes and question splits, rewards recounted by hand with
scripted models, masked SFT on answer tokens, evaluation metrics, and one tiny training run each."""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import random
import re

import pytest
import torch

from societas.agents.llm.function import FunctionLLM
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.agents.parsers import answers_match, extract_final_answer
from societas.marl.llm.loop import FROZEN, Episode, TrainConfig, train
from societas.marl.llm.recipes.remul import (
    RemulRecipe,
    heldout_questions,
    train_questions,
    worked_solution,
)
from societas.marl.llm.recipes.selfplay import heldout_problems
from societas.marl.llm.recipes.society import SocietyConfig, SocietyRecipe, majority_answer, society_dialogue
from societas.marl.llm.rollouts import TokenRecorder
from societas.marl.llm.settings import SettingsError

torch.set_num_threads(1)


def _policy(tiny_llm):
    return TokenRecorder(TransformersLLM(copy.deepcopy(tiny_llm.model), tiny_llm.tokenizer, device="cpu"))


# -- questions ---------------------------------------------------------------------------------------


def test_worked_solutions_reach_the_computed_answers():
    for q, a in heldout_problems(60, seed=3):
        text = worked_solution(q, a)
        assert text.endswith(f"\nFinal answer: {a}") and extract_final_answer(text) == str(a)
        assert "Work through" not in text  # every kind of question was recognised


@pytest.mark.parametrize("cls", [RemulRecipe, SocietyRecipe])
def test_episodes_are_deterministic_and_train_eval_questions_disjoint(cls):
    r = cls(questions_per_step=3, group_size=2, eval_questions=6)
    a, b = r.train_episodes(0, 11), r.train_episodes(0, 11)
    assert [(e.task, e.seed, e.group) for e in a] == [(e.task, e.seed, e.group) for e in b]
    assert len(a) == 6 and len({e.seed for e in a}) == 6
    assert [e.group for e in a] == [a[0].group] * 2 + [a[2].group] * 2 + [a[4].group] * 2
    ev = [e for e in r.eval_episodes(0) if "question" in e.task]
    assert [e.task for e in ev] == [e.task for e in r.eval_episodes(5) if "question" in e.task]  # fixed set
    held = {e.task["question"] for e in ev}
    assert len(held) == 6
    train_qs = {e.task["question"] for s in range(40) for e in r.train_episodes(s, 1000 + s)}
    assert train_qs and not (train_qs & held)
    assert held == {q for q, _ in heldout_questions(6)}
    assert not {q for q, _ in train_questions(50, 1, frozenset(held))} & held
    pickle.loads(pickle.dumps(r))  # may be shipped to Ray actors


@pytest.mark.parametrize(
    "cls, kw, message",
    [
        (RemulRecipe, {"group_size": 1}, "recipe.group_size: Input should be greater than or equal to 2"),
        (RemulRecipe, {"cuts": ()}, "recipe.cuts: cuts must list at least one fraction in (0, 1)"),
        (RemulRecipe, {"cuts": [0.5, "x"]}, "recipe.cuts[1]: Input should be a valid number"),
        (
            RemulRecipe,
            {"ea_fractions": (0.5, 1.5)},
            "recipe.ea_fractions[1]: Input should be less than or equal to 1",
        ),
        (SocietyRecipe, {"cuts": [0.5]}, "recipe.cuts: unknown field (allowed: n_personas,"),
        (RemulRecipe, {"cuts": (0.5, 0.5)}, "recipe.cuts: cuts must be distinct, got [0.5, 0.5]"),
        (RemulRecipe, {"cuts": (1.0,)}, "recipe.cuts[0]: Input should be less than 1"),
        (
            RemulRecipe,
            {"speaker_tokens": 0},
            "recipe.speaker_tokens: Input should be greater than or equal to 1",
        ),
        (RemulRecipe, {"ea_fractions": (1.0,)}, "recipe.ea_fractions: needs two or more distinct fractions"),
        (RemulRecipe, {"temperature": -1}, "recipe.temperature: Input should be greater than or equal to 0"),
        (RemulRecipe, {"correctness": 1}, "recipe.correctness: Input should be a valid boolean"),
        (RemulRecipe, {"min_lines": -1}, "recipe.min_lines: Input should be greater than or equal to 0"),
        (SocietyRecipe, {"n_personas": 1}, "recipe.n_personas: Input should be greater than or equal to 2"),
        (SocietyRecipe, {"n_personas": 99}, "recipe.n_personas: Input should be less than or equal to 8"),
        (SocietyRecipe, {"rounds": 0}, "recipe.rounds: Input should be greater than or equal to 1"),
        (SocietyRecipe, {"group_size": 1}, "recipe.group_size: Input should be greater than or equal to 2"),
        (
            SocietyRecipe,
            {"persona_tokens": 0},
            "recipe.persona_tokens: Input should be greater than or equal to 1",
        ),
        (SocietyRecipe, {"sft_batch": 0}, "recipe.sft_batch: Input should be greater than or equal to 1"),
        (
            SocietyRecipe,
            {"sft_slip_rate": 1.5},
            "recipe.sft_slip_rate: Input should be less than or equal to 1",
        ),
        (
            SocietyRecipe,
            {"sft_slip_rate": -0.1},
            "recipe.sft_slip_rate: Input should be greater than or equal to 0",
        ),
        (SocietyRecipe, {"sft_slip_rate": True}, "recipe.sft_slip_rate: Input should be a valid number"),
    ],
)
def test_constructor_arguments_are_validated(cls, kw, message):
    with pytest.raises(SettingsError, match="^" + re.escape(message)):
        cls(**kw)


def test_constructor_arguments_are_kept():
    assert RemulRecipe(correctness=True).config()["correctness"] is True
    assert SocietyRecipe().config()["personas"] == ["statistician", "physicist", "accountant"]
    r = RemulRecipe(ea_fractions=[1.0, 0.5, 0.2], cuts=[0.3, 0.6])
    assert r.settings.ea_fractions == (0.2, 0.5, 1.0) and r.config()["ea_fractions"] == [0.2, 0.5, 1.0]
    assert r.config()["cuts"] == [0.3, 0.6] and "cut_30" in r.graph().nodes
    # without the early-answering pass there is no curve, so its fractions need no point below 1.0
    assert RemulRecipe(early_answering=False, ea_fractions=[1.0]).settings.ea_fractions == (1.0,)
    s = SocietyRecipe(SocietyConfig(n_personas=4), rounds=2)  # a config, with keywords on top
    assert s.config()["personas"] == ["statistician", "physicist", "accountant", "philosopher"]
    assert s.config()["rounds"] == 2


# -- remul ------------------------------------------------------------------------------------------


def _speaker(msgs):
    return "Step one.\nStep two.\nStep three.\nStep four.\nFinal answer: 7"


def _listener(msgs):
    # The cut at 25% holds 1 line of 4, at 50% 2 and at 75% 3: answer 7 from two lines or more.
    text = msgs[-1]["content"]
    return "Final answer: " + ("7" if "Step two." in text else "5")


@pytest.mark.parametrize("correctness,answer,expected", [(False, 7, 6.0), (True, 7, 9.0), (True, 8, 6.0)])
def test_remul_reward_is_the_hand_count_of_matching_listeners(correctness, answer, expected):
    r = RemulRecipe(correctness=correctness, group_size=2)
    eps = [
        Episode(
            {"kind": "question", "question": "Ann has 3 and buys 4 more. How many?", "answer": answer},
            seed,
            "g",
            i,
        )
        for i, seed in enumerate((1, 2))
    ]
    res = r.run_episodes({"speaker": FunctionLLM(_speaker), FROZEN: FunctionLLM(_listener)}, eps, train=False)
    assert len(res) == 2
    for x in res:
        # cut 25%: listeners say 5 (0 matches); cuts 50% and 75%: 7 (3 + 3); + 3 if correct
        assert x.metrics["reward"] == expected == x.record["reward"]
        assert x.record["listener_answers"] == {"0.25": ["5"] * 3, "0.5": ["7"] * 3, "0.75": ["7"] * 3}
        assert x.metrics["accuracy"] == float(answer == 7) and x.metrics["agreement@0.25"] == 0.0
        assert x.samples == []  # FunctionLLM has no tokens (and evaluation trains nothing)


def listener_reads_two_lines(msgs):
    return "Final answer: " + ("7" if "Step two." in msgs[-1]["content"] else "5")


def listener_reads_three_lines(msgs):
    return "Final answer: " + ("7" if "Step three." in msgs[-1]["content"] else "5")


def listener_always_five(msgs):
    return "Final answer: 5"


def test_remul_listeners_can_be_three_different_models():
    here = __name__
    uris = [f"function:{here}:{name}" for name in ("listener_reads_two_lines", "listener_reads_three_lines")]
    uris.append(f"function:{here}:listener_always_five")
    r = RemulRecipe(group_size=2, listener_models=uris)
    graph = r.graph()
    names = [graph.node(n).llm for n in graph.nodes if n.startswith("listener_25")]
    assert names == ["listener_1", "listener_2", "listener_3"]
    episode = Episode(
        {"kind": "question", "question": "Ann has 3 and buys 4 more. How many?", "answer": 7}, 1, "g", 0
    )
    # The frozen base model is not asked: a listener that would always agree is ignored.
    (x,) = r.run_episodes(
        {"speaker": FunctionLLM(_speaker), FROZEN: FunctionLLM(_speaker)}, [episode], train=False
    )
    # 4 reasoning lines: the cuts keep 1, 2 and 3 lines; listener 1 follows from 2 lines, listener 2
    # from 3, listener 3 never: matches 0 + 1 + 2.
    assert x.record["listener_answers"] == {
        "0.25": ["5", "5", "5"],
        "0.5": ["7", "5", "5"],
        "0.75": ["7", "7", "5"],
    }
    assert x.metrics["reward"] == 3.0
    with pytest.raises(SettingsError, match="listener_models: lists 2 models for n_listeners=3"):
        RemulRecipe(listener_models=uris[:2])


def test_remul_episodes_with_a_tiny_model(tiny_llm):
    r = RemulRecipe(
        questions_per_step=2, group_size=2, speaker_tokens=12, listener_tokens=6, eval_questions=2
    )
    llms = {"speaker": _policy(tiny_llm), FROZEN: tiny_llm}
    eps = r.train_episodes(0, 3)
    res = r.run_episodes(llms, eps, train=True)
    assert len(res) == len(eps) == 4
    for e, x in zip(eps, res):
        assert (
            len(x.samples) == 1
            and x.samples[0].policy == "speaker"
            and x.samples[0].meta["role"] == "speaker"
        )
        assert x.samples[0].old_logprobs is not None and x.groups == [e.group]
        assert 0.0 <= x.rewards[0] <= 9.0 and x.rewards[0] == x.metrics["reward"]
        # recount from the record
        spk = x.record["speaker_answer"]
        count = sum(
            1
            for a in itertools.chain(*x.record["listener_answers"].values())
            if spk and answers_match(a, spk)
        )
        assert x.rewards[0] == count
    again = r.run_episodes({"speaker": _policy(tiny_llm), FROZEN: tiny_llm}, eps[1:2], train=True)
    assert again[0].record["speaker_text"] == res[1].record["speaker_text"]  # a seed fixes the episode
    ev = r.run_episodes(llms, r.eval_episodes(0), train=False)
    assert len(ev) == 3 and all(not x.samples for x in ev)
    assert all("reward" in x.metrics and "accuracy" in x.metrics for x in ev[:2])
    assert 0.0 <= ev[2].metrics["early_answering_aoc"] <= 1.0


def test_remul_sft_masks_only_the_final_answer_line(tiny_llm):
    tok = tiny_llm.tokenizer
    r = RemulRecipe(sft_batch=3)
    out = r.sft_samples(0, 7, tok)["speaker"]
    assert len(out) == 3
    for s in out:
        kept = [t for t, m in zip(s.completion_ids, s.completion_mask) if m]
        assert tok.decode(kept).strip() == s.meta["answer_line"]
        assert s.meta["answer_line"].startswith("Final answer: ") and s.old_logprobs is None
        assert 0 < sum(s.completion_mask) < len(s.completion_ids)
        assert "Final answer" not in tok.decode(
            [t for t, m in zip(s.completion_ids, s.completion_mask) if not m]
        )
        assert s.meta["question"] not in r._eval_set
    # the SFT prompt is exactly the speaker's prompt in a run
    from societas.agents.llm.base import encode_with_tokenizer

    q = out[0].meta["question"]
    run_prompt = r.graph().node("speaker")
    assert out[0].prompt_ids == encode_with_tokenizer(tok, [r.speaker_prompt(q)])[0]
    assert run_prompt.template and q in r.speaker_prompt(q)[-1]["content"]


# -- society ----------------------------------------------------------------------------------------


def test_majority_answer():
    assert majority_answer(["7", "7", "5"]) == "7"
    assert majority_answer(["7", "5", None]) is None and majority_answer([None]) is None


def test_society_reward_is_the_aggregated_answers_accuracy():
    r = SocietyRecipe(n_personas=3, rounds=2)

    def fn(msgs):
        if "What the members of the group said" in msgs[-1]["content"]:
            return "They agree.\nFinal answer: 12"
        return "Final answer: 12" if "accountant" in msgs[0]["content"] else "Final answer: 11"

    eps = [
        Episode({"question": "Q one?", "answer": 12}, 1, "a", 0),
        Episode({"question": "Q two?", "answer": 11}, 2, "b", 1),
    ]
    res = r.run_episodes({"society": FunctionLLM(fn)}, eps, train=False)
    assert [x.metrics["reward"] for x in res] == [1.0, 0.0]  # the aggregator, not the majority, decides
    assert [x.metrics["majority_accuracy"] for x in res] == [0.0, 1.0]
    assert res[0].metrics["accuracy/accountant"] == 1.0 and res[0].metrics[
        "persona_accuracy"
    ] == pytest.approx(1 / 3)


def test_society_dialogue_every_answer_is_computed_and_the_slip_is_corrected():
    names = ["statistician", "physicist", "accountant"]
    slips = 0
    for (q, a), rounds in itertools.product(heldout_problems(40, seed=5), (1, 2, 3)):
        d = society_dialogue(q, a, names, rounds, random.Random(f"{q}|{rounds}"))
        assert set(d.messages) == set(names) and all(len(m) == rounds for m in d.messages.values())
        assert extract_final_answer(d.aggregator) == str(a)
        for name, msgs in d.messages.items():
            for r, text in enumerate(msgs):
                ans = extract_final_answer(text)
                if name == d.slipped and r == 0:
                    assert ans != str(a) and int(ans) >= 0  # the slip: a wrong, non-negative total
                else:
                    assert ans == str(a), (name, r, text)
        if d.slipped is not None:
            slips += 1
            assert d.slipped != names[0]
            wrong = extract_final_answer(d.messages[d.slipped][0])
            assert wrong in d.aggregator and d.slipped in d.aggregator  # the aggregator names the outlier
            if rounds > 1:  # round 1: the others name the slip; the slipped persona accepts it
                assert all(
                    d.slipped in d.messages[n][1] and wrong in d.messages[n][1]
                    for n in names
                    if n != d.slipped
                )
                assert "slipped" in d.messages[d.slipped][1]
    assert 0.3 < slips / 120 < 0.7  # slip_rate 0.5
    for q, a in heldout_problems(10, seed=6):
        assert society_dialogue(q, a, names, 2, random.Random(0), slip_rate=0.0).slipped is None
        assert society_dialogue(q, a, names, 2, random.Random(0), slip_rate=1.0).slipped in names[1:]
        assert (
            society_dialogue(q, a, names[:2], 2, random.Random(0), slip_rate=1.0).slipped is None
        )  # no majority
    with pytest.raises(ValueError, match="at least two personas"):
        society_dialogue("q", 1, names[:1], 1, random.Random(0))


@pytest.mark.parametrize("rounds,train_aggregator", [(1, True), (2, True), (2, False)])
def test_society_sft_samples_are_the_dialogue_in_the_prompts_of_a_run(tiny_llm, rounds, train_aggregator):
    tok = tiny_llm.tokenizer
    r = SocietyRecipe(
        n_personas=3, rounds=rounds, sft_batch=4, sft_slip_rate=1.0, train_aggregator=train_aggregator
    )
    out = r.sft_samples(0, 9, tok)["society"]
    again = r.sft_samples(0, 9, tok)["society"]
    assert [(s.prompt_ids, s.completion_ids) for s in out] == [
        (s.prompt_ids, s.completion_ids) for s in again
    ]
    # every question has a slip (rate 1.0): its round-0 message gives no sample
    per_q = 3 * rounds - 1 + (1 if train_aggregator else 0)
    assert len(out) == 4 * per_q
    questions = {s.group_key[2:] for s in out}
    assert len(questions) == 4 and not questions & r._eval_set
    for s in out:
        assert s.policy == "society" and s.old_logprobs is None and all(s.completion_mask)
        assert s.completion_ids[-1] == tok.eos_token_id
        text, prompt = tok.decode(s.completion_ids[:-1]), tok.decode(s.prompt_ids)
        q = s.group_key[2:]
        assert q in prompt and extract_final_answer(text) is not None
        # each caller got its own scripted message: only the aggregator's says who reached the answer
        assert ("reached" in text) == (s.meta["role"] == "aggregator"), (s.meta["sender"], text)
        if s.meta["role"] == "aggregator":
            assert "What the members of the group said" in prompt and prompt.count(' said: "') == 3
        elif s.meta["round"] == 0:
            assert f"Your name is {s.meta['sender']};" in prompt and "### Message from" not in prompt
        else:  # round r reads round r-1: the slip appears in the round-1 prompts
            assert prompt.count("### Message from") == 3 and f"Your name is {s.meta['sender']};" in prompt
    # the prompts are the ones a real run renders: replay one question's scripted messages through run_episodes
    # (without a slip every message of the discussion is a sample, so the replay reproduces it whole)
    r = SocietyRecipe(n_personas=3, rounds=rounds, sft_batch=1, sft_slip_rate=0.0)
    mine = r.sft_samples(0, 9, tok)["society"]
    q = mine[0].group_key[2:]
    by_prompt = {tok.decode(s.prompt_ids): tok.decode(s.completion_ids[:-1]) for s in mine}
    seen = []

    def replay(msgs):
        from societas.agents.llm.base import encode_with_tokenizer

        p = tok.decode(encode_with_tokenizer(tok, [msgs])[0])
        seen.append(p)
        return by_prompt.get(p, "Final answer: 0")

    res = r.run_episodes(
        {"society": FunctionLLM(replay)}, [Episode({"question": q, "answer": 0}, 1, "g", 0)], train=False
    )
    assert len(seen) == 3 * rounds + 1
    assert len(mine) == len(seen) and set(seen) == set(by_prompt)  # every prompt of the run is a sample's
    # the run's aggregator answered with the scripted aggregator message, and without a slip
    # every persona ends on that same answer
    agg_text = next(tok.decode(s.completion_ids[:-1]) for s in mine if s.meta["role"] == "aggregator")
    answer = extract_final_answer(agg_text)
    assert answer is not None and res[0].record["aggregator_text"] == agg_text
    assert res[0].record["aggregated_answer"] == answer
    assert res[0].record["persona_answers"] == dict.fromkeys(r.persona_names, answer)


def test_society_episodes_with_a_tiny_model(tiny_llm):
    r = SocietyRecipe(
        n_personas=2,
        rounds=2,
        questions_per_step=1,
        group_size=2,
        persona_tokens=6,
        aggregator_tokens=6,
        eval_questions=2,
    )
    eps = r.train_episodes(0, 4)
    res = r.run_episodes({"society": _policy(tiny_llm), FROZEN: tiny_llm}, eps, train=True)
    assert len(res) == 2
    for e, x in zip(eps, res):
        assert len(x.samples) == 2 * 2 + 1  # two personas x two rounds, and the aggregator
        assert {s.meta["role"] for s in x.samples} == {"persona", "aggregator"}
        assert all(s.policy == "society" for s in x.samples) and set(x.groups) == {e.group}
        assert set(x.rewards) <= {0.0, 1.0} and x.rewards == [x.metrics["reward"]] * 5
    r2 = SocietyRecipe(
        n_personas=2,
        rounds=1,
        train_aggregator=False,
        questions_per_step=1,
        group_size=2,
        persona_tokens=6,
        aggregator_tokens=6,
    )
    res2 = r2.run_episodes(
        {"society": _policy(tiny_llm), FROZEN: tiny_llm}, r2.train_episodes(0, 4), train=True
    )
    assert all({s.meta["role"] for s in x.samples} == {"persona"} for x in res2)


# -- training end to end ------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["remul", "society"])
def test_train_one_step(which, tiny_dir, tmp_path):
    if which == "remul":
        rec = RemulRecipe(
            questions_per_step=1,
            group_size=2,
            speaker_tokens=8,
            listener_tokens=4,
            eval_questions=2,
            sft_batch=2,
        )
        cfg = TrainConfig(model=tiny_dir, steps=1, sft_steps=1, eval_every=1, threads=1)
    else:
        rec = SocietyRecipe(
            n_personas=2,
            questions_per_step=1,
            group_size=2,
            persona_tokens=6,
            aggregator_tokens=6,
            eval_questions=2,
            sft_batch=2,
        )
        cfg = TrainConfig(model=tiny_dir, steps=1, sft_steps=1, eval_every=1, threads=1)
    out = tmp_path / which
    res = train(rec, cfg, out=out)
    for f in ("metrics.jsonl", "summary.md", "reward.png", "config.yaml", "rollouts.jsonl"):
        assert (out / f).exists(), f
    rows = [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert evals and all("reward" in r for r in evals)
    policy = "speaker" if which == "remul" else "society"
    assert any(r["kind"] == "sft" and f"{policy}/sft_loss" in r for r in rows)
    if which == "remul":
        assert all("early_answering_aoc" in r for r in evals)
    # the result reports the last held-out evaluation written to metrics.jsonl
    assert res.last_eval["reward"] == pytest.approx(evals[-1]["reward"])
    assert res.first_eval["reward"] == pytest.approx(evals[0]["reward"])
    assert 0.0 <= res.last_eval["reward"] <= 1.0


@pytest.mark.parametrize(
    "recipe",
    [RemulRecipe(questions_per_step=1, group_size=2), SocietyRecipe(questions_per_step=1, group_size=2)],
    ids=["remul", "society"],
)
def test_training_needs_a_policy_with_a_tokenizer(recipe):
    remote = FunctionLLM(lambda prompt: "Final answer: 4", name="remote")  # no tokenizer, no token ids
    llms = dict.fromkeys((*recipe.policies, FROZEN), remote)
    with pytest.raises(
        ValueError, match=f"training the {recipe.name} policies needs a local model with a tokenizer"
    ):
        recipe.run_episodes(llms, recipe.train_episodes(0, 0), train=True)
