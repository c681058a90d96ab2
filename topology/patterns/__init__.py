"""Topology builders: each returns a validated :class:`~topology.graph.Graph`
(or, for the AgentConductor loop, an object that drives several graphs)."""

from .basic import chain, debate, layered, star

__all__ = ["chain", "debate", "layered", "star"]
from .conductor import Conductor, ConductorResult, ConductorTurn

__all__ += ["Conductor", "ConductorResult", "ConductorTurn"]
