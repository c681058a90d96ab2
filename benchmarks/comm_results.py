"""Communication modules on MPE speaker-listener: MAPPO + each module, several seeds.

Trains MAPPO (:mod:`societas.marl.comm.mappo`) with every communication module of
:mod:`societas.marl.comm.modules` (``none``, ``commnet``, ``tarmac``, ``ic3net``,
``dial``, ``gat``, ``commformer``) on the batched torch speaker-listener env
for the same budget of env steps and the same seeds, and writes to ``--out``:

* ``table.md`` / ``table.json`` — per module, over seeds (mean ± std): the
  training return at the end (mean episode return of the last 5 updates,
  stochastic policy), the greedy evaluation return (``--eval-episodes``
  episodes per seed, comm modules in execution mode), the area under the
  learning curve (mean training return over all updates: learning speed),
  messages per step and wall time per run; the difference to ``none`` (the
  baseline of this run) and the fraction of seeds in which the module beats
  it;
* ``curves.png`` — mean ± std learning curves, with two scripted reference
  lines measured in the same run: a listener that is *told* the goal and
  steers to it, and one that steers to the centroid of the three landmarks
  (the local optimum that ignores communication).

Each run writes its own run directory under ``--runs-dir`` (config,
metrics.jsonl, model.pt, ...); a finished run found there is reused, so an
interrupted benchmark resumes where it stopped (``--fresh`` retrains).
``--jobs`` runs several trainings in parallel processes (one torch thread each).

Run: ``python benchmarks/comm_results.py`` (defaults: 800k steps, 3 seeds,
512 envs, minibatches of 800 samples). Prints the table and ends with one JSON line of headline figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

ALL_MODULES = ["none", "commnet", "tarmac", "ic3net", "dial", "gat", "commformer"]
# Published references for MPE speaker-listener (see the note).
PUBLISHED_NOTE = (
    "the MAPPO paper (arXiv 2103.01955) and EPyMARL (arXiv 2006.07869) report MPE "
    "speaker-listener episode returns for MAPPO; their tables could not be checked offline when "
    "this was written, so no figure is quoted. The scripted listeners above bound the task: "
    "steering to the centre of the landmarks (what a listener that ignores the speaker can do) "
    "and steering to the goal (what perfect communication allows)"
)


def _run_one(args: tuple) -> dict:
    """Train one (module, seed) run in this process; returns its summary."""
    module, seed, steps, num_envs, runs_dir, eval_episodes, fresh, algo, overrides = args
    torch.set_num_threads(1)
    from societas.marl.comm.mappo import MAPPOConfig
    from societas.marl.comm.train import train_comm

    out = Path(runs_dir) / f"{algo}_{module}_s{seed}"
    done_file = out / "result.json"
    if done_file.exists() and not fresh:
        prev = json.loads(done_file.read_text())
        if (
            prev.get("steps") == steps
            and prev.get("num_envs") == num_envs
            and prev.get("overrides") == overrides
        ):
            prev["reused"] = True
            return prev
    cfg = MAPPOConfig(
        env="speaker_listener",
        algo=algo,
        comm=module,
        total_steps=steps,
        num_envs=num_envs,
        seed=seed,
        device="cpu",
        **overrides,
    )
    res = train_comm(cfg, out, progress=False, eval_episodes=eval_episodes)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    curve = [(r["env_steps"], r["mean_episode_return"]) for r in rows if r["mean_episode_return"] is not None]
    summary = {
        "module": module,
        "seed": seed,
        "steps": steps,
        "num_envs": num_envs,
        "overrides": overrides,
        "final_return": res.final_return,
        "eval_mean": res.eval_return_mean,
        "eval_std": res.eval_return_std,
        "auc": sum(y for _, y in curve) / max(len(curve), 1),
        "messages_per_step": res.messages_per_step,
        "wall_s": res.wall_s,
        "env_steps": res.env_steps,
        "curve": curve,
        "run_dir": str(out),
    }
    tmp = done_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary))
    os.replace(tmp, done_file)
    return summary


@torch.no_grad()
def scripted_references(episodes: int = 4096, seed: int = 7) -> dict[str, float]:
    """Mean returns of two scripted listeners (the speaker says the goal's word):
    one steering to the goal landmark (it is told the goal), one to the centroid
    of the landmarks (ignoring communication)."""
    from societas.marl.comm.envs import make_env
    from societas.marl.comm.envs.speaker_listener import LANDMARK_COLOURS

    colours = torch.tensor(LANDMARK_COLOURS)
    out = {}
    for mode in ("told the goal", "centroid"):
        env = make_env("speaker_listener", num_envs=episodes, device="cpu", seed=seed)
        obs = env.reset(seed=seed)
        total = torch.zeros(episodes)
        for _ in range(env.max_cycles):
            sp, li = obs["speaker_0"], obs["listener_0"]
            goal = (sp.unsqueeze(1) - colours.unsqueeze(0)).abs().sum(-1).argmin(-1)
            vel, rel = li[:, :2], li[:, 2:8].view(-1, 3, 2)
            target = rel[torch.arange(episodes), goal] if mode == "told the goal" else rel.mean(1)
            d = target - 0.5 * vel  # steer with some braking
            ax = torch.where(d[:, 0] > 0, 2, 1)
            ay = torch.where(d[:, 1] > 0, 4, 3)
            a = torch.where(d[:, 0].abs() > d[:, 1].abs(), ax, ay)
            a = torch.where(d.norm(dim=-1) < 0.05, torch.zeros_like(a), a)
            obs, r, _, _, _ = env.step({"speaker_0": goal, "listener_0": a})
            total += r["listener_0"]
        out[f"scripted: {mode}"] = float(total.mean())
    return out


def _ms(xs: list[float]) -> tuple[float, float]:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.pstdev(xs) if len(xs) > 1 else 0.0)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=800_000, help="env steps per run")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (0 .. seeds-1)")
    p.add_argument("--modules", nargs="+", default=ALL_MODULES, choices=ALL_MODULES)
    p.add_argument("--num-envs", type=int, default=512)
    p.add_argument("--algo", default="mappo", choices=["mappo", "ippo"])
    p.add_argument("--eval-episodes", type=int, default=500)
    p.add_argument("--out", default="benchmarks/results/comm")
    p.add_argument("--runs-dir", default="runs/comm_results")
    p.add_argument("--jobs", type=int, default=1, help="parallel training processes")
    p.add_argument("--fresh", action="store_true", help="retrain runs already in --runs-dir")
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=JSON",
        help="MAPPOConfig overrides, e.g. num_minibatches=16 lr=0.001",
    )
    a = p.parse_args(argv)

    overrides = {}
    for kv in a.set:
        k, _, v = kv.partition("=")
        try:
            overrides[k] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k] = v
    # minibatches of about 800 samples (num_envs x 25 steps / num_minibatches), as the default config has
    overrides.setdefault("num_minibatches", max(1, a.num_envs * 25 // 800))
    if "none" not in a.modules:
        a.modules = ["none", *a.modules]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [
        (m, s, a.steps, a.num_envs, a.runs_dir, a.eval_episodes, a.fresh, a.algo, overrides)
        for s in range(a.seeds)
        for m in a.modules
    ]
    t0 = time.perf_counter()
    results: list[dict] = []
    if a.jobs > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(a.jobs) as pool:
            for r in pool.imap_unordered(_run_one, jobs):
                results.append(r)
                print(
                    f"  {r['module']:>10} seed {r['seed']}: return {r['final_return']:.2f}, "
                    f"eval {r['eval_mean']:.2f}, {r['wall_s']:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    else:
        for j in jobs:
            r = _run_one(j)
            results.append(r)
            print(
                f"  {r['module']:>10} seed {r['seed']}: return {r['final_return']:.2f}, "
                f"eval {r['eval_mean']:.2f}, {r['wall_s']:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    total_wall = time.perf_counter() - t0
    refs = scripted_references()

    by_mod = {m: sorted((r for r in results if r["module"] == m), key=lambda r: r["seed"]) for m in a.modules}
    none_final = {r["seed"]: r["final_return"] for r in by_mod["none"]}
    none_eval = {r["seed"]: r["eval_mean"] for r in by_mod["none"]}
    rows = []
    for m in a.modules:
        rs = by_mod[m]
        fm, fs = _ms([r["final_return"] for r in rs])
        em, es = _ms([r["eval_mean"] for r in rs])
        am, as_ = _ms([r["auc"] for r in rs])
        mm, _ = _ms([r["messages_per_step"] for r in rs])
        wm, _ = _ms([r["wall_s"] for r in rs])
        wins = sum(1 for r in rs if r["eval_mean"] > none_eval.get(r["seed"], float("inf")))
        rows.append(
            {
                "module": m,
                "seeds": len(rs),
                "final_return_mean": fm,
                "final_return_std": fs,
                "eval_return_mean": em,
                "eval_return_std": es,
                "auc_mean": am,
                "auc_std": as_,
                "messages_per_step": mm,
                "wall_s_per_run": wm,
                "eval_minus_none": em - _ms(list(none_eval.values()))[0],
                "final_minus_none": fm - _ms(list(none_final.values()))[0],
                "seeds_beating_none_eval": wins if m != "none" else None,
                "per_seed": [
                    {
                        k: r[k]
                        for k in (
                            "seed",
                            "final_return",
                            "eval_mean",
                            "eval_std",
                            "auc",
                            "messages_per_step",
                            "wall_s",
                        )
                    }
                    for r in rs
                ],
            }
        )

    from societas.marl.comm.plots import plot_curves

    plot_curves(
        {m: [r["curve"] for r in by_mod[m]] for m in a.modules},
        out / "curves.png",
        title=f"{a.algo.upper()} on speaker-listener: {a.seeds} seeds, {a.num_envs} envs (mean ± std)",
        reference=refs,
        # the legend gives the table's column, so the picture and the table agree
        final={m: _ms([r["final_return"] for r in by_mod[m]]) for m in a.modules if by_mod[m]},
        final_name="final training return (table)",
    )

    cfg_note = {
        "steps": a.steps,
        "seeds": a.seeds,
        "num_envs": a.num_envs,
        "algo": a.algo,
        "eval_episodes": a.eval_episodes,
        "overrides": overrides,
    }
    lines = [
        f"# Communication modules on speaker-listener ({a.algo.upper()})",
        "",
        (
            f"{a.steps:,} env steps per run, {a.num_envs} envs x 25-step rollouts, seeds 0..{a.seeds - 1}, "
            f"CPU ({platform.processor() or platform.machine()}, torch {torch.__version__}, 1 thread per run, "
            f"{a.jobs} parallel job(s)); config overrides: {json.dumps(overrides) if overrides else 'none'}."
        ),
        (
            "Returns are mean episode returns (sum of 25 rewards, − squared listener-goal distance); "
            "mean ± std over seeds."
        ),
        "",
        (
            "| module | train return (end) | greedy eval return | AUC (mean over training) | Δ eval vs none "
            "| seeds > none | messages/step | wall s/run |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        beats = "—" if r["module"] == "none" else f"{r['seeds_beating_none_eval']}/{r['seeds']}"
        delta = "—" if r["module"] == "none" else f"{r['eval_minus_none']:+.2f}"
        lines.append(
            f"| {r['module']} | {r['final_return_mean']:.2f} ± {r['final_return_std']:.2f} "
            f"| {r['eval_return_mean']:.2f} ± {r['eval_return_std']:.2f} "
            f"| {r['auc_mean']:.2f} ± {r['auc_std']:.2f} | {delta} | {beats} "
            f"| {r['messages_per_step']:.2f} | {r['wall_s_per_run']:.0f} |"
        )
    reused = sum(1 for r in results if r.get("reused"))
    wall_line = f"Total wall time {total_wall / 60:.1f} min. Run directories: `{a.runs_dir}`."
    if reused:
        # A reused run was trained earlier: its wall time is in the table, not in this total.
        wall_line += (
            f" {reused} of {len(results)} runs were reused from there (finished earlier, not retrained);"
            " their wall times per run are the ones recorded when they were trained."
        )
    lines += [
        "",
        "Scripted references (same env, this run): "
        + "; ".join(f"{k} {v:.2f}" for k, v in refs.items())
        + ".",
        "",
        f"Published: {PUBLISHED_NOTE}.",
        "",
        wall_line,
        "",
    ]
    (out / "table.md").write_text("\n".join(lines))
    (out / "table.json").write_text(
        json.dumps(
            {
                "config": cfg_note,
                "rows": rows,
                "references": refs,
                "published": PUBLISHED_NOTE,
                "total_wall_s": total_wall,
                "reused_runs": reused,
            },
            indent=2,
        )
    )
    print("\n".join(lines))
    none_row = next(r for r in rows if r["module"] == "none")
    others = [r for r in rows if r["module"] != "none"]
    headline = {
        "benchmark": "comm_speaker_listener",
        "algo": a.algo,
        "steps": a.steps,
        "seeds": a.seeds,
        "none_eval": round(none_row["eval_return_mean"], 3),
        "eval": {r["module"]: round(r["eval_return_mean"], 3) for r in others},
        "all_beat_none": all(r["eval_return_mean"] > none_row["eval_return_mean"] for r in others),
        "best": max(others, key=lambda r: r["eval_return_mean"])["module"] if others else None,
    }
    print(json.dumps(headline))
    return headline


if __name__ == "__main__":
    main()
