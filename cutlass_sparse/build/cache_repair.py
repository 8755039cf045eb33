"""What the kernel cache does with a damaged SQLite file: recognize the damage, keep a copy
for inspection (<name>.corrupt-<ns>), and start afresh; and which errors are a disk that
refuses writes (full, a file size limit) rather than damage."""
from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import time
from pathlib import Path

from .. import trust

SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_FULL, SQLITE_NOTADB = 10, 11, 13, 26


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """A damaged file (SQLITE_CORRUPT, SQLITE_NOTADB), not contention or a full disk."""
    if isinstance(exc, (sqlite3.OperationalError, sqlite3.IntegrityError, sqlite3.ProgrammingError)):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return code is None or code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB)


def is_write_refused(exc: sqlite3.DatabaseError) -> bool:
    """The disk refused to write (SQLITE_FULL, SQLITE_IOERR: no space, RLIMIT_FSIZE, no room
    for the -shm), not damage or contention: the file may still be read."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in (SQLITE_FULL, SQLITE_IOERR)


@contextlib.contextmanager
def taking_turns(lock: Path):
    """Hold an exclusive flock on the file `lock` (created if need be, never through a link):
    processes take turns, and a killed one leaves no stale lock."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def aside_name(real: Path) -> Path:
    return real.with_name(f"{real.name}.corrupt-{time.time_ns()}")


def move_aside(real: Path, identity: tuple[int, int] | None) -> Path | None:
    """Rename the damaged file at real (and its WAL) aside and drop its shared memory; returns
    where it went. Only the file whose trust.file_identity, taken before it was first opened,
    is `identity`: where another process set that one aside first and started a fresh file,
    the fresh one is left alone (None). Setting aside takes turns, so the check holds until the
    rename (else a second opener of the damaged file would rename the first's fresh file).
    The lock is beside the file (its directory is private and writable when it is set aside),
    so every process using this file takes the same one, whatever its TMPDIR."""
    with contextlib.ExitStack() as turn:
        try:
            turn.enter_context(taking_turns(real.with_name(f".{real.name}.set-aside.lock")))
        except OSError:   # no room for the lock file (a full disk): the identity check alone
            pass
        if identity is None or trust.file_identity(real) != identity:
            return None
        aside = aside_name(real)
        try:
            os.replace(real, aside)
        except FileNotFoundError:
            return None   # removed meanwhile (not by a process setting it aside: they take turns)
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{real}-wal", f"{aside}-wal")
        Path(f"{real}-shm").unlink(missing_ok=True)
        return aside


def empty_in_place(conn: sqlite3.Connection, real: Path, schema: str) -> Path:
    """Copy a file damaged under open connections aside, then empty it in place: SQLite's
    backup of a fresh database over it, under its locks, so other processes' connections,
    WAL and shared memory stay coherent (a rename under them would not: a connection to the
    renamed file deletes the new file's -wal and -shm by name when it closes).
    Raises sqlite3.DatabaseError if the file is too damaged to be rewritten."""
    aside = aside_name(real)
    for suffix in ("", "-wal"):
        if Path(f"{real}{suffix}").exists():
            shutil.copyfile(f"{real}{suffix}", f"{aside}{suffix}")
    fresh = sqlite3.connect(":memory:")
    try:
        fresh.executescript(schema)
        fresh.backup(conn)
    finally:
        fresh.close()
    return aside
