"""Environment throughput of the batched torch MPE speaker-listener, against
mpe2 and VMAS, in one run.

An *env step* is one step of one environment copy, so a batched env with
``B`` copies doing ``s`` steps/s has a throughput of ``B * s`` env steps/s.
All three step the cooperative-communication task (Lowe et al. 2017) with
uniformly random discrete actions drawn inside the timed loop, and reset
episodes after 25 steps:

1. ours: :class:`societas.marl.comm.envs.SpeakerListenerEnv` (``--device``, auto-reset
   inside ``step``) at each batch size of ``--sizes``;
2. mpe2's PettingZoo ``simple_speaker_listener_v4.parallel_env()``, one env in
   a Python loop (its per-env rate is also what ``B`` copies stepped in a loop
   give in total: the cost is linear in ``B``); plus our
   :class:`~societas.marl.comm.envs.PettingZooBatchedEnv` adapter over ``B = 64`` mpe2
   copies, which is how one trains on the real mpe2 envs;
3. VMAS's vectorised ``simple_speaker_listener``
   (``vmas.make_env(..., continuous_actions=False, max_steps=25)``, reset when
   its episodes end) at the same batch sizes, on the same device.

Each figure is the best of ``--repeats`` timing windows of ``--seconds``
(shared machines are noisy). ``--threads N`` sets ``torch.set_num_threads``
for all of them (default 1: at these sizes intra-op threading gains little, and
on a machine whose cores are busy with other work it makes torch and VMAS
several times slower; ``--threads 0`` keeps torch's default).

``--train`` adds end-to-end MAPPO+TarMAC training throughput
(:func:`societas.marl.comm.train.benchmark_train_throughput`: env steps/s of whole
updates, rollout and PPO update) at ``--train-sizes`` envs, with the batched
torch env against the same algorithm on mpe2's env stepped in a Python loop.

Run: ``python benchmarks/marl_env_speed.py [--device cpu] [--sizes 1,64,1024,8192]
[--seconds 1] [--train]``. Prints a table and ends with one JSON line of the
headline figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from societas.marl.comm.envs import PettingZooBatchedEnv, SpeakerListenerEnv, resolve_device

EPISODE = 25


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_rate(
    step: Callable[[], None],
    steps_per_call: int,
    seconds: float,
    repeats: int,
    device: torch.device,
    warmup: int = 30,
) -> float:
    """Best over ``repeats`` windows of ``steps_per_call * calls / elapsed``."""
    for _ in range(warmup):
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
        best = max(best, steps_per_call * calls / elapsed)
    return best


def bench_torch(num_envs: int, device: torch.device, seconds: float, repeats: int) -> float:
    env = SpeakerListenerEnv(num_envs=num_envs, device=device, seed=0)
    env.reset()
    gen = torch.Generator(device=device).manual_seed(0)
    sizes = [(a, env.action_sizes[a]) for a in env.agents]

    def step() -> None:
        env.step({a: torch.randint(n, (num_envs,), generator=gen, device=device) for a, n in sizes})

    return best_rate(step, num_envs, seconds, repeats, device)


def bench_mpe2(seconds: float, repeats: int) -> float:
    from mpe2 import simple_speaker_listener_v4

    env = simple_speaker_listener_v4.parallel_env(max_cycles=EPISODE)
    env.reset(seed=0)
    for a in env.possible_agents:
        env.action_space(a).seed(0)

    def step() -> None:
        env.step({a: env.action_space(a).sample() for a in env.agents})
        if not env.agents:
            env.reset()

    return best_rate(step, 1, seconds, repeats, torch.device("cpu"))


def bench_mpe2_adapter(num_envs: int, seconds: float, repeats: int) -> float:
    from mpe2 import simple_speaker_listener_v4

    env = PettingZooBatchedEnv(
        simple_speaker_listener_v4.parallel_env, num_envs=num_envs, device="cpu", seed=0
    )
    env.reset()
    gen = torch.Generator().manual_seed(0)

    def step() -> None:
        env.step(env.sample_actions(gen))

    return best_rate(step, num_envs, seconds, repeats, torch.device("cpu"), warmup=3)


def bench_vmas(num_envs: int, device: torch.device, seconds: float, repeats: int) -> float:
    import vmas

    env = vmas.make_env(
        "simple_speaker_listener",
        num_envs=num_envs,
        device=str(device),
        continuous_actions=False,
        max_steps=EPISODE,
        seed=0,
    )
    env.reset()
    sizes = [int(space.n) for space in env.action_space]
    gen = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        acts = [torch.randint(n, (num_envs,), generator=gen, device=device) for n in sizes]
        _, _, done, _ = env.step(acts)
        if bool(done.all()):
            env.reset()

    return best_rate(step, num_envs, seconds, repeats, device)


def bench_train(sizes: list[int], device: torch.device, seconds: float) -> dict | str:
    """MAPPO+TarMAC training throughput (env steps/s of whole updates, env
    included) with the batched torch env and, as the baseline, the same
    algorithm on mpe2's env stepped in a Python loop."""
    try:
        train = importlib.import_module("societas.marl.comm.train")
    except ImportError as exc:
        return f"skipped: societas.marl.comm.train not importable ({exc})"
    fn = train.benchmark_train_throughput
    out = {}
    for b in sizes:
        ours = fn(num_envs=b, device=str(device), seconds=seconds, backend="torch")
        base = fn(num_envs=b, device=str(device), seconds=seconds, backend="mpe2")
        out[str(b)] = {"torch": ours, "mpe2": base, "ratio": ours / base}
    return out


def fmt(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto")
    p.add_argument("--sizes", default="1,64,1024,8192", help="comma-separated batch sizes")
    p.add_argument("--seconds", type=float, default=1.0, help="length of one timing window")
    p.add_argument("--repeats", type=int, default=3, help="timing windows per figure (best)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--no-vmas", action="store_true", help="skip VMAS")
    p.add_argument("--train", action="store_true", help="also measure MAPPO+TarMAC training")
    p.add_argument("--train-sizes", default="64,512", help="batch sizes of the training measurement")
    args = p.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium/pettingzoo/vmas deprecation chatter
        return _run(args, device, sizes)


def _run(args: argparse.Namespace, device: torch.device, sizes: list[int]) -> dict:

    ours, vm = {}, {}
    for b in sizes:
        ours[str(b)] = bench_torch(b, device, args.seconds, args.repeats)
        if not args.no_vmas:
            try:
                vm[str(b)] = bench_vmas(b, device, args.seconds, args.repeats)
            except ImportError:
                args.no_vmas = True
    mpe = bench_mpe2(args.seconds, args.repeats)
    adapter_b = 64
    adapter = bench_mpe2_adapter(adapter_b, args.seconds, args.repeats)

    print(
        f"\nspeaker-listener env steps/s (one step of one env copy; best of "
        f"{args.repeats} x {args.seconds:g} s; device {device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {platform.processor() or platform.machine()})\n"
    )
    head = (
        f"{'envs B':>8} | {'ours (torch)':>13} | {'VMAS':>10} | {'mpe2 loop':>10} | "
        f"{'ours/mpe2':>10} | {'ours/VMAS':>10}"
    )
    print(head)
    print("-" * len(head))
    for b in sizes:
        k = str(b)
        v = vm.get(k)
        print(
            f"{b:>8} | {fmt(ours[k]):>13} | {fmt(v) if v else '-':>10} | {fmt(mpe):>10} | "
            f"{ours[k] / mpe:>9.1f}x | {(f'{ours[k] / v:.1f}x' if v else '-'):>10}"
        )
    print(
        f"\nmpe2: one env in a Python loop, {fmt(mpe)} env steps/s; B copies in a loop give "
        f"the same total ({fmt(mpe)}/s for any B)."
    )
    print(
        f"mpe2 through PettingZooBatchedEnv (B={adapter_b}, Python loop + tensor "
        f"conversion): {fmt(adapter)} env steps/s."
    )

    result: dict = {
        "benchmark": "marl_env_speed",
        "task": "speaker_listener",
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": {k: round(v) for k, v in ours.items()},
        "mpe2": round(mpe),
        "mpe2_adapter_b64": round(adapter),
        "vmas": {k: round(v) for k, v in vm.items()},
        "ratio_vs_mpe2": {k: round(v / mpe, 1) for k, v in ours.items()},
        "ratio_vs_vmas": {k: round(ours[k] / vm[k], 2) for k in vm},
    }
    if args.train:
        tr = bench_train([int(x) for x in args.train_sizes.split(",")], device, max(args.seconds, 2.0))
        if isinstance(tr, str):
            print(f"\nMAPPO+TarMAC training throughput: {tr}")
        else:
            print("\nMAPPO+TarMAC training, env steps/s of whole updates (rollout + PPO update)")
            print("| envs B | batched torch env | mpe2 in a loop | ratio |")
            print("|---|---|---|---|")
            for k, v in tr.items():
                print(f"| {k} | {fmt(v['torch'])} | {fmt(v['mpe2'])} | {v['ratio']:.1f}x |")
            result["train"] = {
                k: {"torch": round(v["torch"]), "mpe2": round(v["mpe2"]), "ratio": round(v["ratio"], 2)}
                for k, v in tr.items()
            }
        result["train_status"] = tr if isinstance(tr, str) else "ok"
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
