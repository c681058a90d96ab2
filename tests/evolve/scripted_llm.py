"""A scripted "LLM" for tests: moves one coefficient of the curve-fit model halfway to the target.

Usable as ``FunctionLLM(answer)`` or via ``--llm function:tests.evolve.scripted_llm:answer``.
Every answer whose sampling seed is divisible by 5 is deliberately malformed.
"""

import re

TARGET = {"a": 1.5, "b": -0.7, "c": 0.3}


def answer(messages, params=None):
    if params is not None and params.seed is not None and params.seed % 5 == 0:
        return "I think the program is fine as it is."
    text = messages[-1]["content"]
    program = text.split("```python\n", 1)[1].split("```", 1)[0]
    for name in ("c", "b", "a"):
        match = re.search(rf"^    {name} = (.+)$", program, re.MULTILINE)
        if match is None:
            continue
        try:
            value = float(eval(match.group(1), {}))
        except Exception:
            continue
        if abs(value - TARGET[name]) > 1e-3:
            new = value + (TARGET[name] - value) * 0.5
            return (
                f"Move {name} towards the data.\n<<<<<<< SEARCH\n{match.group(0)}\n=======\n"
                f"    {name} = {new!r}\n>>>>>>> REPLACE\n"
            )
    return "<<<<<<< SEARCH\nnot in the program\n=======\nx\n>>>>>>> REPLACE\n"
