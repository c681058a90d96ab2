"""Settings of the built-in discovery tasks: defaults, overridden by the task's
``settings.json`` and then by the run's ``task_settings.json`` next to the
candidate program (written by the controller from the config). Both files
are read with :func:`societas.agents.documents.load_json_file`, so a file
that is not UTF-8 JSON, or holds something other than an object, is refused
with a message naming it."""

from __future__ import annotations

import os
from typing import Any

from societas.agents.documents import DocumentError, load_json_file


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
            loaded = load_json_file(place)
            if not isinstance(loaded, dict):
                raise DocumentError(place, f"expected a JSON object of settings, got {type(loaded).__name__}")
            unknown = sorted(set(loaded) - set(defaults))
            if unknown:
                raise ValueError(
                    f"{place}: unknown {task} task setting(s) {unknown}; known: {sorted(defaults)}"
                )
            values.update({k: v for k, v in loaded.items() if v is not None})
    for key in positive:
        value = values[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{task} task setting {key} must be a whole number >= 1, got {value!r}")
    held_out = values.get("held_out_iterations")
    if held_out is None or held_out == 0:
        held_out = values["iterations"]
    if isinstance(held_out, bool) or not isinstance(held_out, int) or held_out < 1:
        raise ValueError(
            f"{task} task setting held_out_iterations must be a whole number >= 1, got {held_out!r}"
        )
    values["held_out_iterations"] = held_out
    if "validation_iterations" in values:
        # Selection is made at the horizon the results are reported at (default: the held-out one).
        validation = values.get("validation_iterations") or held_out
        if isinstance(validation, bool) or not isinstance(validation, int) or validation < 1:
            raise ValueError(
                f"{task} task setting validation_iterations must be a whole number >= 1, got {validation!r}"
            )
        values["validation_iterations"] = validation
    return values
