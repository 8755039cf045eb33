"""compiled_cache.db: SQLite store of cubins (device code) and their JSON metadata.

Only device code and JSON are stored, never host native code, so a cache file can
at worst hold a wrong kernel, never run code in the host process. Every entry
carries a checksum over its cubin and metadata; an entry that fails it is dropped
and counts as a miss. The key (kernels.cache_key) covers everything that changes
the binary, so a changed source, option, arch, NVRTC or header version is a new key.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import env

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    arch TEXT NOT NULL,
    cubin BLOB NOT NULL,
    meta TEXT NOT NULL,
    checksum TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS winners (
    signature TEXT PRIMARY KEY,
    choice TEXT NOT NULL,
    table_json TEXT NOT NULL,
    checksum TEXT NOT NULL,
    created REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Entry:
    key: str
    name: str
    arch: str
    cubin: bytes
    meta: dict


def _checksum(cubin: bytes, meta_json: str) -> str:
    return hashlib.sha256(cubin + b"\0" + meta_json.encode()).hexdigest()


class UnsafeCacheError(PermissionError):
    pass


def _refuse_if_shared_writable(path: Path) -> None:
    # A cache others can write is a cache others can fill with kernels we then run.
    for target in (path, path.parent):
        if target.exists() and target.stat().st_mode & stat.S_IWOTH:
            raise UnsafeCacheError(
                f"refusing to use kernel cache {path}: {target} is writable by other users; "
                f"run 'chmod o-w {target}' or point CUTLASS_SPARSE_CACHE elsewhere")


class KernelCache:
    """One connection per process, shared by its threads under a lock.

    A database this process may not write (shipped read-only to serving nodes, or
    read_only=True) is opened read-only; kernels compiled meanwhile live in an in-memory
    overlay for the life of the process.
    """

    def __init__(self, path: Path | str | None = None, read_only: bool | None = None):
        self.path = Path(path) if path is not None else env.cache_path()
        if read_only is None:
            read_only = env.cache_read_only() or (
                self.path.exists() and not os.access(self.path, os.W_OK)) or (
                self.path.parent.exists() and not os.access(self.path.parent, os.W_OK))
        self.read_only = read_only
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        _refuse_if_shared_writable(self.path)
        self._lock = threading.Lock()
        self._overlay: dict[str, Entry] = {}
        self._overlay_winners: dict[str, tuple[dict, list]] = {}
        self._conn = self._open()

    def _open(self) -> sqlite3.Connection | None:
        if self.read_only:
            if not self.path.exists():
                return None
            try:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=60.0,
                                       check_same_thread=False, isolation_level=None)
                conn.execute("SELECT count(*) FROM kernels").fetchone()
                return conn
            except sqlite3.DatabaseError as exc:
                warnings.warn(f"read-only kernel cache {self.path} is unreadable ({exc}); compiling into memory")
                return None
        try:
            return self._connect()
        except sqlite3.OperationalError:
            raise  # locked past the timeout, or unwritable: never a reason to set the file aside
        except sqlite3.DatabaseError as exc:
            # A corrupt file is set aside, never silently deleted, and rebuilt.
            aside = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
            try:
                os.replace(self.path, aside)
            except FileNotFoundError:
                pass  # another process set it aside first
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            warnings.warn(f"kernel cache {self.path} was unreadable ({exc}); moved to {aside} and rebuilt")
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
        # Switching to WAL takes an exclusive lock and SQLite may answer "locked" without
        # waiting when several processes open a new file at once: retry that, it is no error.
        deadline = time.monotonic() + 60.0
        while True:
            try:
                conn.execute("PRAGMA busy_timeout=60000")
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(SCHEMA)
                conn.execute("SELECT count(*) FROM kernels").fetchone()
                return conn
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.05)

    def get(self, key: str) -> Entry | None:
        with self._lock:
            if key in self._overlay:
                return self._overlay[key]
            if self._conn is None:
                return None
            row = self._conn.execute(
                "SELECT name, arch, cubin, meta, checksum FROM kernels WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            name, arch, cubin, meta_json, checksum = row
            if _checksum(cubin, meta_json) != checksum:
                warnings.warn(f"kernel cache entry {name} ({key[:12]}) failed its checksum; recompiling")
                if not self.read_only:
                    self._conn.execute("DELETE FROM kernels WHERE key = ?", (key,))
                return None
            return Entry(key, name, arch, bytes(cubin), json.loads(meta_json))

    def put(self, key: str, name: str, arch: str, cubin: bytes, meta: dict) -> None:
        meta_json = json.dumps(meta, sort_keys=True)
        with self._lock:
            if self.read_only:
                self._overlay[key] = Entry(key, name, arch, cubin, json.loads(meta_json))
                return
            self._conn.execute(
                "INSERT OR REPLACE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, name, arch, cubin, meta_json, _checksum(cubin, meta_json), time.time()))

    # -- profiler winners: signature (JSON) -> choice (JSON) and the measured table ---------

    def get_winner(self, signature: str) -> tuple[dict, list] | None:
        with self._lock:
            if signature in self._overlay_winners:
                return self._overlay_winners[signature]
            if self._conn is None or not self._has_winners():
                return None
            row = self._conn.execute("SELECT choice, table_json, checksum FROM winners WHERE signature = ?",
                                     (signature,)).fetchone()
        if row is None:
            return None
        choice, table, checksum = row
        if _checksum(choice.encode(), signature + table) != checksum:
            warnings.warn(f"profiler record for {signature[:60]} failed its checksum; ignored")
            return None
        return json.loads(choice), json.loads(table)

    def put_winner(self, signature: str, choice: dict, table: list) -> None:
        choice_json, table_json = json.dumps(choice, sort_keys=True), json.dumps(table)
        with self._lock:
            if self.read_only:
                self._overlay_winners[signature] = (json.loads(choice_json), json.loads(table_json))
                return
            self._conn.execute(
                "INSERT OR REPLACE INTO winners (signature, choice, table_json, checksum, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (signature, choice_json, table_json, _checksum(choice_json.encode(), signature + table_json),
                 time.time()))

    def winners(self) -> list[tuple[str, dict]]:
        with self._lock:
            if self._conn is None or not self._has_winners():
                return []
            rows = self._conn.execute("SELECT signature, choice FROM winners ORDER BY signature").fetchall()
        return [(sig, json.loads(choice)) for sig, choice in rows]

    def _has_winners(self) -> bool:
        # A read-only file written by an older version may lack the table.
        return self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'winners'").fetchone() is not None

    def rows(self):
        """(key, name, arch, bytes, checksum ok) for every stored entry."""
        with self._lock:
            if self._conn is None:
                return []
            return [(key, name, arch, len(cubin), _checksum(cubin, meta) == checksum)
                    for key, name, arch, cubin, meta, checksum in self._conn.execute(
                        "SELECT key, name, arch, cubin, meta, checksum FROM kernels ORDER BY name, arch")]

    def keys(self) -> list[str]:
        return [row[0] for row in self.rows()]

    def verify(self) -> list[str]:
        """Drop entries whose checksum fails; return their keys."""
        bad = [key for key, _, _, _, ok in self.rows() if not ok]
        if bad and not self.read_only:
            with self._lock:
                self._conn.executemany("DELETE FROM kernels WHERE key = ?", [(k,) for k in bad])
        return bad

    def clear(self) -> int:
        """Remove every kernel and profiler record; returns how many kernels."""
        self._require_writable("clear")
        with self._lock:
            self._conn.execute("DELETE FROM winners")
            return self._conn.execute("DELETE FROM kernels").rowcount

    def merge_from(self, other: Path | str) -> int:
        """Copy every intact entry of another cache file that this one lacks; returns how many."""
        self._require_writable("merge into")
        source = KernelCache(other, read_only=True)
        added = 0
        with source._lock:
            rows = [] if source._conn is None else source._conn.execute(
                "SELECT key, name, arch, cubin, meta, checksum, created FROM kernels").fetchall()
        with self._lock:
            for key, name, arch, cubin, meta, checksum, created in rows:
                if _checksum(cubin, meta) != checksum:
                    warnings.warn(f"{other}: entry {name} ({key[:12]}) failed its checksum; not merged")
                    continue
                cursor = self._conn.execute(
                    "INSERT OR IGNORE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)", (key, name, arch, cubin, meta, checksum, created))
                added += cursor.rowcount
            for signature, choice in source.winners():
                record = source.get_winner(signature)
                if record is not None and self._conn.execute(
                        "SELECT 1 FROM winners WHERE signature = ?", (signature,)).fetchone() is None:
                    choice_json, table_json = json.dumps(record[0], sort_keys=True), json.dumps(record[1])
                    self._conn.execute(
                        "INSERT INTO winners (signature, choice, table_json, checksum, created) VALUES (?, ?, ?, ?, ?)",
                        (signature, choice_json, table_json,
                         _checksum(choice_json.encode(), signature + table_json), time.time()))
        source.close()
        return added

    def _require_writable(self, what: str) -> None:
        if self.read_only or self._conn is None:
            raise PermissionError(f"cannot {what} read-only kernel cache {self.path}")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()


_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache at env.cache_path() (re-opened if that path changes)."""
    global _default
    with _default_lock:
        if _default is None or _default.path != env.cache_path():
            _default = KernelCache()
        return _default
