"""ReAct agents on a GPU: the Runtime's batched tool loops vs one model call at a time.

N ReAct agents (2 tools each, three model turns: two tool calls, then an
answer) run as one graph (``--agents`` nodes, ``run_many`` over ``--tasks``
tasks); every model turn of a superstep — first turns and tool-loop
continuations alike — goes to the model in ONE batched call. The baseline
is the same Runtime, graph and prompts with every call split into single
prompts, which is what framework nodes calling a local model one at a time
do. The model has SmolLM2-135M's shape (the embedded model's config and
tokenizer) with random weights in bf16, so the measurement needs no model
download; the first two turns of each agent are replaced by scripted tool
calls after generation, so the tool loop really runs while the device does
the real generation work (every call generates exactly ``--new-tokens``
tokens, greedy). Tokens/s counts generated tokens.

Run: ``python benchmarks/react_batching_gpu.py`` (``--device cpu --quick``
for a smoke run). Prints one line per size and ends with one JSON line.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from societas.agents.embedded import prepare
from societas.agents.llm.base import Completion
from societas.agents.llm.transformers_llm import TransformersLLM
from societas.agents.tools import tool
from societas.topology import GraphSpec, Runtime

DEV = "cuda"
TINY = False
TOK = ""


@tool
def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: first
        b: second
    """
    return a + b


@tool
def mul(a: int, b: int) -> int:
    """Multiply.

    Args:
        a: first
        b: second
    """
    return a * b


class Scripted:
    """The real model generates; turns 0 and 1 are then replaced by tool calls (usage kept)."""

    def __init__(self, llm, one_at_a_time=False):
        self.llm, self.name, self.one, self.calls = llm, llm.name, one_at_a_time, 0

    def generate(self, prompts, params=None):
        plist = params if isinstance(params, list) else [params] * len(prompts)
        if self.one:
            outs = []
            for p, q in zip(prompts, plist):
                outs += self.llm.generate([p], [q])
                self.calls += 1
        else:
            outs = self.llm.generate(list(prompts), plist)
            self.calls += 1
        fixed = []
        for p, comps in zip(prompts, outs):
            turn = sum(1 for m in p if m["role"] == "assistant")
            c = comps[0]
            if turn < 2:
                name = "add" if turn == 0 else "mul"
                text = f'<tool_call>{{"name": "{name}", "arguments": {{"a": 6, "b": 7}}}}</tool_call>'
            else:
                text = "The answer is 42."
            fixed.append(
                [Completion(text=text, token_ids=c.token_ids, finish_reason=c.finish_reason, usage=c.usage)]
            )
        return fixed


def build():
    tok = AutoTokenizer.from_pretrained(TOK)
    cfg = LlamaConfig.from_pretrained(TOK)
    if TINY:
        cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size = 2, 64, 128
        cfg.num_attention_heads, cfg.num_key_value_heads = 4, 2
    torch.manual_seed(0)
    dtype = torch.bfloat16 if DEV == "cuda" else torch.float32
    model = LlamaForCausalLM(cfg).to(dtype=dtype, device=DEV).eval()
    return TransformersLLM(model, tok, device=DEV, dtype="auto", max_batch_size=512)


def run(llm, agents, tasks, new_tokens, one):
    params = {"temperature": 0.0, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    nodes = [
        {
            "id": f"agent{i}",
            "role": "solver",
            "prompt": "Solve with the tools.",
            "tools": ["add", "mul"],
            "max_tool_steps": 3,
            "params": params,
        }
        for i in range(agents)
    ]
    spec = GraphSpec.from_data({"name": "react", "nodes": nodes})
    wrapped = Scripted(llm, one_at_a_time=one)
    rt = Runtime(spec, llm=wrapped, tools=[add, mul])
    if DEV == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    res = rt.run_many([f"What is (6+7) and 6*7? Task {k}." for k in range(tasks)])
    if DEV == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    toks = sum(r.totals["completion_tokens"] for r in res)
    tool_calls = sum(1 for r in res for e in r.trace if e.kind == "tool_call")
    ok = all(o == ["The answer is 42."] for r in res for o in r.outputs.values())
    return {
        "tokens": toks,
        "wall_s": dt,
        "tok_per_s": toks / dt,
        "model_calls": wrapped.calls,
        "tool_calls": tool_calls,
        "answers_ok": ok,
    }


def main(argv=None):
    global DEV, TINY, TOK
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto")
    ap.add_argument("--model-dir", default=None, help="config and tokenizer (default: the embedded model's)")
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--tasks", type=int, nargs="+", default=[1, 8], help="run_many sizes (agents x tasks)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="a 2-layer model, 2 agents, 8 tokens (smoke run)")
    args = ap.parse_args(argv)
    DEV = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    TINY = args.quick
    if args.model_dir is None:
        args.model_dir = str(prepare())
    TOK = args.model_dir
    llm = build()
    new_tokens = 8 if TINY else args.new_tokens
    run(llm, 2, 1, 4, False)  # warm-up (kernels, allocator)
    rows = []
    for agents, tasks in [(2, 1)] if TINY else [(args.agents, t) for t in args.tasks]:
        b = run(llm, agents, tasks, new_tokens, False)
        s = run(llm, agents, tasks, new_tokens, True)
        rows.append(
            {
                "agents": agents * tasks,
                "batched": b,
                "one_at_a_time": s,
                "speedup": b["tok_per_s"] / s["tok_per_s"],
            }
        )
        print(
            f"{agents * tasks:>4} ReAct agents: batched {b['tok_per_s']:.0f} tok/s ({b['model_calls']} calls, "
            f"{b['wall_s']:.2f} s) vs one at a time {s['tok_per_s']:.0f} tok/s ({s['model_calls']} calls, "
            f"{s['wall_s']:.2f} s): {rows[-1]['speedup']:.1f}x; tool calls {b['tool_calls']}/{s['tool_calls']}, "
            f"answers ok {b['answers_ok'] and s['answers_ok']}",
            flush=True,
        )
    out = {
        "benchmark": "react_batching_gpu",
        "device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu",
        "torch": torch.__version__,
        "new_tokens_per_call": new_tokens,
        "rows": rows,
    }
    out["speedup_largest"] = rows[-1]["speedup"]
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
