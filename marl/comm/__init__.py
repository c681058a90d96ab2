"""societas.marl.comm — neural communication in multi-agent RL.

Batched torch multi-agent environments with PettingZoo adapters
(:mod:`societas.marl.comm.envs`) and MAPPO/IPPO with learned communication modules.
"""

from societas.marl.comm.mappo import (
    MAPPO,
    MAPPOConfig,
    ValueNorm,
    compute_gae,
    ppo_policy_loss,
    ppo_value_loss,
)
from societas.marl.comm.modules import (
    COMM_MODULES,
    DIAL,
    CommFormer,
    CommModule,
    CommNet,
    CommOutput,
    GATComm,
    IC3Net,
    NoComm,
    TarMAC,
    comm_names,
    make_comm,
)
from societas.marl.comm.plots import plot_curves, plot_learning_curve
from societas.marl.comm.train import TrainResult, evaluate, load_policy, train_comm

__all__ = [
    "COMM_MODULES",
    "DIAL",
    "MAPPO",
    "CommFormer",
    "CommModule",
    "CommNet",
    "CommOutput",
    "GATComm",
    "IC3Net",
    "MAPPOConfig",
    "NoComm",
    "TarMAC",
    "TrainResult",
    "ValueNorm",
    "comm_names",
    "compute_gae",
    "evaluate",
    "load_policy",
    "make_comm",
    "plot_curves",
    "plot_learning_curve",
    "ppo_policy_loss",
    "ppo_value_loss",
    "train_comm",
]
