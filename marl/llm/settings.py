"""Validated settings of a training run: a recipe's options and the loop's :class:`TrainConfig`.

Every recipe's options are a :class:`RecipeConfig` (pydantic): documented
fields with their bounds, unknown names rejected, no silent conversions (a
count given as ``2.5``, a flag given as ``1``), frozen once built because a
recipe derives its graph and held-out set from them. :func:`validate_settings`
turns a mapping (a YAML section, a ``--recipe`` JSON object) into such a model
and a failure into one :class:`SettingsError` whose message names the field
path as the user wrote it: ``recipe.group_size: Input should be greater than
or equal to 2``, ``train.grpo.advantage: Input should be 'grpo', 'gdpo' or
'dr_grpo'``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from societas.topology.errors import SpecError, spec_error_from_validation, validation_error_text

__all__ = ["RecipeConfig", "SettingsError", "recipe_settings", "validate_settings"]

M = TypeVar("M", bound=BaseModel)
C = TypeVar("C", bound="RecipeConfig")


class SettingsError(SpecError):
    """Invalid recipe or loop settings; ``str()`` reads ``"recipe.group_size: what is wrong"``.

    ``given`` is the value given for the first bad field (its ``repr``, cut
    short; ``None`` when the problem is not one value, such as a missing field
    or two fields that disagree); :meth:`line` adds it to the message.
    """

    given: str | None = None
    _first_len: int = 0  # the length of the first problem's text at the start of ``message``

    def line(self) -> str:
        """``str(self)`` with the value given for the first bad field: ``recipe.steps: ... (got -3)``."""
        if self.given is None:
            return str(self)
        cut = self._first_len
        message = f"{self.message[:cut]} (got {self.given}){self.message[cut:]}"
        return f"{self.path}: {message}" if self.path else message


class RecipeConfig(BaseModel):
    """Base of every recipe's options (the ``recipe:`` section of a run's YAML)."""

    # strict: YAML and JSON give booleans and numbers their own types, so a mismatch is a mistake
    # (``correctness: 1``, ``group_size: 2.5``) rather than something to coerce.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def validate_settings(model: type[M], data: M | Mapping[str, Any] | None, section: str) -> M:
    """``data`` validated as ``model``; a failure raises :class:`SettingsError` naming ``section.field``.

    ``data`` may already be a ``model`` (returned as it is) or ``None`` (the defaults).
    """
    if isinstance(data, model):
        return data
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SettingsError(section, f"expected a mapping of options, got {type(data).__name__}")
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        err = spec_error_from_validation(exc, model, prefix=(section,), error_cls=SettingsError)
        _note_given(err, exc, model)
        raise err from None


def _note_given(err: SpecError, exc: ValidationError, model: type[BaseModel]) -> None:
    """Record on ``err`` the value given for the first bad field, when it is one plain value."""
    errors = exc.errors(include_url=False)
    if not errors or not isinstance(err, SettingsError):
        return
    first = errors[0]
    value = first.get("input")
    if first.get("type") in ("missing", "extra_forbidden") or not first.get("loc"):
        return
    if not isinstance(value, (str, int, float, bool, list, tuple)) and value is not None:
        return  # a mapping or an object: the field path says enough
    _, text = validation_error_text(first, model)
    if not err.message.startswith(text):
        return
    shown = repr(value)
    err.given = shown if len(shown) <= 60 else shown[:59] + "…"
    err._first_len = len(text)


def recipe_settings(model: type[C], settings: C | Mapping[str, Any] | None, options: Mapping[str, Any]) -> C:
    """A recipe's options: ``settings`` (a ``model``, a mapping or ``None``) with keyword ``options`` on top.

    What a recipe's constructor calls, so that ``Recipe(group_size=4)``,
    ``Recipe({"group_size": 4})`` and ``Recipe(config, group_size=4)`` all work.
    """
    if not options:
        return validate_settings(model, settings, "recipe")
    if isinstance(settings, BaseModel):
        base: Any = settings.model_dump()
    elif settings is None:
        base = {}
    elif isinstance(settings, Mapping):
        base = dict(settings)
    else:
        return validate_settings(model, settings, "recipe")  # reports the wrong type
    return validate_settings(model, {**base, **options}, "recipe")
