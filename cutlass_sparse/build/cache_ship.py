"""A cache file to ship: what `cutlass-sparse cache merge --ship` writes for serving machines.

One self-contained SQLite file in rollback-journal (DELETE) mode, compacted, mode 0444:
with no -wal or -shm beside it, a reader that cannot write it opens it immutable, so it
serves from a read-only mount, an image layer or an NFS export alike. It is built under a
fresh name in the target's directory and renamed over the target whole, so a reader sees
the old file or the new one, never half of one, and a link planted at the target is
replaced, never written through.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from .. import trust
from . import cache_repair
from .cache import KernelCache

SHIPPED_MODE = 0o444


def ship(target: Path, sources: list[Path]) -> list[tuple[Path, int]]:
    """Write target from every intact entry of target (if it exists) and of the sources;
    returns (source, entries it added) for each. Ships into one target take turns
    (cache_repair.taking_turns), so one never replaces the other's entries."""
    target = Path(target)
    trust.make_cache_dir(target.parent)
    trust.check_cache_location(target)
    with cache_repair.taking_turns(_lock_file(target)):
        return _ship(target, sources)


def _lock_file(target: Path) -> Path:
    """The lock ships into target take turns on: in a private directory of this user's (not
    beside the shipped file, whose directory holds that file alone), named by where target
    really is."""
    base = trust.private_dir(Path(tempfile.gettempdir()) / f"cutlass_sparse-{os.geteuid()}")
    digest = hashlib.sha256(os.path.realpath(target).encode()).hexdigest()[:24]
    return trust.private_dir(base / "ship-locks") / f"{digest}.lock"


def _ship(target: Path, sources: list[Path]) -> list[tuple[Path, int]]:
    if target.exists():      # its entries go into the new file: never replace what cannot be read
        current = KernelCache(target, read_only=True)
        readable = current.readable
        current.close()
        if not readable:
            raise RuntimeError(f"cannot read the kernel cache {target}; not replacing it (move it aside first)")
    temp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600))
    added = []
    try:
        cache = KernelCache(temp, read_only=False, journal="delete")
        try:
            for source in ([target] if target.is_file() else []) + list(sources):
                added.append((Path(source), cache.merge_from(source)))
            cache.compact()
        finally:
            cache.close()
        os.chmod(temp, SHIPPED_MODE)
        _drop_journals(target)   # their entries are in temp now (read through the -wal above)
        os.replace(temp, target)
        _drop_journals(target)   # a process holding the old file may have written them meanwhile
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return added


def _drop_journals(target: Path) -> None:
    """Remove the target's -wal and -shm: the next reader would apply the old file's WAL
    to the new file (SQLite does not tell whose WAL it is)."""
    for suffix in ("-wal", "-shm"):
        Path(f"{target}{suffix}").unlink(missing_ok=True)
