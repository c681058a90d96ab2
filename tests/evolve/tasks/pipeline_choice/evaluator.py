"""Scores a stage choice by how many of the four stages match a hidden pipeline (no hint which)."""

import importlib.util

TARGET = {"reader": "parquet_reader", "scaler": "robust", "solver": "lbfgs", "writer": "yaml"}


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("program", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chosen = module.run()
    right = sum(chosen.get(stage) == option for stage, option in TARGET.items())
    return {
        "metrics": {"combined_score": right / len(TARGET), "right": right},
        "artifacts": {"feedback": f"{right} of {len(TARGET)} stages are right"},
    }
