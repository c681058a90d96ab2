"""A tool call that waits for a person's approval, then resumes from a checkpoint.

The agent may call ``save_note``, a tool made with
``@tool(requires_approval=True)``: when the model asks for it, the Runtime
does not run it but saves the run and returns an *interrupted* result whose
``interrupt`` names the tool and its arguments. This script answers — with
``--approve yes|no``, or, when no answer is given and standard input is a
terminal, by asking there — and resumes the thread with that answer
(``Runtime.resume(thread, answer)``). ``yes`` runs the call; any other
answer refuses it, and the model is told so instead of getting a result.

With ``--checkpointer sqlite`` the run is saved in a SQLite file and the
resume goes through a fresh Runtime, as a later process would; with
``memory`` (the default) the same Runtime resumes it.

    python examples/approval.py --approve yes
    python examples/approval.py --approve no --checkpointer sqlite
    python examples/approval.py                      # asks on the terminal

Writes the approved notes and trace.jsonl under runs/approval/.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from societas.agents import load_llm
from societas.agents.llm import LLM
from societas.agents.tools import Tool, tool
from societas.topology import (
    Checkpointer,
    GraphSpec,
    MemoryCheckpointer,
    RunResult,
    Runtime,
    SqliteCheckpointer,
)

TASK = "Save a note named shopping.txt that says: buy milk and bread."

PROMPT = (
    "You keep the user's notes. To save a note, call the save_note tool, for example:\n"
    '<tool_call>{"name": "save_note", "arguments": {"name": "todo.txt", "text": "call Ann"}}</tool_call>\n'
    "After the tool answers, tell the user in one sentence what happened."
)


def make_save_note(folder: Path, saved: list[str]) -> Tool:
    """The ``save_note`` tool, writing into ``folder`` (and appending each name to ``saved``); it runs
    only once a person approves the call."""

    @tool(requires_approval=True)
    def save_note(name: str, text: str) -> str:
        """Save a text note in the notes folder.

        Args:
            name: The note's file name, without folders (e.g. "todo.txt").
            text: What the note says.
        """
        if not name or Path(name).name != name or name.startswith("."):
            raise ValueError(f"the note name must be a plain file name, got {name!r}")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
        saved.append(name)
        return f"saved {len(text)} characters to {name}"

    return save_note


def build_spec(max_new_tokens: int) -> GraphSpec:
    """One agent that may call ``save_note`` (at most three model turns)."""
    return GraphSpec.from_data(
        {
            "name": "approval",
            "nodes": [
                {
                    "id": "assistant",
                    "role": "assistant",
                    "prompt": PROMPT,
                    "tools": ["save_note"],
                    "max_tool_steps": 3,
                    "params": {"temperature": 0.0, "max_new_tokens": max_new_tokens},
                }
            ],
        }
    )


def ask(payload: dict[str, Any], given: str | None) -> str:
    """The person's answer to a waiting tool call: ``given``, else a question on the terminal."""
    question = (
        f"The agent wants to run {payload['tool']}({json.dumps(payload['arguments'])}). Allow it? [yes/no] "
    )
    if given is not None:
        print(question + given)
        return given
    if not sys.stdin.isatty():
        print(
            "approval.py: a tool call waits for approval but standard input is not a terminal; "
            "pass --approve yes or --approve no",
            file=sys.stderr,
        )
        raise SystemExit(2)
    return input(question).strip() or "no"


def main(argv: list[str] | None = None, *, llm: LLM | None = None) -> dict[str, Any]:
    """Run, answer each interrupt, resume; ``llm`` (a scripted model, in tests) replaces ``--llm``."""
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
    ap.add_argument("--approve", choices=["yes", "no"], help="the answer to every approval (default: ask)")
    ap.add_argument("--checkpointer", choices=["memory", "sqlite"], default="memory")
    ap.add_argument("--thread", default="approval", help="checkpoint thread id")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--out", default="runs/approval", help="run directory")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    notes = out / "notes"
    model = llm if llm is not None else load_llm(args.llm)
    spec = build_spec(args.max_new_tokens)
    saved: list[str] = []
    tools = [make_save_note(notes, saved)]
    cp: Checkpointer
    if args.checkpointer == "sqlite":
        cp = SqliteCheckpointer(out / "approval.db")
        if args.thread in cp.threads():
            cp.delete(args.thread)  # a rerun starts the thread afresh
    else:
        cp = MemoryCheckpointer()
    rt = Runtime(spec, llm=model, tools=tools, checkpointer=cp, seed=args.seed)

    result: RunResult = rt.run(args.task, thread=args.thread)
    answers: list[dict[str, Any]] = []
    while result.interrupted:
        payload = result.interrupt
        answer = ask(payload, args.approve)
        answers.append({"tool": payload["tool"], "arguments": payload["arguments"], "answer": answer})
        if args.checkpointer == "sqlite":
            # A later process: a new Runtime over the same file and graph picks the thread up.
            rt = Runtime(spec, llm=model, tools=tools, checkpointer=cp, seed=args.seed)
        result = rt.resume(args.thread, answer)

    calls = [
        {
            "tool": e.meta["tool"],
            "arguments": e.meta["arguments"],
            "approval": e.meta["approval"],
            "result": e.output,
        }
        for e in result.trace
        if e.kind == "tool_call"
    ]
    for c in calls:
        print(f"{c['tool']} (answer {c['approval']!r}) -> {c['result']}")
    print("answer:", (result.output or "").strip())
    trace_path = result.trace.save_jsonl(out / "trace.jsonl")
    summary = {
        "example": "approval",
        "checkpointer": args.checkpointer,
        "approvals": answers,
        "tool_calls": calls,
        "saved_notes": saved,
        "checkpoints": [c.step for c in cp.list(args.thread, light=True)],
        "output": result.output,
        "calls": result.totals["calls"],
        "script_wall_s": round(time.perf_counter() - t0, 2),
        "trace": str(trace_path),
    }
    print(json.dumps(summary))
    cp.close()
    return {**summary, "result": result}


if __name__ == "__main__":
    main()
