"""Settings of the built-in discovery tasks: defaults, overridden by the task's
``settings.json`` and then by the run's ``task_settings.json`` next to the
candidate program (written by the controller from the config)."""

from __future__ import annotations

import json
import os
from typing import Any


def load_task_settings(
    evaluator_file: str,
    program_path: str | None,
    defaults: dict[str, Any],
    task: str,
    positive: tuple[str, ...],
) -> dict[str, Any]:
    values = dict(defaults)
    places = [os.path.join(os.path.dirname(os.path.abspath(evaluator_file)), "settings.json")]
    if program_path is not None:
        places.append(os.path.join(os.path.dirname(os.path.abspath(program_path)), "task_settings.json"))
    for place in places:
        if os.path.exists(place):
            with open(place) as handle:
                loaded = json.load(handle)
            unknown = sorted(set(loaded) - set(defaults))
            if unknown:
                raise ValueError(
                    f"{place}: unknown {task} task setting(s) {unknown}; known: {sorted(defaults)}"
                )
            values.update({k: v for k, v in loaded.items() if v is not None})
    for key in positive:
        values[key] = int(values[key])
        if values[key] < 1:
            raise ValueError(f"{task} task setting {key} must be >= 1, got {values[key]}")
    values["held_out_iterations"] = int(values["held_out_iterations"] or values["iterations"])
    return values
