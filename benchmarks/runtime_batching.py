"""Runtime batching and overhead, side by side with the baselines, in one run.

1. Batched supersteps vs one agent call at a time, on the embedded model:
   a society of 8 personas x 2 rounds (+ aggregator) and a star of one hub and
   4 workers. The baseline is the same Runtime, the same graph,
   the same prompts and the same token budget (every agent writes exactly 64
   tokens), with every batch split into
   single calls — what LangGraph or AutoGen do with a local HF model, where
   each node calls the model on its own. Greedy decoding, so both runs
   generate the same tokens; tokens/s counts generated tokens.
2. Scheduling overhead per node: a 1,000-node layered graph (50 layers x 20,
   every node waiting for the whole previous layer) of trivial FunctionLLM
   agents, against LangGraph running the same graph of trivial nodes (each
   node joined on the whole previous layer with ``add_edge(list, node)``).
3. Setup costs (median of repeats): reloading the embedded model from its
   converted cache (the first load converts the GGUF file; later ones should
   take seconds), and rejecting an alias-bomb ("billion laughs") answer in
   the AgentConductor layered-YAML parser (refused before it expands).

Run: ``python benchmarks/runtime_batching.py`` (``--quick`` for a smoke run).
Prints a table and ends with one JSON line of the headline figures.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from societas.agents import FunctionLLM, load_llm
from societas.agents.embedded import prepare
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.topology.errors import YAMLSyntaxError
from societas.topology.layered import parse_layered_yaml
from societas.topology.patterns import layered, society_of_thought, star
from societas.topology.runtime import Runtime


class OneCallAtATime:
    """Wraps an LLM so every prompt is its own generate() call."""

    def __init__(self, inner):
        self.inner = inner
        self.name = f"sequential({getattr(inner, 'name', 'llm')})"

    def generate(self, prompts, params=None):
        plist = params if isinstance(params, list) else [params] * len(prompts)
        return [self.inner.generate([p], [q])[0] for p, q in zip(prompts, plist)]


def _run(graph, llm, task, repeats):
    walls, toks, outs = [], [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = Runtime(graph, llm=llm).run(task)
        walls.append(time.perf_counter() - t0)
        toks.append(res.trace.totals().completion_tokens)
        outs = {e.sender + f"#{e.round}": e.output for e in res.trace}
    w = statistics.median(walls)
    return {"wall_s": w, "tokens": toks[-1], "tok_per_s": toks[-1] / w, "outputs": outs}


def batching(quick: bool, repeats: int) -> dict:
    llm = load_llm("embedded")
    seq = OneCallAtATime(llm)
    # Every agent generates exactly max_new tokens (end-of-sequence suppressed
    # until then), so both runs spend the same token budget whatever the model
    # would have said; prompts are still the real, growing ones of each graph.
    max_new = 24 if quick else 64
    params = {"temperature": 0.0, "max_new_tokens": max_new, "min_new_tokens": max_new}
    question = "A farmer has 17 sheep and all but 9 run away. How many sheep does the farmer have left?"
    graphs = {
        "society 8x2": society_of_thought(n_personas=8, rounds=2, params=params),
        "star 1+4": star(4, aggregate=False, params=params),
    }
    llm.generate(["warm up"], None)
    rows = {}
    for name, g in graphs.items():
        b = _run(g, llm, question, repeats)
        s = _run(g, seq, question, repeats)
        same = sum(b["outputs"][k] == s["outputs"].get(k) for k in b["outputs"]) / len(b["outputs"])
        rows[name] = {
            "batched_tok_s": b["tok_per_s"],
            "sequential_tok_s": s["tok_per_s"],
            "speedup": b["tok_per_s"] / s["tok_per_s"],
            "batched_wall_s": b["wall_s"],
            "sequential_wall_s": s["wall_s"],
            "tokens": b["tokens"],
            "identical_outputs": same,
        }
    return rows


def overhead(layers: int, width: int, repeats: int) -> dict:
    g = layered([["solver"] * width for _ in range(layers)])
    n = layers * width
    llm = FunctionLLM(lambda m: "ok")
    t0 = time.perf_counter()
    rt = Runtime(g, llm=llm)
    build = time.perf_counter() - t0
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = rt.run("t")
        walls.append(time.perf_counter() - t0)
    assert len(res.trace) == n
    ours = {"ms_per_node": statistics.median(walls) / n * 1e3, "build_s": build + 0.0}
    try:
        lg = _langgraph(layers, width, repeats)
    except ImportError:
        lg = None
    return {"societas": ours, "langgraph": lg, "nodes": n}


def _langgraph(layers: int, width: int, repeats: int) -> dict:
    import operator
    from typing import Annotated, TypedDict

    import langgraph
    from langgraph.graph import END, START, StateGraph

    # functional form: this module's postponed annotations would hide the reducer
    State = TypedDict("State", {"n": Annotated[int, operator.add]})  # noqa: UP013

    def node(_state):
        return {"n": 1}

    t0 = time.perf_counter()
    b = StateGraph(State)
    names = [[f"n{i}_{j}" for j in range(width)] for i in range(layers)]
    for row in names:
        for nm in row:
            b.add_node(nm, node)
    for nm in names[0]:
        b.add_edge(START, nm)
    for prev, cur in zip(names, names[1:]):
        for nm in cur:
            b.add_edge(prev, nm)
    b.add_edge(names[-1], END)
    app = b.compile()
    build = time.perf_counter() - t0
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = app.invoke({"n": 0}, {"recursion_limit": layers * 4})
        walls.append(time.perf_counter() - t0)
    assert out["n"] == layers * width
    version = getattr(langgraph, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("langgraph")
    return {
        "ms_per_node": statistics.median(walls) / (layers * width) * 1e3,
        "build_s": build,
        "version": version,
    }


def setup_costs(repeats: int) -> dict:
    model_dir = prepare()  # converts on the first call; the timed loads read the cache
    loads = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        TransformersLLM(model_dir)
        loads.append(time.perf_counter() - t0)
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    bomb = "```yaml\n" + "\n".join(lines) + "\nlayers: *i\n```"
    rejects = []
    for _ in range(max(repeats, 5)):
        t0 = time.perf_counter()
        try:
            parse_layered_yaml(bomb)
        except YAMLSyntaxError:
            rejects.append(time.perf_counter() - t0)
        else:
            raise RuntimeError("the alias bomb was accepted")
    return {"embedded_reload_s": statistics.median(loads), "alias_bomb_reject_s": statistics.median(rejects)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter generations, one repeat")
    ap.add_argument("--repeats", type=int, default=None)
    args = ap.parse_args()
    repeats = args.repeats or (1 if args.quick else 2)
    print(f"# machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    rows = batching(args.quick, repeats)
    print(
        "\n| graph | batched tok/s | one-at-a-time tok/s | speed-up | batched wall s "
        "| sequential wall s | tokens | same outputs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['batched_tok_s']:.1f} | {r['sequential_tok_s']:.1f} | {r['speedup']:.2f}x | "
            f"{r['batched_wall_s']:.1f} | {r['sequential_wall_s']:.1f} | {r['tokens']} | {r['identical_outputs']:.0%} |"
        )
    ov = overhead(50, 20, 5 if not args.quick else 2)
    lg = ov["langgraph"]
    print(f"\n| scheduler, {ov['nodes']}-node layered graph | ms per node | build s |")
    print("|---|---|---|")
    print(f"| societas Runtime | {ov['societas']['ms_per_node']:.3f} | {ov['societas']['build_s']:.2f} |")
    if lg:
        print(f"| LangGraph {lg['version']} | {lg['ms_per_node']:.3f} | {lg['build_s']:.2f} |")
    else:
        print("| LangGraph | not installed (pip install 'societas[dev]') | |")
    setup = setup_costs(repeats)
    print("\n| setup cost | median s |")
    print("|---|---|")
    print(f"| embedded model reload from the converted cache | {setup['embedded_reload_s']:.2f} |")
    print(f"| reject an alias-bomb layered YAML answer | {setup['alias_bomb_reject_s']:.4f} |")
    head = {
        "benchmark": "runtime_batching",
        "society_speedup": round(rows["society 8x2"]["speedup"], 2),
        "star_speedup": round(rows["star 1+4"]["speedup"], 2),
        "society_batched_tok_s": round(rows["society 8x2"]["batched_tok_s"], 1),
        "runtime_ms_per_node": round(ov["societas"]["ms_per_node"], 4),
        "langgraph_ms_per_node": round(lg["ms_per_node"], 4) if lg else None,
        "overhead_ratio_vs_langgraph": round(lg["ms_per_node"] / ov["societas"]["ms_per_node"], 1)
        if lg
        else None,
        "embedded_reload_s": round(setup["embedded_reload_s"], 2),
        "alias_bomb_reject_s": round(setup["alias_bomb_reject_s"], 4),
    }
    print(json.dumps(head))


if __name__ == "__main__":
    main()
