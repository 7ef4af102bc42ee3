"""SQLite profile cache: commits after every (kernel, micro-batch) so an interrupted run resumes.

Keyed by the device (GPU model, driver, cuDNN, frontend), the kernel signature, the micro-batch
size and the plan, unlike mu-cuDNN's cache (string-built SQL, no lock, N in the key, filtered
before storage): parameterised SQL, a schema version, UNIQUE keys, transactions, WAL, and no
mini-batch N in the key so micro-batch results are reused across networks and mini-batch sizes.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from ..errors import EngineError
from ..fileio import short
from ..profile import COLUMNS, RTC_NOT_PROFILED

SCHEMA_VERSION = 1
_COLS = list(COLUMNS)


class ProfileCache:
    def __init__(self, path: str | Path, device_key: str):
        self.path, self.device_key = Path(path), device_key
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, check_same_thread=False)
        except (OSError, sqlite3.Error) as err:
            raise EngineError(
                f"cannot open profile cache {str(self.path)!r}: {err}; choose another with --cache"
            ) from None
        try:
            self._open()
        except EngineError:
            self.db.close()
            raise
        except sqlite3.Error as err:
            self.db.close()
            raise EngineError(
                f"profile cache {str(self.path)!r} is not a usable SQLite cache ({err}); move it away "
                f"to start a new one, or choose another with --cache"
            ) from None

    def _open(self) -> None:
        """WAL mode, the schema check and the tables; an existing cache of another schema is refused."""
        self.db.execute("PRAGMA journal_mode=WAL")
        with self.db:
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif str(row[0]) != str(SCHEMA_VERSION):
                raise EngineError(
                    f"profile cache {str(self.path)!r} has schema {short(row[0])}, expected "
                    f"{SCHEMA_VERSION}; move it away to start a new one"
                )
            cols = ", ".join(
                f"{c} {'INTEGER' if t is int else 'REAL' if t is float else 'TEXT'}" for c, t in COLUMNS.items()
            )
            self.db.execute(
                f"CREATE TABLE IF NOT EXISTS measurements (device TEXT NOT NULL, {cols}, "
                f"UNIQUE (device, signature, micro_batch, plan))"
            )
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS done (device TEXT NOT NULL, signature TEXT NOT NULL, "
                "micro_batch INTEGER NOT NULL, options TEXT NOT NULL, provenance TEXT, "
                "UNIQUE (device, signature, micro_batch, options))"
            )

    def is_done(self, key: str, b: int, options: dict) -> bool:
        """Measured under ``options``, and, without every runtime-compiled engine, with cuDNN's first heuristic
        plan timed even where it is one (engine.gpu.profiler.build_graph): a graph cached before that rule
        left it out, and with it what stock PyTorch runs, so it is measured again (once: caches of then also gave
        that reason to a first plan a precision's note filter excluded, which a new measurement labels right)."""
        with self._lock:
            done = (
                self.db.execute(
                    "SELECT 1 FROM done WHERE device=? AND signature=? AND micro_batch=? AND options=?",
                    (self.device_key, key, b, _opts(options)),
                ).fetchone()
                is not None
            )
            return done and (
                options.get("include_rtc")
                or self.db.execute(
                    "SELECT 1 FROM measurements WHERE device=? AND signature=? AND micro_batch=? "
                    "AND heuristic_rank=0 AND reason=?",
                    (self.device_key, key, b, RTC_NOT_PROFILED),
                ).fetchone()
                is None
            )

    def commit(self, key: str, b: int, options: dict, rows: list[dict], provenance: dict) -> None:
        """Store one graph's rows and mark it done, atomically."""
        marks = ", ".join("?" * (len(_COLS) + 1))
        with self._lock, self.db:
            for table in ("measurements", "done"):  # one set of rows per graph: the last options measured
                self.db.execute(
                    f"DELETE FROM {table} WHERE device=? AND signature=? AND micro_batch=?", (self.device_key, key, b)
                )
            self.db.executemany(
                f"INSERT INTO measurements (device, {', '.join(_COLS)}) VALUES ({marks})",
                [(self.device_key, *[r[c] for c in _COLS]) for r in rows],
            )
            self.db.execute(
                "INSERT OR REPLACE INTO done VALUES (?, ?, ?, ?, ?)",
                (self.device_key, key, b, _opts(options), json.dumps(provenance)),
            )

    def rows(self, key: str, b: int) -> list[dict]:
        with self._lock:
            cur = self.db.execute(
                f"SELECT {', '.join(_COLS)} FROM measurements WHERE device=? AND signature=? "
                f"AND micro_batch=? ORDER BY heuristic_rank < 0, heuristic_rank, plan",
                (self.device_key, key, b),
            )
            return [dict(zip(_COLS, r)) for r in cur.fetchall()]

    def close(self) -> None:
        self.db.close()


def _opts(options: dict) -> str:
    return json.dumps(options, sort_keys=True)
