"""Ray, for work that leaves one process: a running cluster, or a local instance.

:func:`connect_ray` is the one place where societas starts or joins Ray. It is
used by the evolve layer's Ray executor (``societas evolve run --executor ray``)
and by the training loop's rollout actors (``TrainConfig.rollout_workers``):

* with an ``address`` (``"HOST:PORT"`` of a head node started by ``ray start
  --head``, or ``"auto"``), or with ``RAY_ADDRESS`` set, it joins that cluster:
  the cluster's own resources count, so no ``num_cpus`` is passed, and every
  node must have this package installed (and bubblewrap, for sandboxed
  evaluations);
* otherwise it starts a local instance sized to ``local_cpus`` (a new one,
  even where ``ray start`` runs a cluster on this machine).

Ray is imported here, only when called: it is an optional extra.
"""

from __future__ import annotations

import os
import socket
from typing import Any

__all__ = ["ACTORS_ON_A_CLUSTER_HINT", "RAY_ADDRESS_ENV", "connect_ray", "import_ray", "joins_a_cluster"]

RAY_ADDRESS_ENV = "RAY_ADDRESS"

# Why actors made on a cluster this process joined can die before they run, and what to do.
# Measured with Ray 2.60: a driver whose authentication mode differs from the cluster's joins
# it and runs tasks, but the cluster cannot reach the driver and destroys each actor the driver
# makes ("The actor never ran - it was cancelled before it started running").
ACTORS_ON_A_CLUSTER_HINT = (
    "if the actors never ran (cancelled before they started), this driver and the cluster disagree "
    "on token authentication: the head and every driver need the same RAY_AUTH_MODE (Ray 2.59 and "
    "later turn token authentication on for clusters started with 'ray start', and for a local "
    "instance, whose ray.init leaves RAY_AUTH_MODE=token set in its process for good: join a "
    "cluster without it from a process that has not started a local Ray)"
)


def import_ray(needed_for: str) -> Any:
    """The ``ray`` module, or ImportError saying what needs it and how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            f"{needed_for} needs Ray, which is not installed; install the 'ray' extra: pip install 'societas[ray]'"
        ) from exc
    return ray


def _check_reachable(needed_for: str, address: str) -> None:
    """Fail at once where nothing listens at a ``HOST:PORT`` address (ray.init would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", a ray:// client address, ...: Ray resolves those itself
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=10):
            pass
    except OSError as exc:
        raise ConnectionError(
            f"{needed_for}: cannot join the Ray cluster at {address!r}: nothing answers there ({exc}). "
            f"Start its head with 'ray start --head' (it prints the address), or leave the address out "
            f"to run Ray here"
        ) from exc


def joins_a_cluster(address: str | None = None) -> bool:
    """Whether :func:`connect_ray` with this ``address`` joins a cluster (rather than starting Ray here)."""
    return bool(address or os.environ.get(RAY_ADDRESS_ENV))


def connect_ray(
    needed_for: str,
    *,
    address: str | None = None,
    local_cpus: int | None = None,
    log_to_driver: bool = True,
) -> tuple[Any, bool]:
    """``(ray, started)``: Ray joined or started for ``needed_for``; ``started`` is False when it was running already.

    A caller that got ``started=True`` owns the connection and calls
    ``ray.shutdown()`` when done: that stops a local instance, and only
    disconnects from a cluster (whose head keeps running).
    """
    ray = import_ray(needed_for)
    if ray.is_initialized():
        return ray, False
    address = address or os.environ.get(RAY_ADDRESS_ENV) or None
    if address:
        _check_reachable(needed_for, address)
        try:
            ray.init(address=address, log_to_driver=log_to_driver)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise ConnectionError(
                f"{needed_for}: cannot join the Ray cluster at {address!r}: {exc}. Start its head with "
                f"'ray start --head' (it prints the address), or leave the address out to run Ray here. "
                f"A cluster with token authentication (Ray 2.59 and later turn it on for clusters started "
                f"with 'ray start') also needs RAY_AUTH_MODE=token here and its token (ray get-auth-token)"
            ) from exc
        return ray, True
    # "local": a new instance here, even where a cluster started by 'ray start' (or a stale
    # record of one) is on this machine, which a bare ray.init() would try to join.
    kwargs: dict[str, Any] = {"address": "local", "include_dashboard": False, "log_to_driver": log_to_driver}
    if local_cpus is not None:
        kwargs["num_cpus"] = max(1, int(local_cpus))
    ray.init(**kwargs)
    return ray, True
