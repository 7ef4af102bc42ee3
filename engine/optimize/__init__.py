"""WR dynamic program, desirable sets, WD integer program and the network Pareto front."""

from ..configuration import Configuration, MicroConfig
from .desirable import desirable, desirable_set
from .front import NetworkFront, network_front
from .wd import WDResult, minimum_budget, wd, wd_problem
from .wr import canonical, micro_front, wr

__all__ = [
    "Configuration",
    "MicroConfig",
    "NetworkFront",
    "WDResult",
    "canonical",
    "desirable",
    "desirable_set",
    "micro_front",
    "minimum_budget",
    "network_front",
    "wd",
    "wd_problem",
    "wr",
]
