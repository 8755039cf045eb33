"""Compile kernels in a detached process that outlives its caller.

A first run on a cold cache can run a kernel that compiles in seconds while the one it
would rather run (an sm90 GEMM: a minute or two of NVRTC) compiles here; later runs find
it cached (cli.run, plan.stand_in). Each kernel's compile lock (build.compile_locks) is
held for as long as its compile runs, so a second run sees it under way instead of
starting it again.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .. import trust
from .cache import default_cache
from .compile_locks import WORKER_ENV, lock_dir, lock_file, try_lock, under_way

def can_start() -> bool:
    """Whether a detached compile could keep its result: the writable cache's directory is ours to write."""
    try:
        cache = default_cache()
    except Exception:
        return False
    return not cache.read_only and os.access(cache.path.parent, os.W_OK)


def start(items: list[tuple[object, str]]) -> tuple[int | None, Path]:
    """Start one detached process compiling the (config, arch) items not already under way.

    Returns its pid (None where every item was under way already) and its log."""
    directory = lock_dir()
    log_path = directory / "background.log"
    todo = [(c, a) for c, a in items if not under_way(c, a)]
    if not todo:
        return None, log_path
    job = trust.write_new_file(directory, f"job-{os.getpid()}-{time.time_ns()}.json",
                               json.dumps([[c.to_json(), a] for c, a in todo]).encode())
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        # -c, not -m: the package's import already holds this module, which runpy would run twice
        process = subprocess.Popen([sys.executable, "-c", f"import sys, {__name__} as job; sys.exit(job.main())",
                                    str(job)], stdin=subprocess.DEVNULL,
                                   stdout=log_fd, stderr=subprocess.STDOUT, start_new_session=True,
                                   close_fds=True, env=os.environ.copy())
    finally:
        os.close(log_fd)
    _children.append(process)
    return process.pid, log_path


_children: list[subprocess.Popen] = []   # the compiles this process started


def running() -> int:
    """How many compiles this process started are still running (the ended ones are reaped)."""
    _children[:] = [process for process in _children if process.poll() is None]
    return len(_children)


def _run(job: Path) -> int:
    """In the detached process: take each kernel's lock, compile what was taken, report."""
    import logging

    from . import warmup

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ[WORKER_ENV] = "1"    # inherited by the compile workers
    items = [(warmup._config_from_json(c), a) for c, a in json.loads(job.read_text())]
    job.unlink(missing_ok=True)
    held = []
    for config, arch in items:
        fd = try_lock(lock_file(config, arch))
        if fd is not None:         # else another process compiles it
            held.append(((config, arch), fd))
    failed = 0
    for name, arch, state, seconds in warmup.compile_all([item for item, _ in held], jobs=max(len(held), 1)):
        print(f"{time.strftime('%H:%M:%S')} {state} {name} for {arch} in {seconds:.1f} s", flush=True)
        failed += state.startswith("failed")
    for _, fd in held:
        os.close(fd)
    return 1 if failed else 0


def main() -> int:
    return _run(Path(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
