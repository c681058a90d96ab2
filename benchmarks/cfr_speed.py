"""CFR speed and exactness of the tensor-tree engine against OpenSpiel, in one run.

1. CFR iterations/s on Leduc poker and 3-player Leduc poker: ours
   (``societas.marl.games.CFRSolver("cfr")``, alternating updates, ``--device``) against
   OpenSpiel's C++ ``pyspiel.CFRSolver`` for the same number of iterations and
   OpenSpiel's python ``open_spiel.python.algorithms.cfr.CFRSolver`` (the same
   number on 2-player Leduc; far fewer on 3-player Leduc, where one python
   iteration takes about half a minute — the table says how many). The
   average policies must agree: the table prints the largest difference of
   any action probability and the difference of the NashConvs (ours from
   :func:`societas.marl.games.evaluate`; the C++ solver's from ``pyspiel.nash_conv``,
   run once since it takes about a minute on 3-player Leduc).
2. Exact evaluation time: our ``evaluate(tree, policy)`` against
   ``pyspiel.nash_conv(game, policy)`` on the same policy (the C++ solver's
   average policy), with both values and their difference.
3. Batching: 64 DCFR variants (64 values of alpha) in one
   ``CFRSolver(tree, DCFR(alpha=[...]), batch=64)`` against 64 sequential
   ``B=1`` runs, on Leduc poker, for a few iterations (``--batch-iterations``).

Fast measurements (small games, batching, evaluation) take the best of a few
runs (``--repeats``), since shared machines are noisy. Tree build/load times are reported separately from solving (3-player Leduc
takes minutes to build the first time and is read from the disk cache
afterwards; ``--no-cache`` forces a build).

Run: ``python benchmarks/cfr_speed.py`` (``--quick`` for a smoke run: Leduc
only, a few iterations). Prints tables and ends with one JSON line of the
headline figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyspiel
import torch
from open_spiel.python.algorithms import cfr as os_cfr

from societas.marl.games import CFRSolver, evaluate, load_game
from societas.marl.games.algorithms import DCFR
from societas.marl.games.tree import cache_path, resolve_device

LARGE = 1_000_000  # histories above which a game counts as large (fewer iterations)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpp_table_to_tensor(tree, table: dict) -> torch.Tensor:
    """``[1, I, A]`` from an OpenSpiel policy table {info state: [(action, prob)]}."""
    out = np.zeros((tree.num_infosets, tree.max_actions))
    acts = tree.arrays.actions
    nact = tree.arrays.num_actions
    for i, key in enumerate(tree.infoset_keys):
        probs = dict(table[key])
        n = int(nact[i])
        out[i, :n] = [probs.get(int(a), 0.0) for a in acts[i, :n]]
    return torch.as_tensor(out, dtype=tree.dtype, device=tree.device).unsqueeze(0)


def tensor_to_cpp_table(tree, policy: torch.Tensor) -> dict:
    pol = policy.detach().reshape(tree.num_infosets, tree.max_actions).cpu().numpy()
    acts = tree.arrays.actions
    nact = tree.arrays.num_actions
    return {
        key: [(int(acts[i, k]), float(pol[i, k])) for k in range(int(nact[i]))]
        for i, key in enumerate(tree.infoset_keys)
    }


def bench_game(
    game_name: str,
    iterations: int,
    large_iterations: int,
    py_iterations: int,
    py_large_iterations: int,
    device: torch.device,
    cache: bool,
    eval_repeats: int,
    repeats: int,
) -> dict:
    row: dict = {"game": game_name}
    # ---- build / load
    cached = cache_path(game_name).exists() and cache
    t0 = time.perf_counter()
    tree = load_game(game_name, device, cache=cache)
    _sync(device)
    row["tree_load_s"] = time.perf_counter() - t0
    row["tree_from_cache"] = cached
    row["histories"], row["infosets"], row["players"] = tree.num_nodes, tree.num_infosets, tree.num_players
    large = tree.num_nodes > LARGE
    n = large_iterations if large else iterations
    n_py = min(n, py_large_iterations if large else py_iterations)
    row["iterations"], row["python_iterations"] = n, n_py
    game = pyspiel.load_game(game_name)

    # ---- ours
    t0 = time.perf_counter()
    ours = CFRSolver(tree, "cfr", alternating=True)
    _sync(device)
    row["ours_init_s"] = time.perf_counter() - t0
    ours.step()  # warm-up iteration (allocations, kernels)
    _sync(device)
    reps = 1 if large else repeats  # best of `reps` fresh runs (shared machines are noisy)
    row["timing_repeats"] = reps
    times = []
    for _ in range(reps):
        ours = CFRSolver(tree, "cfr", alternating=True)
        t0 = time.perf_counter()
        for _ in range(n):
            ours.step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    row["ours_s"] = min(times)
    ours_avg = ours.average_policy()
    ev_ours = evaluate(tree, ours_avg)
    row["ours_nash_conv"] = float(ev_ours.nash_conv[0])

    # ---- OpenSpiel C++
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cpp = pyspiel.CFRSolver(game)
        row["cpp_init_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n):
            cpp.evaluate_and_update_policy()
        times.append(time.perf_counter() - t0)
    row["cpp_s"] = min(times)
    cpp_tab = cpp.tabular_average_policy()
    cpp_pol = cpp_table_to_tensor(tree, cpp_tab.policy_table())
    row["cpp_policy_max_diff"] = float((cpp_pol - ours_avg).abs().max())

    # ---- exact evaluation of the same policy (the C++ solver's average)
    t_os = []
    for _ in range(1 if large else eval_repeats):
        t0 = time.perf_counter()
        nc_os = pyspiel.nash_conv(game, cpp.average_policy())
        t_os.append(time.perf_counter() - t0)
    evaluate(tree, cpp_pol)  # warm-up
    t_ours = []
    for _ in range(5):
        _sync(device)
        t0 = time.perf_counter()
        nc_ours = float(evaluate(tree, cpp_pol).nash_conv[0])
        _sync(device)
        t_ours.append(time.perf_counter() - t0)
    row["cpp_nash_conv"] = nc_os
    row["eval_ours_s"] = min(t_ours)  # best of the runs, like every timing here
    row["eval_openspiel_s"] = min(t_os)
    row["eval_ours_nash_conv"] = nc_ours
    row["eval_diff"] = abs(nc_ours - nc_os)
    row["nash_conv_diff_cpp_vs_ours"] = abs(nc_os - row["ours_nash_conv"])
    del cpp, cpp_tab
    gc.collect()

    # ---- OpenSpiel python (fewer iterations on large games)
    t0 = time.perf_counter()
    py = os_cfr.CFRSolver(game)
    row["python_init_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n_py):
        py.evaluate_and_update_policy()
    row["python_s"] = time.perf_counter() - t0
    py_pol = tree.from_openspiel_policy(py.average_policy())
    if n_py == n:
        ref = ours_avg
        row["python_nash_conv_ours_at_same_iterations"] = row["ours_nash_conv"]
    else:
        short = CFRSolver(tree, "cfr", alternating=True)
        for _ in range(n_py):
            short.step()
        ref = short.average_policy()
        row["python_nash_conv_ours_at_same_iterations"] = float(evaluate(tree, ref).nash_conv[0])
    row["python_policy_max_diff"] = float((py_pol - ref).abs().max())
    row["python_nash_conv"] = float(evaluate(tree, py_pol).nash_conv[0])
    row["python_nash_conv_diff"] = abs(
        row["python_nash_conv"] - row["python_nash_conv_ours_at_same_iterations"]
    )
    del py
    gc.collect()

    row["ours_it_s"] = n / row["ours_s"]
    row["cpp_it_s"] = n / row["cpp_s"]
    row["python_it_s"] = n_py / row["python_s"]
    return row


def bench_batched(
    game_name: str, batch: int, iterations: int, device: torch.device, repeats: int = 1
) -> dict:
    tree = load_game(game_name, device)
    alphas = [float(a) for a in np.linspace(0.5, 3.0, batch)]
    # warm-up, so neither side pays first-call costs
    w = CFRSolver(tree, DCFR(alpha=alphas[:1]), batch=1)
    w.step()
    _sync(device)
    t_batched, t_seq = float("inf"), float("inf")
    for _ in range(repeats):  # best of `repeats` (shared machines are noisy)
        t0 = time.perf_counter()
        solver = CFRSolver(tree, DCFR(alpha=alphas), batch=batch)
        for _ in range(iterations):
            solver.step()
        _sync(device)
        t_batched = min(t_batched, time.perf_counter() - t0)
        t0 = time.perf_counter()
        seq_pols = []
        for a in alphas:
            s = CFRSolver(tree, DCFR(alpha=[a]), batch=1)
            for _ in range(iterations):
                s.step()
            seq_pols.append(s.average_policy())
        _sync(device)
        t_seq = min(t_seq, time.perf_counter() - t0)
    e_batched = evaluate(tree, solver.average_policy()).exploitability.cpu()
    e_seq = evaluate(tree, torch.cat(seq_pols, 0)).exploitability.cpu()
    return {
        "game": game_name,
        "variants": batch,
        "iterations": iterations,
        "batched_s": t_batched,
        "sequential_s": t_seq,
        "speedup": t_seq / t_batched,
        "max_exploitability_diff": float((e_batched - e_seq).abs().max()),
        "best_alpha": alphas[int(e_batched.argmin())],
        "best_exploitability": float(e_batched.min()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--iterations", type=int, default=None, help="CFR iterations on small games (default 100; --quick 10)"
    )
    ap.add_argument(
        "--large-iterations",
        type=int,
        default=None,
        help=f"CFR iterations on games with more than {LARGE:,} histories (default 20)",
    )
    ap.add_argument(
        "--python-large-iterations",
        type=int,
        default=None,
        help="OpenSpiel python CFR iterations on large games (default 2)",
    )
    ap.add_argument(
        "--games",
        nargs="+",
        default=None,
        help="game strings (default: leduc_poker 'leduc_poker(players=3)'; --quick: leduc_poker)",
    )
    ap.add_argument("--batch", type=int, default=64, help="variants in the batching comparison")
    ap.add_argument(
        "--batch-iterations",
        type=int,
        default=None,
        help="iterations in the batching comparison (default 20; --quick 5)",
    )
    ap.add_argument("--device", default="cpu", help="device of our solver (cpu, cuda, auto)")
    ap.add_argument(
        "--no-cache", action="store_true", help="build the trees instead of reading the disk cache"
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed runs of the fast measurements, best taken (default 3; --quick 1; 1 on large games)",
    )
    ap.add_argument("--quick", action="store_true", help="small settings for a smoke test")
    args = ap.parse_args()
    q = args.quick
    iterations = args.iterations or (10 if q else 100)
    large_iterations = args.large_iterations or (2 if q else 20)
    py_large = args.python_large_iterations or (1 if q else 2)
    batch_iterations = args.batch_iterations or (5 if q else 20)
    games = args.games or (["leduc_poker"] if q else ["leduc_poker", "leduc_poker(players=3)"])
    try:
        device = resolve_device(args.device)
    except (ValueError, RuntimeError) as exc:
        print(f"error: --device {args.device!r}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"# machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"threads {torch.get_num_threads()}, device {device}, OpenSpiel "
        f"{getattr(pyspiel, '__version__', '?')}"
    )

    rows = []
    for g in games:
        print(f"# {g} …", file=sys.stderr, flush=True)
        rows.append(
            bench_game(
                g,
                iterations,
                large_iterations,
                iterations,
                py_large,
                device,
                cache=not args.no_cache,
                eval_repeats=1 if q else 3,
                repeats=args.repeats or (1 if q else 3),
            )
        )

    print(
        "\n| game | histories | infosets | tree load s | from cache | C++ solver init s | python solver init s |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['game']} | {r['histories']:,} | {r['infosets']:,} | {r['tree_load_s']:.2f} | "
            f"{'yes' if r['tree_from_cache'] else 'no (built)'} | {r['cpp_init_s']:.2f} | {r['python_init_s']:.2f} |"
        )

    print(
        "\n| game | solver | iterations | it/s | ours speed-up | NashConv | |Δ NashConv| vs ours | max |Δ policy| vs ours |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['game']} | ours CFR ({device}) | {r['iterations']} | {r['ours_it_s']:.2f} | 1x | "
            f"{r['ours_nash_conv']:.10f} | — | — |"
        )
        print(
            f"| {r['game']} | OpenSpiel C++ CFRSolver | {r['iterations']} | {r['cpp_it_s']:.2f} | "
            f"{r['ours_it_s'] / r['cpp_it_s']:.1f}x | {r['cpp_nash_conv']:.10f} | "
            f"{r['nash_conv_diff_cpp_vs_ours']:.1e} | {r['cpp_policy_max_diff']:.1e} |"
        )
        note = "" if r["python_iterations"] == r["iterations"] else " (fewer: slow)"
        print(
            f"| {r['game']} | OpenSpiel python CFRSolver | {r['python_iterations']}{note} | "
            f"{r['python_it_s']:.3f} | {r['ours_it_s'] / r['python_it_s']:.0f}x | "
            f"{r['python_nash_conv']:.10f} | {r['python_nash_conv_diff']:.1e} | {r['python_policy_max_diff']:.1e} |"
        )
    for r in rows:
        if r["python_iterations"] != r["iterations"]:
            print(
                f"  note: python CFR ran {r['python_iterations']} iterations on {r['game']} "
                f"(vs {r['iterations']}); its row is compared with ours after the same "
                f"{r['python_iterations']} (NashConv {r['python_nash_conv_ours_at_same_iterations']:.10f})."
            )

    print(
        "\n| game | ours evaluate s | pyspiel.nash_conv s | speed-up | ours NashConv | OpenSpiel NashConv | |diff| |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['game']} | {r['eval_ours_s']:.4f} | {r['eval_openspiel_s']:.3f} | "
            f"{r['eval_openspiel_s'] / r['eval_ours_s']:.0f}x | {r['eval_ours_nash_conv']:.12f} | "
            f"{r['cpp_nash_conv']:.12f} | {r['eval_diff']:.1e} |"
        )
    print("  (same policy: the C++ solver's average after the iterations above)")

    b = bench_batched(
        "leduc_poker", args.batch, batch_iterations, device, repeats=args.repeats or (1 if q else 3)
    )
    print(
        f"\n| leduc_poker, DCFR x {b['variants']} alphas, {b['iterations']} iterations | seconds | "
        f"variant-iterations/s |"
    )
    print("|---|---|---|")
    print(
        f"| one batched solver (B={b['variants']}) | {b['batched_s']:.2f} | "
        f"{b['variants'] * b['iterations'] / b['batched_s']:.0f} |"
    )
    print(
        f"| {b['variants']} sequential solvers (B=1) | {b['sequential_s']:.2f} | "
        f"{b['variants'] * b['iterations'] / b['sequential_s']:.0f} |"
    )
    print(
        f"  speed-up {b['speedup']:.1f}x; max |Δ exploitability| batched vs sequential "
        f"{b['max_exploitability_diff']:.1e}; best alpha {b['best_alpha']:.2f} "
        f"(exploitability {b['best_exploitability']:.4e})"
    )

    head: dict = {"benchmark": "cfr_speed", "device": str(device), "quick": q}
    for r in rows:
        k = (
            "leduc3"
            if r["players"] == 3 and "leduc" in r["game"]
            else ("leduc" if r["game"] == "leduc_poker" else r["game"])
        )
        head[f"{k}_iterations"] = r["iterations"]
        head[f"{k}_ours_it_s"] = round(r["ours_it_s"], 3)
        head[f"{k}_cpp_it_s"] = round(r["cpp_it_s"], 3)
        head[f"{k}_python_it_s"] = round(r["python_it_s"], 4)
        head[f"{k}_speedup_vs_cpp"] = round(r["ours_it_s"] / r["cpp_it_s"], 2)
        head[f"{k}_speedup_vs_python"] = round(r["ours_it_s"] / r["python_it_s"], 1)
        head[f"{k}_nash_conv"] = r["ours_nash_conv"]
        head[f"{k}_nash_conv_diff_vs_cpp"] = r["nash_conv_diff_cpp_vs_ours"]
        head[f"{k}_policy_diff_vs_cpp"] = r["cpp_policy_max_diff"]
        head[f"{k}_policy_diff_vs_python"] = r["python_policy_max_diff"]
        head[f"{k}_eval_speedup"] = round(r["eval_openspiel_s"] / r["eval_ours_s"], 1)
        head[f"{k}_eval_diff"] = r["eval_diff"]
        head[f"{k}_tree_load_s"] = round(r["tree_load_s"], 2)
    head["batched_variants"] = b["variants"]
    head["batched_speedup"] = round(b["speedup"], 2)
    head["batched_max_diff"] = b["max_exploitability_diff"]
    print(json.dumps(head))


if __name__ == "__main__":
    main()
