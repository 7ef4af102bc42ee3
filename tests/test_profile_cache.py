"""The SQLite profile cache (engine/gpu/cache.py is plain sqlite3: no GPU needed)."""

from __future__ import annotations

import sqlite3

import pytest

from engine.errors import EngineError
from engine.gpu.cache import ProfileCache
from engine.kernels import KernelKind, KernelSignature
from engine.profile import RTC_NOT_PROFILED
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


def test_a_graph_cached_without_cudnns_first_plan_is_measured_again(tmp_path):
    """A graph cached when cuDNN's first heuristic plan, a runtime-compiled one, was left out (what stock PyTorch
    runs) is not done without --include-rtc, so it is measured again; a first plan that was timed, or one left
    out under another rank, keeps it done; with --include-rtc it never had one left out."""
    cache = ProfileCache(tmp_path / "c.sqlite", "SYNTHETIC-GPU")
    plain, rtc = {"include_rtc": False}, {"include_rtc": True}
    first, *rest = sorted(synthetic_rows(SIG, [4]), key=lambda r: r["heuristic_rank"])
    assert first["heuristic_rank"] == 0
    left = {**first, "status": "skipped", "reason": RTC_NOT_PROFILED, "time_ms": float("nan")}
    cache.commit(SIG.key, 4, plain, [left, *rest], {})
    assert not cache.is_done(SIG.key, 4, plain)
    cache.commit(SIG.key, 4, rtc, [left, *rest], {})
    assert cache.is_done(SIG.key, 4, rtc)
    cache.commit(SIG.key, 4, plain, [first, *rest], {})
    assert cache.is_done(SIG.key, 4, plain)
    later = {**rest[0], "status": "skipped", "reason": RTC_NOT_PROFILED}
    cache.commit(SIG.key, 4, plain, [first, later, *rest[1:]], {})
    assert cache.is_done(SIG.key, 4, plain)


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
