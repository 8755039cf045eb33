"""Compile locks: one lock file per kernel, beside the cache, held (flock) by the process
that compiles it for as long as the compile runs (build.background's detached compiles).
Another process sees the compile under way, and waits for it rather than compiling the
same kernel a second time; a crashed compile leaves no stale claim (the kernel drops the
lock with the process)."""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import time
from pathlib import Path

from .. import trust
from .cache import default_cache

LOCK_DIR = "compiling"      # beside compiled_cache.db: <dir>/compiling/<kernel>.lock, and the log


def lock_dir() -> Path:
    return trust.private_dir(default_cache().path.parent / LOCK_DIR)


def lock_file(config, arch: str) -> Path:
    digest = hashlib.sha256(json.dumps([config.to_json(), arch], sort_keys=True).encode()).hexdigest()[:24]
    return lock_dir() / f"{digest}.lock"


def try_lock(path: Path) -> int | None:
    """An fd holding path's lock, or None while another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def under_way(config, arch: str) -> bool:
    """Whether some process is compiling this kernel now (holds its lock)."""
    fd = try_lock(lock_file(config, arch))
    if fd is None:
        return True
    os.close(fd)
    return False


WORKER_ENV = "CUTLASS_SPARSE_BACKGROUND_JOB"   # set in a detached compile and its workers
WAIT_LIMIT_S = 900.0                            # then compile here after all (a hung compile)


def wait_for_other(config, arch: str) -> bool:
    """Where another process compiles this kernel now (holds its lock), wait until it ends
    instead of compiling it a second time (about 5 GB, a minute or more); True when it did.
    A detached compile's own workers never wait: they run under its lock."""
    if os.environ.get(WORKER_ENV):
        return False
    config = config.as_compiled() if hasattr(config, "as_compiled") else config
    try:
        path = lock_file(config, arch)
        if not under_way(config, arch):
            return False
    except Exception:           # no lock directory to read: nothing to wait for
        return False
    logging.getLogger("cutlass_sparse").info("waiting for another process's compile of %s (%s)", config.name, path)
    deadline = time.monotonic() + WAIT_LIMIT_S
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if not under_way(config, arch):
            return True
    return False
