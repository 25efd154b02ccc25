"""The query index of a store: ``ROOT/index.sqlite``, derived from the directories.

The directories are the truth; the index is a cache. :meth:`EpisodeIndex.sync`
stats every episode directory and re-reads those whose ``episode.json`` or
``steps.jsonl`` changed (size or mtime) since they were indexed, adds new ones
and drops rows of deleted ones, so the index is never stale when queried. A
missing, unreadable or old-schema index is rebuilt; a read-only store gets an
in-memory index.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from farm.recording import format as F
from farm.recording.errors import RecordingError
from farm.recording.reader import Episode

log = logging.getLogger("farm.recording")

SCHEMA_VERSION = 1
_COLUMNS = (
    "episode_id",
    "env_id",
    "task",
    "kind",
    "seed",
    "job",
    "created",
    "steps",
    "return",
    "outcome",
    "complete",
    "duration_s",
    "end_reason",
    "error",
    "signature",
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY, env_id TEXT, task TEXT, kind TEXT, seed INTEGER, job TEXT,
    created TEXT, steps INTEGER, "return" REAL, outcome TEXT, complete INTEGER,
    duration_s REAL, end_reason TEXT, error TEXT, signature TEXT
);
CREATE INDEX IF NOT EXISTS episodes_created ON episodes (created);
PRAGMA user_version = {SCHEMA_VERSION};
"""


@dataclass
class EpisodeFilter:
    """Filters of ``farm episodes ls`` (``*`` globs in task/job; dates are ISO prefixes)."""

    task: str | None = None
    outcome: str | None = None
    job: str | None = None
    since: str | None = None
    until: str | None = None
    limit: int | None = None


def _signature(path: str) -> str | None:
    parts = []
    for name in (F.META_FILE, F.STEPS_FILE):
        try:
            st = os.stat(os.path.join(path, name))
        except FileNotFoundError:
            parts.append("-")
            continue
        parts.append(f"{st.st_size}:{st.st_mtime_ns}")
    return "|".join(parts)


def _glob(pattern: str) -> str:
    return pattern.replace("%", r"\%").replace("_", r"\_").replace("*", "%")


class EpisodeIndex:
    """SQLite index of the episode directories under ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.path = os.path.join(root, F.INDEX_FILE)
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        if os.path.isdir(self.root) and os.access(self.root, os.W_OK):
            try:
                db = sqlite3.connect(self.path, timeout=10.0)
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, SCHEMA_VERSION):
                    db.execute("DROP TABLE IF EXISTS episodes")
                db.executescript(_SCHEMA)
                return db
            except sqlite3.DatabaseError as e:
                log.warning("rebuilding unreadable index %s: %s", self.path, e)
                with contextlib.suppress(Exception):
                    db.close()
                with contextlib.suppress(OSError):
                    os.unlink(self.path)
                try:
                    db = sqlite3.connect(self.path, timeout=10.0)
                    db.executescript(_SCHEMA)
                    return db
                except sqlite3.DatabaseError:
                    pass
        db = sqlite3.connect(":memory:")
        db.executescript(_SCHEMA)
        return db

    def close(self) -> None:
        self._db.close()

    def sync(self) -> int:
        """Bring the index up to date with the directories; returns rows (re)indexed."""
        known = dict(self._db.execute("SELECT episode_id, signature FROM episodes").fetchall())
        seen: set[str] = set()
        changed = 0
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            entries = []
        rows: list[tuple[Any, ...]] = []
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False) or not F.valid_episode_id(entry.name):
                continue
            sig = _signature(entry.path)
            if sig == "-|-":
                continue  # not an episode directory
            seen.add(entry.name)
            if known.get(entry.name) == sig:
                continue
            rows.append(self._row(entry.name, entry.path, sig))
            changed += 1
        gone = [k for k in known if k not in seen]
        try:
            self._write(rows, gone)
        except sqlite3.Error as e:  # a full disk, a read-only file: query from memory
            log.warning("index %s cannot be updated (%s); using an in-memory index", self.path, e)
            self._db.close()
            self._db = sqlite3.connect(":memory:")
            self._db.executescript(_SCHEMA)
            rows = [
                self._row(n, os.path.join(self.root, n), _signature(os.path.join(self.root, n)))
                for n in sorted(seen)
            ]
            self._write(rows, [])
        return changed

    def _write(self, rows: list[tuple[Any, ...]], gone: list[str]) -> None:
        with self._db:
            if rows:
                marks = ",".join("?" * len(_COLUMNS))
                cols = ",".join(f'"{c}"' for c in _COLUMNS)
                self._db.executemany(
                    f"INSERT OR REPLACE INTO episodes ({cols}) VALUES ({marks})", rows
                )
            if gone:
                self._db.executemany(
                    "DELETE FROM episodes WHERE episode_id = ?", [(g,) for g in gone]
                )

    @staticmethod
    def _row(name: str, path: str, sig: str | None) -> tuple[Any, ...]:
        try:
            s = Episode(path).summary()
            error = None
        except RecordingError as e:
            s = {"episode_id": name, "outcome": "corrupt"}
            error = str(e)
        return (
            name,
            s.get("env_id"),
            s.get("task"),
            s.get("kind"),
            s.get("seed"),
            s.get("job"),
            s.get("created"),
            s.get("steps"),
            s.get("return"),
            s.get("outcome"),
            int(bool(s.get("complete"))),
            s.get("duration_s"),
            s.get("end_reason"),
            error,
            sig,
        )

    def query(self, flt: EpisodeFilter | None = None) -> list[dict[str, Any]]:
        """Indexed episodes matching ``flt``, oldest first (call :meth:`sync` before)."""
        flt = flt or EpisodeFilter()
        where, args = [], []
        if flt.task:
            where.append(r"(task LIKE ? ESCAPE '\' OR env_id LIKE ? ESCAPE '\')")
            args += [_glob(flt.task)] * 2
        if flt.outcome:
            where.append("outcome = ?")
            args.append(flt.outcome)
        if flt.job:
            where.append(r"job LIKE ? ESCAPE '\'")
            args.append(_glob(flt.job))
        if flt.since:
            where.append("created >= ?")
            args.append(flt.since)
        if flt.until:
            # an ISO date prefix "2024-05-01" includes that whole day
            where.append("substr(created, 1, length(?)) <= ?")
            args += [flt.until, flt.until]
        sql = "SELECT " + ",".join(f'"{c}"' for c in _COLUMNS[:-1]) + " FROM episodes"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created, episode_id"
        if flt.limit:
            sql += f" LIMIT {int(flt.limit)}"
        out = []
        for row in self._db.execute(sql, args):
            d = dict(zip(_COLUMNS[:-1], row, strict=True))
            d["complete"] = bool(d["complete"])
            d["path"] = os.path.join(self.root, d["episode_id"])
            out.append(d)
        return out
