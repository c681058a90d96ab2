"""societas.marl.games — exact, fast solvers on OpenSpiel games.

An OpenSpiel game string becomes a flattened tensor tree (:func:`load_game`);
CFR-family algorithms are three hooks run by one solver (:class:`CFRSolver`),
``B`` variants at once; NashConv and exploitability are exact, with a
vectorised best response (:func:`evaluate`); PSRO uses that best response as
its oracle and exact meta-game payoffs.
"""

from .algorithms import ALGORITHMS, algorithm_names, get_algorithm, register
from .cfr import CFRSolver, SolveResult, solve
from .evaluate import (
    BestResponse,
    Exploitability,
    best_response,
    evaluate,
    exploitability,
    nash_conv,
    policy_value,
)
from .hooks import Algorithm, HookContext, batch_param, regret_matching
from .metasolvers import (
    MetaSolver,
    get_meta_solver,
    meta_solver_names,
    register_meta_solver,
)
from .psro import PSROResult, run_psro
from .tree import (
    GameTree,
    GameTreeError,
    load_game,
    load_openspiel_game,
    resolve_device,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "BestResponse",
    "CFRSolver",
    "Exploitability",
    "GameTree",
    "GameTreeError",
    "HookContext",
    "SolveResult",
    "algorithm_names",
    "batch_param",
    "best_response",
    "evaluate",
    "exploitability",
    "get_algorithm",
    "load_game",
    "load_openspiel_game",
    "nash_conv",
    "policy_value",
    "register",
    "regret_matching",
    "resolve_device",
    "solve",
    "MetaSolver",
    "PSROResult",
    "get_meta_solver",
    "meta_solver_names",
    "register_meta_solver",
    "run_psro",
]
