"""compiled_cache.db: SQLite store of cubins (device code) and their JSON metadata.

Only device code and JSON are stored, never host native code, so a cache file can
at worst hold a wrong kernel, never run code in the host process. Cubins are stored
packed (cache_files.pack: about 16x smaller). Every entry carries a checksum over its
stored cubin and metadata; an entry that fails it, or does not unpack, is dropped and
counts as a miss. The key (kernels.cache_key) covers everything that changes
the binary, so a changed source, option, arch, NVRTC or header version is a new key.

A fleet shares caches: the writable one may be followed by read-only ones searched in
order (env.cache_search_path). Each file records which toolchains (package, CUTLASS,
NVRTC and header versions) wrote it; a read-only file none of whose toolchains is ours
is reported once and never searched, so a cache built by another version is never trusted.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from .. import env, trust
from . import cache_files, cache_repair
from .cache_maintenance import Maintenance
from .cache_winners import Winners
from ..trust import UnsafeCacheError, UntrustedPathError  # noqa: F401  (raised from here)


@dataclass(frozen=True)
class Entry:
    key: str
    name: str
    arch: str
    cubin: bytes
    meta: dict


def _writable(path: Path) -> bool:
    """Whether this process may write path (tests may monkeypatch it). A file or directory
    with no write bit (a shipped file, mode 0444) is read-only even to root, who may write
    anything: readers that opened it immutable rely on nobody rewriting it in place."""
    return os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)


class KernelCache(Winners, Maintenance):
    """One connection per process, shared by its threads under a lock.

    The file, its directory and where any symbolic link leads must be the user's (or
    root's) and writable by nobody else (trust.check_cache_location), else UnsafeCacheError.
    A database this process may not write (shipped read-only to serving nodes, or
    read_only=True) is opened read-only, immutable when it cannot be written and nobody
    rewrites it in place (cache_files.shipped_file); kernels compiled meanwhile
    live in an in-memory overlay for the life of the process. So do they, with one warning,
    once the disk refuses a write (full, a file size limit): the file is then read-only.
    A damaged file is copied aside once (<name>.corrupt-<ns>, listed in `moved_aside`)
    and started afresh.

    path=None: env.cache_search_path(), the first file writable (as above), the others
    read-only and searched after it (`shipped`); a missing one is skipped with a warning.
    journal="delete": a rollback journal instead of WAL (cache_ship writes files to ship).
    """

    def __init__(self, path: Path | str | None = None, read_only: bool | None = None,
                 shipped: tuple[Path, ...] = (), journal: str = "wal"):
        if path is None:
            path, *found = env.cache_search_path()
            shipped = shipped or tuple(found)
        self.path = Path(path)
        file_writable = not self.path.exists() or _writable(self.path)
        dir_writable = not self.path.parent.exists() or _writable(self.path.parent)
        if read_only is None:
            read_only = env.cache_read_only() or not file_writable or not dir_writable
        self.read_only = read_only
        # immutable (no locks, no change detection) only for a file nobody rewrites in place
        # (cache_files.shipped_file)
        self._immutable = read_only and not file_writable and cache_files.shipped_file(self.path)
        self._journal = journal
        if not read_only:
            trust.make_cache_dir(self.path.parent)
        self._real = trust.check_cache_location(self.path)
        self._lock = threading.Lock()
        self._overlay: dict[str, Entry] = {}
        self._overlay_winners: dict[str, tuple[dict, list]] = {}
        self._identity: tuple[int, int] | None = None
        self._stamped: set[str] = set()
        self._foreign: bool | None = None        # decided on first search (needs our toolchain)
        self.moved_aside: list[Path] = []         # where damaged files went (cache verify reports them)
        self._conn = self._open()
        self.asked = (self.path, *map(Path, shipped))     # what default_cache() compares with env
        opened = (_open_shipped(Path(p)) for p in shipped if Path(p) != self.path)
        self.shipped: tuple[KernelCache, ...] = tuple(c for c in opened if c is not None)

    @property
    def readable(self) -> bool:
        """Whether the file opened as a database (a read-only one that did not is served from memory)."""
        return self._conn is not None

    @property
    def search_id(self) -> tuple[str, ...]:
        """The files this cache searches, in order (what a kernel found through it depends on)."""
        return (str(self.path), *(str(c.path) for c in self.shipped))

    # -- opening, and recovering from a damaged or replaced file ---------------------------

    def _open(self) -> sqlite3.Connection | None:
        # never set aside, nor write into, a file not ours: at the first open, and at a
        # reopen after the file at our path was replaced
        cache_files.check_recognised(self._real)
        if self.read_only:
            return self._open_read_only()
        # The file we are about to open: if it is damaged, set aside that one and no other
        # (another opener may have set it aside and started a fresh one meanwhile).
        self._identity = trust.file_identity(self._real)
        try:
            return self._connect()
        except sqlite3.OperationalError as exc:
            if not cache_repair.is_write_refused(exc):
                raise  # locked past the timeout, or unwritable: never a reason to set the file aside
            self._refused(exc)          # a full disk: no room for the -shm, but it can still be read
            return self._open_read_only()
        except sqlite3.DatabaseError as exc:
            self._set_aside(exc)
            return self._connect()

    def _open_read_only(self) -> sqlite3.Connection | None:
        if not self._real.exists() or self._real.stat().st_size == 0:
            return None     # nothing in it yet (a file just created, or a full disk's): nothing to serve
        try:
            return self._connect_read_only("?mode=ro&immutable=1" if self._immutable else "?mode=ro")
        except sqlite3.DatabaseError as exc:
            failed = exc
        if cache_repair.is_write_refused(failed):
            # No room to size the -shm (a full disk): SQLite reads a WAL file with its
            # shared memory read-only (readonly_shm) as safely, keeping the index in the heap.
            try:
                return self._connect_read_only("?mode=ro&readonly_shm=1")
            except sqlite3.DatabaseError as exc:
                failed = exc
        warnings.warn(f"kernel cache {self.path} (opened read-only) is unreadable ({failed}): nothing is served "
                      "from it, and kernels compiled now stay in memory")
        return None

    def _connect_read_only(self, mode: str) -> sqlite3.Connection:
        conn = sqlite3.connect(self._real.as_uri() + mode, uri=True, timeout=60.0,
                               check_same_thread=False, isolation_level=None)
        try:
            conn.execute("SELECT count(*) FROM kernels").fetchone()
        except BaseException:
            conn.close()   # else the next open in this process inherits its failed shared memory
            raise
        self._identity = trust.file_identity(self._real)
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._real, timeout=60.0, check_same_thread=False, isolation_level=None)
        # Switching to WAL takes an exclusive lock and SQLite may answer "locked" without
        # waiting when several processes open a new file at once: retry that, it is no error.
        deadline = time.monotonic() + 60.0
        while True:
            try:
                conn.execute("PRAGMA busy_timeout=60000")
                conn.execute(f"PRAGMA journal_mode={self._journal}")
                conn.executescript(cache_files.SCHEMA)
                conn.execute("SELECT count(*) FROM kernels").fetchone()
                self._identity = trust.file_identity(self._real)
                return conn
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    conn.close()
                    raise
                time.sleep(0.05)
            except sqlite3.DatabaseError:
                conn.close()
                raise

    def _set_aside(self, exc: Exception) -> None:
        """Move a damaged file (and its WAL) aside for inspection, never delete it; warn once."""
        aside = cache_repair.move_aside(self._real, self._identity)
        self._identity = None
        if aside is None:
            warnings.warn(f"kernel cache {self.path} is damaged, unreadable ({exc}); another process "
                          "set it aside and started a fresh cache", stacklevel=4)
            return
        self.moved_aside.append(aside)
        warnings.warn(f"kernel cache {self.path} is damaged, unreadable ({exc}); moved it to {aside} "
                      "and started a fresh cache", stacklevel=4)

    def _refused(self, exc: Exception) -> None:
        """The disk refused a write (full, a file size limit): read-only from now on, new
        kernels kept in memory, so hits still serve and a compiled kernel still runs; warn once."""
        self.read_only = True
        if self._foreign is None:
            self._foreign = False   # still the cache this process writes, only full: trusted as before
        warnings.warn(f"kernel cache {self.path} cannot be written ({exc}; is the disk full?): serving it "
                      "read-only, kernels compiled now are kept in memory", stacklevel=4)

    def _write(self, run) -> bool:
        """run(connection) to change the file, with the lock held; False where the file is
        read-only, or the disk refused the write (then read-only from now on)."""
        if self.read_only:
            return False
        try:
            self._query(run)
            return True
        except sqlite3.OperationalError as exc:
            if not cache_repair.is_write_refused(exc):
                raise
            self._refused(exc)
            return False

    def _replaced(self) -> bool:
        """Whether the file we opened is no longer the one at our path (set aside elsewhere)."""
        return self._identity is not None and trust.file_identity(self._real) != self._identity

    def _query(self, run, default=None):
        """run(connection) with the lock held; a damaged file is set aside once and run
        again on a fresh one, a file another process set aside is followed to its successor."""
        if self._conn is None:
            return default
        try:
            return run(self._conn)
        except sqlite3.DatabaseError as exc:
            replaced = self._replaced()
            if not replaced and not cache_repair.is_corruption(exc):
                raise
            if replaced or self.read_only:
                self._conn.close()
                self._conn = self._open() if replaced else None
                if not replaced:
                    warnings.warn(f"read-only kernel cache {self.path} is damaged ({exc}); compiling into memory",
                                  stacklevel=3)
            else:
                self._reset(exc)
        return default if self._conn is None else run(self._conn)

    def _reset(self, exc: Exception) -> None:
        try:
            aside = cache_repair.empty_in_place(self._conn, self._real, cache_files.SCHEMA)
        except sqlite3.DatabaseError:
            self._conn.close()                # too damaged to rewrite: set it aside whole
            self._set_aside(exc)
            self._conn = self._connect()
            return
        self.moved_aside.append(aside)
        warnings.warn(f"kernel cache {self.path} is damaged, unreadable ({exc}); copied it to {aside} "
                      "and started a fresh cache", stacklevel=4)

    # -- kernels --------------------------------------------------------------------------

    def get(self, key: str) -> Entry | None:
        """The entry for key: this file (or its overlay), else the first shipped file holding it."""
        for cache in (self, *self.shipped):
            entry = cache._get(key)
            if entry is not None:
                return entry
        return None

    def trusted(self) -> bool:
        """Whether this file may be searched: writable, unstamped (older writers; keys still
        guard every entry), or stamped by our toolchain among others. A read-only file
        stamped only by other versions is reported once and never searched."""
        if self._foreign is None:
            self._foreign = self.read_only and cache_files.foreign_to_us(self)
        return not self._foreign

    def _get(self, key: str) -> Entry | None:
        trusted = self.trusted()      # before the lock: deciding reads the file's stamps
        with self._lock:
            if key in self._overlay:  # compiled in this process: found whatever the file is
                return self._overlay[key]
            row = None if not trusted else self._query(lambda c: c.execute(
                "SELECT name, arch, cubin, meta, checksum FROM kernels WHERE key = ?", (key,)).fetchone())
            if row is None:
                return None
            name, arch, stored, meta_json, checksum = row
            cubin = cache_files.intact(stored, meta_json, checksum)
            if cubin is None:
                warnings.warn(f"kernel cache entry {name} ({key[:12]}) failed its checksum or does not "
                              f"unpack; recompiling")
                # only the row read here: another process may have written a good one since
                self._write(lambda c: c.execute("DELETE FROM kernels WHERE key = ? AND checksum = ?", (key, checksum)))
                return None
            return Entry(key, name, arch, cubin, json.loads(meta_json))

    def put(self, key: str, name: str, arch: str, cubin: bytes, meta: dict) -> None:
        meta_json = json.dumps(meta, sort_keys=True)
        stored = cache_files.pack(cubin)
        with self._lock:
            if not self._write(lambda c: c.execute(
                    "INSERT OR REPLACE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (key, name, arch, stored, meta_json, cache_files.checksum(stored, meta_json), time.time()))):
                self._overlay[key] = Entry(key, name, arch, cubin, json.loads(meta_json))
                return
            toolchain = meta.get("toolchain")
            if toolchain and toolchain not in self._stamped:   # once per process and toolchain
                self._write(lambda c: c.execute("INSERT OR IGNORE INTO toolchains (identity, created) "
                                                "VALUES (?, ?)", (toolchain, time.time())))
                self._stamped.add(toolchain)

    def toolchains(self) -> list[str]:
        """The toolchains that wrote this file's kernels (empty: written before files were stamped)."""
        with self._lock:
            return self._query(lambda c: cache_files.column(c, "toolchains", "identity", "created"), [])

    def configs(self, arch: str, toolchains: tuple[str, ...]) -> list[dict]:
        """The JSON descriptions of the kernels for arch that these toolchains built, in every file searched."""
        found = [e.meta for e in self._overlay.values() if e.arch == arch]
        for cache in (self, *self.shipped):
            if cache.trusted():
                with cache._lock:
                    found += [json.loads(meta) for meta in cache._query(lambda c: [row[0] for row in c.execute(
                        "SELECT meta FROM kernels WHERE arch = ?", (arch,))], [])]
        return [meta["config"] for meta in found if meta.get("toolchain") in toolchains and meta.get("config")]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        for cache in self.shipped:
            cache.close()


def _open_shipped(path: Path) -> KernelCache | None:
    """A read-only file to search after the writable one; a missing one is skipped (a node
    without the fleet's file still runs, compiling what it needs), with a warning."""
    if not path.is_file():
        warnings.warn(f"shipped kernel cache {path} (CUTLASS_SPARSE_CACHE) does not exist; not searched",
                      stacklevel=4)
        return None
    try:
        return KernelCache(path, read_only=True)
    except cache_files.NotACacheError as exc:   # a failed download, say: nothing to serve, nothing to protect
        warnings.warn(f"shipped kernel cache {path} (CUTLASS_SPARSE_CACHE) is not searched: {exc}", stacklevel=4)
        return None


_default: KernelCache | None = None
_default_lock = threading.Lock()


def default_cache() -> KernelCache:
    """The process-wide cache at env.cache_search_path() (re-opened if those paths change)."""
    global _default
    with _default_lock:
        paths = env.cache_search_path()
        if _default is None or _default.asked != paths:
            _default = KernelCache()
        return _default
