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

from . import env

SCHEMA = """
CREATE TABLE IF NOT EXISTS kernels (
    key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    arch TEXT NOT NULL,
    cubin BLOB NOT NULL,
    meta TEXT NOT NULL,
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
    """One connection per process, shared by its threads under a lock."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else env.cache_path()
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        _refuse_if_shared_writable(self.path)
        self._lock = threading.Lock()
        self._conn = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            # A corrupt file is set aside, never silently deleted, and rebuilt.
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            os.replace(self.path, aside)
            warnings.warn(f"kernel cache {self.path} was unreadable ({exc}); moved to {aside} and rebuilt")
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60.0, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA busy_timeout=60000")
        conn.execute(SCHEMA)
        conn.execute("SELECT count(*) FROM kernels").fetchone()
        return conn

    def get(self, key: str) -> Entry | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT name, arch, cubin, meta, checksum FROM kernels WHERE key = ?", (key,)).fetchone()
            if row is None:
                return None
            name, arch, cubin, meta_json, checksum = row
            if _checksum(cubin, meta_json) != checksum:
                warnings.warn(f"kernel cache entry {name} ({key[:12]}) failed its checksum; recompiling")
                self._conn.execute("DELETE FROM kernels WHERE key = ?", (key,))
                return None
            return Entry(key, name, arch, bytes(cubin), json.loads(meta_json))

    def put(self, key: str, name: str, arch: str, cubin: bytes, meta: dict) -> None:
        meta_json = json.dumps(meta, sort_keys=True)
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, name, arch, cubin, meta_json, _checksum(cubin, meta_json), time.time()))

    def keys(self) -> list[str]:
        with self._lock:
            return [k for (k,) in self._conn.execute("SELECT key FROM kernels ORDER BY key")]

    def close(self) -> None:
        with self._lock:
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
