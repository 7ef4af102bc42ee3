"""How an error reads on the page: one line, shown as written."""

from __future__ import annotations

import html
import re

from engine.errors import EngineError

_MARKS = re.compile(r"([\\`*_\[\]~])")  # emphasis, code, links and strikethrough anywhere in a line
_LEADING = re.compile(r"^(\s*)([#>+\-=]|\d+[.)])")  # a heading, quote, list or rule at its start


def literal(text: str) -> str:
    """``text`` as Markdown that shows it literally: alerts and status lines render Markdown with raw HTML, and
    their messages quote what users typed and uploaded (a plan's network name, a file name), so an
    ``<img onerror=...>`` there ran in the page. HTML is escaped, then the marks Markdown reads in one line."""
    text = _MARKS.sub(r"\\\1", html.escape(str(text), quote=False))
    return _LEADING.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], text)


def describe_error(err: BaseException) -> str:
    """Engine errors carry their own message; others get their type."""
    if isinstance(err, EngineError):
        return str(err)
    return f"{type(err).__name__}: {err}"
