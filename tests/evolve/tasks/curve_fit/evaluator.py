"""Evaluator for the curve-fitting task (OpenEvolve's interface).

``evaluate_stage1`` checks three points cheaply; ``evaluate`` scores 41 points.
Fitness is ``combined_score = 1 / (1 + mse)`` against ``1.5 x^2 - 0.7 x + 0.3``.
"""

import importlib.util
import math


def target(x):
    return 1.5 * x * x - 0.7 * x + 0.3


def _load(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mse(program_path, xs):
    predictions = _load(program_path).predict(xs)
    mse = sum((p - target(x)) ** 2 for p, x in zip(predictions, xs)) / len(xs)
    if not math.isfinite(mse):
        raise ValueError(f"non-finite error {mse}")
    return mse


def evaluate_stage1(program_path):
    mse = _mse(program_path, [-1.0, 0.0, 1.0])
    return {"combined_score": 1.0 / (1.0 + mse)}


def evaluate(program_path):
    xs = [i / 20.0 - 1.0 for i in range(41)]
    mse = _mse(program_path, xs)
    return {"combined_score": 1.0 / (1.0 + mse), "mse": mse}
