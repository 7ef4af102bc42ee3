"""How an error reads on the page: one line."""

from __future__ import annotations

from engine.errors import EngineError


def describe_error(err: BaseException) -> str:
    """Engine errors carry their own message; others get their type."""
    if isinstance(err, EngineError):
        return str(err)
    return f"{type(err).__name__}: {err}"
