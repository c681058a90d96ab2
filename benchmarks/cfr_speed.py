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

4. LiteEFG (PyPI ``liteefg``, a C++ computation-graph solver, arXiv
   2407.20351) side by side, both engines on one thread
   (``torch.set_num_threads(1)``, ``LiteEFG.set_threads(1)``), on the same
   OpenSpiel games (LiteEFG loads them through its ``OpenSpielEnv``):
   CFR iterations/s — LiteEFG's own CFR graph (``LiteEFG.baselines.CFR``) and
   training loop (``update_graph`` then ``update_strategy`` per iteration), which
   updates all players at once from the same profile, against ours with the same
   schedule (``alternating=False``; ours alternating is listed too); the current
   policies after the same iterations must agree. Then the exact evaluation time
   of the same policy (the C++ solver's average policy, as in 2): LiteEFG's
   ``env.exploitability`` against our ``evaluate``, whose NashConv must equal
   OpenSpiel's python ``exploitability.nash_conv`` to 1e-12 (checked on every
   game, LiteEFG or not; the run exits with status 1 otherwise).
   Skipped, with a note, when LiteEFG is not installed (``pip install liteefg``:
   an sdist, built with cmake and a C++17 compiler) or with ``--no-liteefg``.

Fast measurements (small games, batching, evaluation) take the best of a few
runs (``--repeats``), since shared machines are noisy. Tree build/load times are reported separately from solving (3-player Leduc
takes minutes to build the first time and is read from the disk cache
afterwards; ``--no-cache`` forces a build).

Run: ``python benchmarks/cfr_speed.py`` (``--quick`` for a smoke run: Leduc
only, a few iterations). Prints tables and ends with one JSON line of the
headline figures (``*_speedup_vs_liteefg``: LiteEFG's time over ours).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
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
from open_spiel.python.algorithms import exploitability as os_expl

from societas.marl.games import CFRSolver, evaluate, load_game
from societas.marl.games.algorithms import DCFR
from societas.marl.games.tree import cache_path, resolve_device

LARGE = 1_000_000  # histories above which a game counts as large (fewer iterations)
EXACT = 1e-12  # our NashConv against OpenSpiel's, and against LiteEFG's (converted)


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


def import_liteefg():
    """The ``LiteEFG`` module (PyPI ``liteefg``), or None with a note saying how to get it."""
    try:
        import LiteEFG
    except ImportError:
        print(
            "# LiteEFG is not installed: its rows are skipped. Install it with `pip install liteefg` "
            "(only an sdist on PyPI: pip builds it with cmake and a C++17 compiler; "
            "`pip install -e '.[dev]'` includes it).",
            file=sys.stderr,
        )
        return None
    return LiteEFG


def _liteefg_policy(leg_env, tree, node) -> torch.Tensor:
    """``[1, I, A]``: the values of a LiteEFG graph node (a behavioural policy) in our layout."""
    row = {key: i for i, key in enumerate(tree.infoset_keys)}
    out = np.zeros((tree.num_infosets, tree.max_actions))
    for p in range(tree.num_players):
        for key, probs in leg_env.get_value(p + 1, node):  # OpenSpiel information state strings
            out[row[key], : len(probs)] = probs
    return torch.as_tensor(out, dtype=tree.dtype).unsqueeze(0)


def bench_liteefg(
    leg, game_name: str, tree, iterations: int, repeats: int, eval_repeats: int, policy, nash_conv_ref
) -> dict:
    """LiteEFG against ours, one thread each: CFR iterations/s and exact evaluation of ``policy``.

    LiteEFG loads the OpenSpiel game itself (``OpenSpielEnv`` writes it once to
    ``~/game_instances/*.openspiel`` and reads that file afterwards), so both
    engines solve the same game: same histories, information states, legal
    actions (in OpenSpiel's order), chance probabilities and payoffs.
    """
    from LiteEFG.baselines.CFR import graph as LiteEFGCFR

    row: dict = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    leg.set_threads(1)
    game = pyspiel.load_game(game_name)
    try:
        t0 = time.perf_counter()
        env = leg.OpenSpielEnv(game, traverse_type="Enumerate")
        row["liteefg_load_s"] = time.perf_counter() - t0

        # ---- CFR. LiteEFG's CFR graph updates every player from the same profile
        # (env.update with upd_player=-1), i.e. simultaneous updates: ours runs the
        # same schedule (alternating=False) for the comparison. One LiteEFG iteration
        # is its training loop's (LiteEFG/baselines/utils.py: train): update_graph,
        # then update_strategy, which accumulates the average.
        warm = CFRSolver(tree, "cfr", alternating=False)
        warm.step()
        warm = CFRSolver(tree, "cfr", alternating=True)
        warm.step()
        del warm
        t_lite, t_sim, t_alt = [], [], []
        graph = None
        for r in range(repeats):  # interleaved, best of `repeats` (shared machines are noisy)
            if r:  # a fresh environment: it keeps the running averages per strategy node
                del env, graph
                gc.collect()
                env = leg.OpenSpielEnv(game, traverse_type="Enumerate")
            with contextlib.redirect_stdout(io.StringIO()):  # the graph prints a banner
                graph = LiteEFGCFR()
            env.set_graph(graph)
            t0 = time.perf_counter()
            for _ in range(iterations):
                graph.update_graph(env)
                env.update_strategy(graph.current_strategy())
            t_lite.append(time.perf_counter() - t0)
            for alternating, times in ((False, t_sim), (True, t_alt)):
                ours = CFRSolver(tree, "cfr", alternating=alternating)
                t0 = time.perf_counter()
                for _ in range(iterations):
                    ours.step()
                times.append(time.perf_counter() - t0)
                if not alternating:
                    sim = ours
        row["liteefg_cfr_s"], row["ours_sim_1t_s"], row["ours_alt_1t_s"] = min(t_lite), min(t_sim), min(t_alt)
        # Same algorithm: the current policies after the same iterations agree. (LiteEFG
        # plays uniform where the positive regrets sum to less than its EPS = 1e-9, we
        # where they sum to 0; its "avg-iterate" averages the policies of iterations
        # 2..T+1 — update_strategy runs after the update — ours those of 1..T.)
        lite_cur = _liteefg_policy(env, tree, graph.current_strategy())
        row["liteefg_cfr_policy_diff"] = float((lite_cur - sim.current_policy().cpu()).abs().max())
        del env, graph, sim
        gc.collect()

        # ---- exact evaluation of the same policy. LiteEFG's env.exploitability returns,
        # per player p, max_b u_p(b, pi_-p) - u_p(pi) (SequenceForm::GetExploitability:
        # best-response value minus on-policy value): their SUM is NashConv, and
        # NashConv / N is the exploitability of OpenSpiel (two players) and ours.
        env = leg.OpenSpielEnv(game, traverse_type="Enumerate")

        class Fixed(leg.Graph):  # a graph holding one policy, set from outside
            def __init__(self):
                super().__init__()
                with leg.backward(is_static=True):
                    self.strategy = leg.const(self.action_set_size, 1.0 / self.action_set_size)

        fixed = Fixed()
        env.set_graph(fixed)
        pol = policy.detach().cpu()[0].numpy()
        row_of = {key: i for i, key in enumerate(tree.infoset_keys)}
        nact = tree.arrays.num_actions
        for p in range(tree.num_players):
            keys = [key for key, _ in env.get_value(p + 1, fixed.strategy)]  # LiteEFG's order
            env.set_value(p + 1, fixed.strategy, [pol[row_of[k], : nact[row_of[k]]].tolist() for k in keys])
        if float((_liteefg_policy(env, tree, fixed.strategy) - policy.cpu()).abs().max()) != 0.0:
            raise RuntimeError("the policy did not reach LiteEFG unchanged")
        env.exploitability(fixed.strategy)  # warm-up, as ours below
        t_lite, gains = [], None
        for _ in range(eval_repeats):
            t0 = time.perf_counter()
            gains = env.exploitability(fixed.strategy)
            t_lite.append(time.perf_counter() - t0)
        evaluate(tree, policy)  # warm-up (index structures) at one thread
        t_ours, ev = [], None
        for _ in range(max(eval_repeats, 5)):
            t0 = time.perf_counter()
            ev = evaluate(tree, policy)
            t_ours.append(time.perf_counter() - t0)
        row["liteefg_eval_s"], row["ours_eval_1t_s"] = min(t_lite), min(t_ours)
        row["liteefg_gains"] = list(gains)
        row["liteefg_nash_conv"] = float(sum(gains))  # = NashConv
        row["liteefg_exploitability"] = row["liteefg_nash_conv"] / tree.num_players
        row["liteefg_eval_nash_conv_diff"] = abs(row["liteefg_nash_conv"] - float(ev.nash_conv[0]))
        row["liteefg_eval_exploitability_diff"] = abs(
            row["liteefg_exploitability"] - float(ev.exploitability[0])
        )
        row["liteefg_eval_ref_diff"] = abs(row["liteefg_nash_conv"] - nash_conv_ref)
        del env, fixed
        gc.collect()
    finally:
        torch.set_num_threads(threads)
    row["liteefg_it_s"] = iterations / row["liteefg_cfr_s"]
    row["ours_sim_1t_it_s"] = iterations / row["ours_sim_1t_s"]
    row["ours_alt_1t_it_s"] = iterations / row["ours_alt_1t_s"]
    return row


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
    leg=None,
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
    # the reference for the 1e-12 check: OpenSpiel's python NashConv (about two and a
    # half minutes on 3-player Leduc, plus 20 s to build its TabularPolicy)
    t0 = time.perf_counter()
    row["eval_ref"] = "open_spiel.python.algorithms.exploitability.nash_conv"
    nc_ref = float(os_expl.nash_conv(game, tree.to_tabular_policy(cpp_pol, game)))
    row["eval_ref_s"] = time.perf_counter() - t0
    row["eval_ref_nash_conv"] = nc_ref
    row["eval_ref_diff"] = abs(nc_ours - nc_ref)
    del cpp, cpp_tab
    gc.collect()

    # ---- LiteEFG, one thread each (CFR, and evaluation of the same policy)
    if leg is not None:
        row.update(
            bench_liteefg(leg, game_name, tree, n, reps, 3 if large else eval_repeats, cpp_pol, nc_ref)
        )
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
    ap.add_argument("--no-liteefg", action="store_true", help="skip the LiteEFG comparison")
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

    leg = None if args.no_liteefg else import_liteefg()
    if leg is not None:
        from importlib.metadata import version

        print(f"# LiteEFG {version('liteefg')}")
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
                leg=leg,
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
    failures = []
    for r in rows:
        ok = r["eval_ref_diff"] <= EXACT
        print(
            f"  {r['game']}: ours {r['eval_ours_nash_conv']:.15f} vs {r['eval_ref']} "
            f"{r['eval_ref_nash_conv']:.15f}, |diff| {r['eval_ref_diff']:.1e} "
            f"{'<=' if ok else '>'} {EXACT:.0e}: {'ok' if ok else 'FAIL'}"
        )
        if not ok:
            failures.append(f"{r['game']}: NashConv differs from {r['eval_ref']} by {r['eval_ref_diff']:.1e}")

    lite_rows = [r for r in rows if "liteefg_it_s" in r]
    if lite_rows:
        print(
            "\n| game | one thread each | iterations | it/s | ours (simultaneous) speed-up | "
            "max |Δ current policy| vs ours |"
        )
        print("|---|---|---|---|---|---|")
        for r in lite_rows:
            print(
                f"| {r['game']} | LiteEFG CFR (simultaneous updates) | {r['iterations']} | "
                f"{r['liteefg_it_s']:.2f} | 1x | {r['liteefg_cfr_policy_diff']:.1e} |"
            )
            print(
                f"| {r['game']} | ours CFR, alternating=False (the same schedule) | {r['iterations']} | "
                f"{r['ours_sim_1t_it_s']:.2f} | **{r['ours_sim_1t_it_s'] / r['liteefg_it_s']:.1f}x** | — |"
            )
            print(
                f"| {r['game']} | ours CFR, alternating=True (as OpenSpiel) | {r['iterations']} | "
                f"{r['ours_alt_1t_it_s']:.2f} | {r['ours_alt_1t_it_s'] / r['liteefg_it_s']:.1f}x | — |"
            )
        print(
            "\n| game | one thread each | LiteEFG env.exploitability s | ours evaluate s | speed-up | "
            "LiteEFG NashConv (sum of gains) | ours NashConv | |diff| |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for r in lite_rows:
            print(
                f"| {r['game']} | same policy | {r['liteefg_eval_s']:.4f} | {r['ours_eval_1t_s']:.4f} | "
                f"**{r['liteefg_eval_s'] / r['ours_eval_1t_s']:.1f}x** | {r['liteefg_nash_conv']:.15f} | "
                f"{r['eval_ours_nash_conv']:.15f} | {r['liteefg_eval_nash_conv_diff']:.1e} |"
            )
        print(
            "  LiteEFG's env.exploitability returns each player's best-response gain; their sum is "
            "NashConv,\n  and NashConv / N our (and OpenSpiel's two-player) exploitability: "
            + ", ".join(
                f"{r['game']} {r['liteefg_exploitability']:.12f} vs ours "
                f"(|diff| {r['liteefg_eval_exploitability_diff']:.1e})"
                for r in lite_rows
            )
        )
        for r in lite_rows:
            if r["liteefg_eval_nash_conv_diff"] > EXACT:
                failures.append(
                    f"{r['game']}: LiteEFG's NashConv differs from ours by {r['liteefg_eval_nash_conv_diff']:.1e}"
                )

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
        head[f"{k}_eval_ref_diff"] = r["eval_ref_diff"]
        if "liteefg_it_s" in r:
            head[f"{k}_liteefg_it_s"] = round(r["liteefg_it_s"], 3)
            head[f"{k}_ours_1thread_it_s"] = round(r["ours_sim_1t_it_s"], 3)  # alternating=False, as LiteEFG
            head[f"{k}_ours_1thread_alternating_it_s"] = round(r["ours_alt_1t_it_s"], 3)
            head[f"{k}_cfr_speedup_vs_liteefg"] = round(r["ours_sim_1t_it_s"] / r["liteefg_it_s"], 2)
            head[f"{k}_cfr_policy_diff_vs_liteefg"] = r["liteefg_cfr_policy_diff"]
            head[f"{k}_liteefg_exploitability_s"] = round(r["liteefg_eval_s"], 5)
            head[f"{k}_ours_exploitability_1thread_s"] = round(r["ours_eval_1t_s"], 5)
            head[f"{k}_exploitability_speedup_vs_liteefg"] = round(
                r["liteefg_eval_s"] / r["ours_eval_1t_s"], 2
            )
            head[f"{k}_nash_conv_diff_vs_liteefg"] = r["liteefg_eval_nash_conv_diff"]
            head[f"{k}_liteefg_load_s"] = round(r["liteefg_load_s"], 2)
    head["batched_variants"] = b["variants"]
    head["batched_speedup"] = round(b["speedup"], 2)
    head["batched_max_diff"] = b["max_exploitability_diff"]
    print(json.dumps(head))
    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
