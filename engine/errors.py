"""Exceptions with messages meant for users: each names the offending input."""


class EngineError(Exception):
    """Base class; the CLI prints ``str(err)`` on one line and exits non-zero."""


class UnknownNetworkError(EngineError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else "unknown network"


class BudgetError(EngineError, ValueError):
    """A workspace budget that cannot be parsed or cannot be met."""


class InfeasibleBudgetError(BudgetError):
    """The budget is below the smallest workspace any configuration needs; ``minimum`` says how much is."""

    def __init__(self, message: str, minimum: int):
        super().__init__(message)
        self.minimum = minimum


class ProfileFormatError(EngineError, ValueError):
    pass


class PlanFormatError(EngineError, ValueError):
    pass


class PolicyError(EngineError, ValueError):
    """An unknown batch-size policy, a bad micro-batch size list, or a mini-batch size out of range."""


class SpecError(EngineError, ValueError):
    """A user network spec (JSON/YAML) is malformed."""


class ModelImportError(EngineError, ValueError):
    """A PyTorch model that cannot be imported as a Network faithfully, or cannot be loaded."""


class UntrustedModelError(ModelImportError):
    """A ``package.module:callable`` named by data (a file, an upload, a page), not by the user: not imported."""

    def __init__(self, message: str, source: str):
        super().__init__(message)
        self.source = source


class GPUUnavailableError(EngineError, RuntimeError):
    pass


class MemoryRuntimeError(EngineError, ValueError):
    """A memory plan the PyTorch runtime cannot execute on a model: a mismatch, or a part it cannot run."""


class ArgumentError(EngineError, TypeError):
    """A Python API called with a keyword it does not take, or too many or too few arguments."""


def nearest(key: str, names) -> str | None:
    """The name closest to a misspelt ``key`` (``budgte`` -> ``budget``), or None."""
    import difflib

    near = difflib.get_close_matches(key, list(names), n=1)
    return near[0] if near else None


def check_call(function, signature, args: tuple, kwargs: dict, options=()) -> None:
    """Raise ArgumentError unless ``args``/``kwargs`` bind to ``signature`` (an ``inspect.Signature``), naming
    the nearest keyword for a misspelt one (``budgte`` -> ``budget``); ``options`` are further keywords taken."""
    params = signature.parameters
    named = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    for key in kwargs:
        if key not in params and key not in options:
            near = nearest(key, [*named, *options])
            hint = f" (did you mean {near!r}?)" if near else f"; it takes {', '.join([*named, *options])}"
            raise ArgumentError(f"{function}() takes no keyword {key!r}{hint}")
    try:
        signature.bind(*args, **{k: v for k, v in kwargs.items() if k in params})
    except TypeError as err:
        raise ArgumentError(f"{function}(): {err}") from None
