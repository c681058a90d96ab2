"""Function nodes for the durable-run tests: they log each execution, and one kills its own process once."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def step(ctx):
    with Path(os.environ["SOCIETAS_TEST_LOG"]).open("a") as f:
        f.write(ctx.node + "\n")
    marker = Path(os.environ["SOCIETAS_TEST_LOG"] + ".killed")
    if ctx.node == os.environ.get("SOCIETAS_TEST_KILL_AT") and not marker.exists():
        marker.write_text("x")
        os.kill(os.getpid(), signal.SIGKILL)
    return f"{ctx.node}({','.join(ctx.inputs.values())})"
