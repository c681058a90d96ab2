"""societas.marl.routing — learned routing over a :class:`societas.topology.Graph` of agents.

A routing environment where a team of agents holds the pieces of each task
and must get them to an agent that can solve it and on to the answerer,
paying for every message (:mod:`.env`; a vectorised torch path and the same
episode run by :class:`societas.topology.Runtime` with skill-profile FunctionLLM or
real LLM agents); GPTSwarm's edge-logit REINFORCE (:mod:`.gptswarm`); a
G-Designer-style task-conditioned graph policy, a GNN over the agents plus a
task node (:mod:`.gdesigner`); and :func:`train_routing`, which trains either
one, writes a run directory and returns the pruned :class:`societas.topology.Graph`
(``python -m societas.marl train routing ...``, see :mod:`.cli`); and
:class:`PolicyRouter`, which lets a trained policy route a graph's messages live
through the :mod:`societas.topology.routing` protocol (:mod:`.live`).
"""

from .env import (
    OPS,
    RoutingEnv,
    RoutingEnvConfig,
    RoutingEpisode,
    RoutingOutcome,
    RuntimeEvaluation,
    SkillProfile,
    Task,
    TaskBatch,
    parse_answer,
    resolve_device,
    run_runtime,
    skill_agents_llm,
    unit_draw,
)
from .gdesigner import (
    GATLayer,
    GCNLayer,
    GDesignerConfig,
    GDesignerRouter,
    normalized_adjacency,
)
from .gptswarm import (
    GPTSwarmConfig,
    GPTSwarmRouter,
    MovingAverageBaseline,
    RouterSample,
    reinforce_update,
    sample_edges,
)
from .live import (
    CHECKPOINT_KIND,
    POLICY_FILE,
    PolicyCheckpointError,
    PolicyDecision,
    PolicyRouter,
    load_policy,
    save_policy,
    task_type_from_text,
)
from .marl_env import NOBODY, RoutingMARLEnv
from .train import (
    RoutingConfigError,
    RoutingRunResult,
    RoutingTrainConfig,
    evaluate_routing,
    train_routing,
)

__all__ = [
    "CHECKPOINT_KIND",
    "NOBODY",
    "POLICY_FILE",
    "PolicyCheckpointError",
    "PolicyDecision",
    "PolicyRouter",
    "RoutingMARLEnv",
    "OPS",
    "GATLayer",
    "GCNLayer",
    "GDesignerConfig",
    "GDesignerRouter",
    "GPTSwarmConfig",
    "GPTSwarmRouter",
    "MovingAverageBaseline",
    "RouterSample",
    "RoutingConfigError",
    "RoutingEnv",
    "RoutingEnvConfig",
    "RoutingEpisode",
    "RoutingOutcome",
    "RoutingRunResult",
    "RoutingTrainConfig",
    "RuntimeEvaluation",
    "SkillProfile",
    "Task",
    "TaskBatch",
    "evaluate_routing",
    "load_policy",
    "normalized_adjacency",
    "parse_answer",
    "reinforce_update",
    "resolve_device",
    "run_runtime",
    "sample_edges",
    "save_policy",
    "skill_agents_llm",
    "task_type_from_text",
    "train_routing",
    "unit_draw",
]
