"""WR dynamic program, desirable sets, WD integer program and the network Pareto front.

Re-exports are resolved lazily, so importing the plain types (engine.profile does) never loads
PuLP or a solver.
"""

from importlib import import_module

_EXPORTS = {
    "Configuration": "types", "MicroConfig": "types",
    "desirable": "desirable", "desirable_set": "desirable",
    "NetworkFront": "front", "network_front": "front",
    "WDResult": "wd", "minimum_budget": "wd", "wd": "wd", "wd_problem": "wd",
    "canonical": "wr", "micro_front": "wr", "wr": "wr",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
