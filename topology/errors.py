"""Errors raised while reading, validating and parsing topologies.

Every error here is a :class:`SpecError`, itself a ``ValueError``, and names
the place of the problem as a field path (``nodes[2].llm``, ``layers[1][0].ref[0]``;
the empty string for the document as a whole), so that a bad file or a bad
LLM answer fails with a message a person can act on instead of a traceback.

AgentConductor's orchestrator is rewarded differently for each way its YAML
answer can fail (no YAML at all, a YAML syntax error, a schema violation, a
logically impossible topology), so those four failures are distinct classes
under :class:`TopologyParseError`, each with a stable ``kind`` string that a
reward function can key on.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "PARSE_ERROR_KINDS",
    "LogicInvalid",
    "NoYAMLFound",
    "SchemaInvalid",
    "SpecError",
    "TopologyParseError",
    "YAMLSyntaxError",
]


class SpecError(ValueError):
    """A topology specification is malformed or inconsistent.

    ``path`` is the field path of the problem (``""`` for the whole document)
    and ``message`` says what is wrong; ``str(err)`` reads
    ``"nodes[2].llm: unknown LLM 'big' (known: default)"``.
    """

    def __init__(self, path: str, message: str) -> None:
        # Both go to ValueError.args so that the error pickles (process pools)
        # and re-creates itself with the same arguments.
        super().__init__(path, message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(path={self.path!r}, message={self.message!r})"


class TopologyParseError(SpecError):
    """An LLM-written layered topology (AgentConductor YAML) could not be used.

    Subclasses distinguish the stage that failed; ``kind`` is a stable
    identifier of that stage for rewards and statistics.
    """

    kind: ClassVar[str] = "parse_error"


class NoYAMLFound(TopologyParseError):
    """The answer holds no YAML block and no ``layers:`` section."""

    kind: ClassVar[str] = "no_yaml"


class YAMLSyntaxError(TopologyParseError):
    """A YAML block was found but does not load (syntax error, plain text, too large or too deep)."""

    kind: ClassVar[str] = "yaml_syntax"


class SchemaInvalid(TopologyParseError):
    """The YAML loads but does not have the layered-topology shape (types, keys)."""

    kind: ClassVar[str] = "schema_invalid"


class LogicInvalid(TopologyParseError):
    """The topology is well-formed but impossible or wasteful (bad refs, unknown roles, dead agents)."""

    kind: ClassVar[str] = "logic_invalid"


PARSE_ERROR_KINDS: tuple[str, ...] = (
    NoYAMLFound.kind,
    YAMLSyntaxError.kind,
    SchemaInvalid.kind,
    LogicInvalid.kind,
)
"""The four parse-failure kinds, from the earliest stage to the latest."""
