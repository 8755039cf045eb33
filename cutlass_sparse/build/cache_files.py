"""What a compiled_cache.db file holds, read without a KernelCache: how a cubin is stored
(packed), the checksum of an entry, whether a file is a shipped (rollback-journal) one, its
tables, whose toolchains stamped it, and the insert that merging uses."""
from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import warnings
import zlib
from pathlib import Path

from .. import env, trust

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
);
CREATE TABLE IF NOT EXISTS toolchains (
    identity TEXT PRIMARY KEY,
    created REAL NOT NULL
)
"""


SQLITE_HEADER = b"SQLite format 3\x00"


class NotACacheError(trust.UntrustedPathError):
    """A file at the cache's path that is not one of ours (not SQLite, or another program's
    database): refused and left exactly as it is. A damaged cache of ours is set aside instead."""

    def __init__(self, path: Path, what: str):
        super().__init__(path, f"is not a cutlass-sparse kernel cache ({what})",
                         "point CUTLASS_SPARSE_CACHE (or --path) at another file; this one is left as it is")


OUR_TABLES = frozenset({"kernels", "winners", "toolchains"})


def check_recognised(path: Path) -> None:
    """Raise NotACacheError for a file that is not a cache of ours: one that does not start as
    an SQLite database (an all-zero header is a cache of ours damaged, and is set aside
    instead), or a database whose tables are all another program's. Read through an
    immutable connection, which writes nothing: no -wal checkpointed into the file, no -shm
    made beside it. Absent, empty and unreadable files pass: opening them decides."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError):
        return
    if not head.strip(b"\0"):
        return
    if head != SQLITE_HEADER:
        raise NotACacheError(path, "it does not start as an SQLite database")
    tables = _tables(path, "?mode=ro&immutable=1")
    wal = Path(f"{path}-wal")
    if tables == set() and wal.exists() and wal.stat().st_size:
        # what it holds may be in its WAL alone (a writer that has not checkpointed): read it
        # read-only, which never checkpoints (at most it makes the -shm index a WAL reader needs)
        tables = _tables(path, "?mode=ro")
    if tables and not tables & OUR_TABLES:
        raise NotACacheError(path, f"a database with the tables {', '.join(sorted(tables))}")


def _tables(path: Path, mode: str) -> set[str] | None:
    """The tables of the database at path, None where it cannot be read (damaged: a cache of
    ours is set aside when opened)."""
    try:
        conn = sqlite3.connect(Path(path).absolute().as_uri() + mode, uri=True, timeout=10.0)
        try:
            return {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return None


# A stored cubin is zlib-packed behind this tag (cache format 3). An sm90 cubin is about 3.6 MB,
# 3.2 MB of it the names of CuTe's static constexpr members that -default-device makes
# device globals: packed, about 16x smaller (0.23 MB; an sm80 cubin 8x), unpacked in about 4 ms.
PACKED = b"CSZ1"
UNPACKED_LIMIT = 64 << 20   # 18x the largest cubin here: more is a damaged or hostile entry


def pack(cubin: bytes) -> bytes:
    return PACKED + zlib.compress(cubin, 9)


def unpack(stored: bytes) -> bytes | None:
    """The cubin a stored blob holds (a blob without the tag is one as it was written); None
    for a blob that does not unpack within UNPACKED_LIMIT."""
    stored = bytes(stored)
    if not stored.startswith(PACKED):
        return stored
    inflater = zlib.decompressobj()
    try:
        cubin = inflater.decompress(stored[len(PACKED):], UNPACKED_LIMIT)
    except zlib.error:
        return None
    whole = inflater.eof and not inflater.unconsumed_tail and not inflater.unused_data
    return cubin if whole else None


def intact(stored: bytes, meta_json: str, stored_checksum: str) -> bytes | None:
    """The cubin of an entry whose checksum holds and whose blob unpacks; None otherwise."""
    return unpack(stored) if checksum(stored, meta_json) == stored_checksum else None


def checksum(cubin: bytes, meta_json: str) -> str:
    return hashlib.sha256(cubin + b"\0" + meta_json.encode()).hexdigest()


def shipped_file(path: Path) -> bool:
    """A file nobody rewrites in place and that is complete as it stands: no write bit (what
    cache_ship writes, mode 0444; the library, even as root, treats it as read-only) and no
    -wal or -journal beside it (a -wal may hold committed pages an immutable open would not
    see). A reader that cannot write it may then open it immutable (no locks, no -shm:
    read-only mounts, NFS); any other file may change under the reader, whose cached pages
    an immutable open would mix with the new ones."""
    try:
        writable = os.stat(path).st_mode & 0o222
    except OSError:
        return False
    return not writable and not Path(f"{path}-wal").exists() and not Path(f"{path}-journal").exists()


def foreign_to_us(cache, consequence: str = "none of its kernels or profiler records are used; "
                   "rebuild it with this version (cutlass-sparse warmup)") -> bool:
    """Whether a file's stamps name toolchains, none of them ours (warns once, naming both)."""
    theirs = cache.toolchains()
    if not theirs:
        return False
    try:
        readable = env.readable_identities()   # ours, and the earlier cache formats we still serve
    except Exception:    # no NVRTC or headers here: nothing is keyed or compiled, nothing to compare
        return False
    if any(identity in theirs for identity in readable):
        return False
    mine, other = readable[0].splitlines(), theirs[-1].splitlines()
    warnings.warn(f"kernel cache {cache.path} was built by another version "
                  f"({'; '.join(line for line in other if line not in mine)}; this is "
                  f"{'; '.join(line for line in mine if line not in other)}): {consequence}", stacklevel=4)
    return True


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    # A read-only file written by an older version may lack the table.
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def column(conn: sqlite3.Connection, table: str, name: str, order: str) -> list:
    """One column of a table, in order; empty where the file has no such table."""
    if not has_table(conn, table):
        return []
    return [row[0] for row in conn.execute(f"SELECT {name} FROM {table} ORDER BY {order}")]


def insert_missing(conn: sqlite3.Connection, rows: list, winners: list, toolchains: list) -> int:
    for identity in toolchains:
        conn.execute("INSERT OR IGNORE INTO toolchains (identity, created) VALUES (?, ?)", (identity, time.time()))
    added = 0
    for row in rows:
        added += conn.execute("INSERT OR IGNORE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)", row).rowcount
    for signature, choice_json, table_json in winners:
        conn.execute("INSERT OR IGNORE INTO winners (signature, choice, table_json, checksum, created) "
                     "VALUES (?, ?, ?, ?, ?)", (signature, choice_json, table_json,
                                                checksum(choice_json.encode(), signature + table_json), time.time()))
    return added
