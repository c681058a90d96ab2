"""Topology builders: each returns a validated :class:`~societas.topology.graph.Graph`
(the AgentConductor loop, which drives one graph per turn, is a class).

- ``chain``, ``star``, ``layered``, ``debate`` — the classic fixed topologies
- ``society_of_thought`` and behaviour counting — Societies of Thought (2601.10825)
- ``proposer_solver`` and its rewards — Dr. Zero (2601.07055)
- ``speaker_listeners``, agreement and early answering — REMUL (2602.16154)
- ``Conductor`` — AgentConductor (2602.17100)
"""

from .arithmetic import arithmetic_word_problem_task, verify_arithmetic
from .basic import chain, debate, layered, star
from .conductor import Conductor, ConductorResult, ConductorTurn
from .remul import (
    EarlyAnsweringResult,
    RemulOutcome,
    agreement_reward,
    cut_reasoning,
    early_answering_aoc,
    early_answering_curve,
    speaker_listeners,
)
from .selfplay import (
    ProposerSolverOutcome,
    difficulty_reward,
    format_score,
    parse_proposal,
    proposer_reward,
    proposer_solver,
)
from .society import DEFAULT_PERSONAS, Persona, society_of_thought
from .society_behaviours import (
    BehaviourClassifier,
    BehaviourCounts,
    LexicalBehaviourClassifier,
    LLMBehaviourClassifier,
    count_behaviours,
)

__all__ = [
    "chain",
    "debate",
    "layered",
    "star",
    "Conductor",
    "ConductorResult",
    "ConductorTurn",
    "EarlyAnsweringResult",
    "RemulOutcome",
    "agreement_reward",
    "cut_reasoning",
    "early_answering_aoc",
    "early_answering_curve",
    "speaker_listeners",
    "ProposerSolverOutcome",
    "arithmetic_word_problem_task",
    "difficulty_reward",
    "format_score",
    "parse_proposal",
    "proposer_reward",
    "proposer_solver",
    "verify_arithmetic",
    "DEFAULT_PERSONAS",
    "BehaviourClassifier",
    "BehaviourCounts",
    "LexicalBehaviourClassifier",
    "LLMBehaviourClassifier",
    "Persona",
    "count_behaviours",
    "society_of_thought",
]
