"""A durable run: killed with SIGKILL mid-way, resumed from its SQLite checkpoints.

The graph is a five-step pipeline (one node per superstep) of agents and
Python functions: ``outline`` (agent) -> ``keywords`` (function) ->
``draft`` (agent) -> ``measure`` (function) -> ``title`` (agent). The
Runtime saves the run in a :class:`~societas.topology.SqliteCheckpointer`
after every superstep.

The script starts a child process (itself, with ``--child``) that runs the
graph under a thread id. The first time, the function node of step
``--kill-step`` kills its own process with ``SIGKILL`` before it finishes
(it writes a marker file first, so that it happens once): nothing gets to
clean up, as when a machine goes down. The parent then resumes the thread
from the same file: the run goes on after the last completed superstep,
so the nodes that completed before the kill do not run again, and the
killed node, which never completed, runs once, in the parent. Every
completed node output is appended to ``executions.log`` (through the
Runtime's ``on_event``, in both processes, each line naming the process),
and the script prints how many times each node completed and the thread's
checkpoint list. (A checkpoint holds whole supersteps: in a graph where a
step runs several nodes, the ones of the killed step that had finished
would run again too.)

    python examples/durable_run.py
    python examples/durable_run.py --kill-step 1

Writes runs/durable_run/{runs.db,executions.log,trace.jsonl}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from societas.agents import load_llm
from societas.agents.llm import LLM
from societas.topology import GraphSpec, NodeContext, RunResult, Runtime, SqliteCheckpointer, TraceEvent

TASK = "Explain in a few sentences why the sky is blue."
THREAD = "durable"
PIPELINE = ["outline", "keywords", "draft", "measure", "title"]
FUNCTION_STEPS = {PIPELINE.index("keywords"): "keywords", PIPELINE.index("measure"): "measure"}


def build_spec(max_new_tokens: int) -> GraphSpec:
    """outline -> keywords -> draft -> measure -> title: one node per superstep."""
    params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
    return GraphSpec.from_data(
        {
            "name": "durable_run",
            "nodes": [
                {
                    "id": "outline",
                    "role": "planner",
                    "prompt": "List three short points the answer must make.",
                    "params": params,
                },
                {"id": "keywords", "kind": "function", "function": "keywords"},
                {
                    "id": "draft",
                    "role": "writer",
                    "prompt": "Write the answer, covering the points and keywords.",
                    "params": params,
                },
                {"id": "measure", "kind": "function", "function": "measure"},
                {
                    "id": "title",
                    "role": "editor",
                    "prompt": "Give the answer a title of at most eight words.",
                    "params": params,
                },
            ],
            "edges": ["outline -> keywords", "keywords -> draft", "draft -> measure", "measure -> title"],
        }
    )


def node_functions(out: Path, kill_step: int | None) -> dict[str, Callable[[NodeContext], str]]:
    """The function nodes; the one at ``kill_step`` kills the process the first time (marker file)."""
    marker = out / "killed.marker"

    def maybe_die(node: str) -> None:
        if kill_step is not None and FUNCTION_STEPS.get(kill_step) == node and not marker.exists():
            marker.write_text(f"killed at step {kill_step} ({node})\n", encoding="utf-8")
            print(f"[child pid {os.getpid()}] {node}: killing this process with SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def keywords(ctx: NodeContext) -> str:
        maybe_die("keywords")
        words = [w.strip(".,:;!?()*#-").lower() for w in " ".join(ctx.inputs.values()).split()]
        return "keywords: " + ", ".join(sorted({w for w in words if len(w) > 6})[:8])

    def measure(ctx: NodeContext) -> str:
        maybe_die("measure")
        text = " ".join(ctx.inputs.values())
        return f"{text}\n\n({len(text.split())} words)"

    return {"keywords": keywords, "measure": measure}


def execution_logger(path: Path, process: str) -> Callable[[TraceEvent], None]:
    """An ``on_event`` callback appending ``step node process`` for every completed node output."""

    def log(ev: TraceEvent) -> None:
        if ev.kind in ("agent", "function") and not ev.meta.get("partial"):
            with path.open("a", encoding="utf-8") as f:
                f.write(f"{ev.step} {ev.sender} {process}\n")

    return log


def make_runtime(args: argparse.Namespace, model: LLM | str, kill_step: int | None, process: str) -> Runtime:
    """The pipeline's Runtime over ``runs.db``, logging completed nodes as ``process``."""
    out = Path(args.out)
    return Runtime(
        build_spec(args.max_new_tokens),
        llm=model,
        functions=node_functions(out, kill_step),
        checkpointer=SqliteCheckpointer(out / "runs.db"),
        on_event=execution_logger(out / "executions.log", process),
        seed=args.seed,
    )


def child(args: argparse.Namespace) -> None:
    """The first attempt: run the thread from the start (it dies at ``--kill-step``)."""
    rt = make_runtime(args, load_llm(args.llm), args.kill_step, "child")
    res = rt.run(args.task, thread=THREAD)
    print(f"[child] finished without being killed: {res.output!r}", flush=True)


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Run the child, let it die, resume in this process; ``llm`` replaces ``--llm`` for the resume only
    (the child loads ``--llm`` itself, so give a URI such as ``function:MODULE:ATTR`` to script both)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", default="embedded", help="LLM URI (default: the embedded model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0 = torch default; 1 is faster when other processes load the cores)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument(
        "--kill-step",
        type=int,
        choices=sorted(FUNCTION_STEPS),
        default=PIPELINE.index("measure"),
        help="the superstep whose function node kills the first attempt",
    )
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/durable_run", help="run directory")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)

    if args.child:
        child(args)
        return {}

    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for name in ("runs.db", "executions.log", "killed.marker"):
        (out / name).unlink(missing_ok=True)  # a fresh demonstration each time

    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        *(argv if argv is not None else sys.argv[1:]),
    ]
    print("starting the child:", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != -signal.SIGKILL:
        raise SystemExit(
            f"durable_run.py: the child exited with status {proc.returncode}, not killed by SIGKILL"
        )
    print(f"the child was killed by SIGKILL at step {args.kill_step}; resuming thread {THREAD!r}")

    rt = make_runtime(args, llm if llm is not None else args.llm, None, "parent")
    before = [c.step for c in rt.checkpoints(THREAD)]
    result: RunResult = rt.resume(THREAD)

    lines = (out / "executions.log").read_text(encoding="utf-8").splitlines()
    runs = Counter(line.split()[1] for line in lines)
    where = {line.split()[1]: line.split()[2] for line in lines}
    for n in PIPELINE:
        print(f"  {n}: completed {runs.get(n, 0)} time(s), in the {where.get(n)}")
    print("checkpoints:")
    checkpoints = []
    for c in rt.checkpoints(THREAD):
        checkpoints.append(
            {"step": c.step, "finished": c.meta.get("finished"), "stopped": c.meta.get("stopped")}
        )
        when = time.strftime("%H:%M:%S", time.localtime(c.created))
        print(f"  step {c.step}  saved {when}  finished={c.meta.get('finished')}")
    print("title:", (result.output or "").strip())
    trace_path = result.trace.save_jsonl(out / "trace.jsonl")
    summary = {
        "example": "durable_run",
        "killed_at_step": args.kill_step,
        "checkpoints_before_resume": before,
        "checkpoints": checkpoints,
        "executions": {n: runs.get(n, 0) for n in PIPELINE},
        "ran_in": {n: where.get(n) for n in PIPELINE},
        "each_node_once": all(runs.get(n, 0) == 1 for n in PIPELINE),
        "output": result.output,
        "stopped": result.stopped,
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
    }
    print(json.dumps(summary))
    return {**summary, "result": result}


if __name__ == "__main__":
    main()
