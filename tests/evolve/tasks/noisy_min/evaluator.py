"""Evaluator of the noisy_min task, written as OpenEvolve evaluators are.

It returns OpenEvolve's ``EvaluationResult`` shape as a plain dict: numeric
metrics, a string metric (``status``) and artifacts with feedback for the
next prompt. The candidate's search uses numpy's global generator unseeded.
"""

import importlib.util
import math


def f(x):
    return (x - 1.7) ** 2 + 0.3 * math.sin(5.0 * x)


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = float(module.search(f))
    value = f(x)
    if not math.isfinite(value):
        return {"metrics": {"combined_score": 0.0}, "artifacts": {"error": f"f({x}) is not finite"}}
    return {
        "metrics": {"combined_score": 1.0 / (1.0 + value + 0.3), "value": value, "status": "searched"},
        "artifacts": {"feedback": f"x = {x:.4f} gives f(x) = {value:.4f}; the minimum is near x = 1.77"},
    }
