"""The SQLite profile cache (engine/gpu/cache.py is plain sqlite3: no GPU needed)."""

from __future__ import annotations

import sqlite3

import pytest

from engine.errors import EngineError
from engine.gpu.cache import ProfileCache
from engine.kernels import KernelKind, KernelSignature
from engine.testing.synthetic import synthetic_rows

SIG = KernelSignature(KernelKind.FORWARD, 8, 3, 8, 8, 4, 3, 3, 1, 1)


def test_resume_and_one_row_set_per_graph(tmp_path):
    cache = ProfileCache(tmp_path / "c.sqlite", "SYNTHETIC-GPU")
    heur, swept = {"engines": "heuristics"}, {"engines": "sweep"}
    rows = synthetic_rows(SIG, [4])
    cache.commit(SIG.key, 4, heur, rows, {})
    assert cache.is_done(SIG.key, 4, heur) and not cache.is_done(SIG.key, 4, swept)
    more = rows + [{**rows[0], "plan": "eng9", "engine_id": 9, "knobs": "{}", "heuristic_rank": -1}]
    cache.commit(SIG.key, 4, swept, more, {})
    # the graph now holds the sweep's rows, so the heuristics-only run must measure again
    assert cache.is_done(SIG.key, 4, swept) and not cache.is_done(SIG.key, 4, heur)
    got = cache.rows(SIG.key, 4)
    assert [r["plan"] for r in got][-1] == "eng9" and len(got) == len(more)
    cache.close()
    reopened = ProfileCache(tmp_path / "c.sqlite", "SYNTHETIC-GPU")
    assert reopened.is_done(SIG.key, 4, swept) and not reopened.is_done(SIG.key, 4, swept | {"repeats": 3})
    assert not ProfileCache(tmp_path / "c.sqlite", "OTHER-GPU").is_done(SIG.key, 4, swept)


def test_unusable_caches_are_one_line_engine_errors(tmp_path):
    """A file that is not SQLite, and a cache of another schema, are refused with a line saying what to do."""
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(EngineError, match="is not a usable SQLite cache .*move it away") as info:
        ProfileCache(junk, "SYNTHETIC-GPU")
    assert "\n" not in str(info.value)
    old = tmp_path / "old.sqlite"
    ProfileCache(old, "SYNTHETIC-GPU").close()
    db = sqlite3.connect(old)
    with db:
        db.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    db.close()
    with pytest.raises(EngineError, match="has schema '0', expected 1; move it away"):
        ProfileCache(old, "SYNTHETIC-GPU")
    with pytest.raises(EngineError, match="cannot open profile cache"):
        ProfileCache(junk / "sub" / "c.sqlite", "SYNTHETIC-GPU")
