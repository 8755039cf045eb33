"""What the kernel cache does with a damaged SQLite file: recognize the damage, keep a copy
for inspection (<name>.corrupt-<ns>), and start afresh. Standard library only."""
from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """A damaged file (SQLITE_CORRUPT, SQLITE_NOTADB), not contention or a full disk."""
    if isinstance(exc, (sqlite3.OperationalError, sqlite3.IntegrityError, sqlite3.ProgrammingError)):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    return code is None or code & 0xFF in (11, 26)


def aside_name(real: Path) -> Path:
    return real.with_name(f"{real.name}.corrupt-{time.time_ns()}")


def move_aside(real: Path, still_ours: bool) -> Path:
    """Rename a file no connection can read (and its WAL) aside; drop its shared memory.
    still_ours=False: another process set it aside already, leave what is there now."""
    aside = aside_name(real)
    if still_ours:
        try:
            os.replace(real, aside)
            os.replace(f"{real}-wal", f"{aside}-wal")
        except FileNotFoundError:
            pass  # no WAL, or another process set the file aside first
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
