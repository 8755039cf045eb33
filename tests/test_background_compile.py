"""A detached compile (build.background): it outlives nothing here, but it runs in its own
process, fills the cache the caller names, and a kernel whose lock another process
holds is not compiled twice. The stand-in decision of `run` on a cold sm90 cache.
(A real sm80 compile: a few seconds.)"""
import os
import time

import pytest

from cutlass_sparse.build import background, compile_locks, kernels
from cutlass_sparse.build.cache import default_cache
from cutlass_sparse.cli import run
from cutlass_sparse.describe import selection
from cutlass_sparse.describe.problem import Problem


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "cs.db"))
    monkeypatch.delenv("CUTLASS_SPARSE_NO_COMPILE", raising=False)
    return tmp_path


@pytest.fixture
def config():
    return selection.config_for_shape(64, 40, 64, "f16", "f16", "row", 108, "sm80")


def _wait_cached(config, arch: str, seconds: float = 240) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if kernels.cached(config, arch) and not background.under_way(config, arch):
            return True
        time.sleep(0.5)
    return False


def test_detached_compile_fills_the_callers_cache(cache_env, config):
    assert not kernels.cached(config, "sm_80")
    pid, log_path = background.start([(config, "sm_80")])
    assert pid is not None and pid != os.getpid()
    assert _wait_cached(config, "sm_80"), log_path.read_text() if log_path.exists() else "no log"
    assert default_cache().path.parent == cache_env
    said = log_path.read_text()
    assert f"compiled {config.name} for sm_80" in said
    os.waitpid(pid, 0)      # our child: reap it (a run's process exits first and never does)
    assert not list((cache_env / compile_locks.LOCK_DIR).glob("job-*.json"))


def test_a_kernel_under_way_is_not_started_again(cache_env, config):
    held = compile_locks.try_lock(compile_locks.lock_file(config, "sm_80"))   # as a compiling process would
    try:
        assert background.under_way(config, "sm_80")
        pid, _ = background.start([(config, "sm_80")])
        assert pid is None
    finally:
        os.close(held)
    assert not background.under_way(config, "sm_80")
    assert not kernels.cached(config, "sm_80")


def test_lock_file_is_not_followed_through_a_link(cache_env, config):
    lock = compile_locks.lock_file(config, "sm_80")
    target = cache_env / "elsewhere"
    target.write_text("keep")
    lock.symlink_to(target)
    with pytest.raises(OSError):
        background.under_way(config, "sm_80")
    assert target.read_text() == "keep"


def test_cold_sm90_run_stands_in_and_starts_the_gemm(cache_env, monkeypatch):
    started = []
    monkeypatch.setattr(background, "start", lambda items: started.append(items) or (4242, cache_env / "log"))
    problem = Problem.contiguous("sm90", 4096, 4096, 4096, element="f16", arch="sm_90", sm_count=132)
    text = run.stand_in(problem)
    assert text.startswith("sm80 family stand-in: the sm90 GEMM started in a background process (pid 4242)")
    assert [c.family for c, _ in started[0]] == ["sm90"]
    assert {a for _, a in started[0]} == {"sm_90a"}


def test_no_stand_in_when_compiling_is_forbidden_or_not_sm90(cache_env, monkeypatch):
    monkeypatch.setattr(background, "start", lambda items: pytest.fail("nothing should start"))
    sm80 = Problem.contiguous("sm80", 256, 256, 256, element="f16", arch="sm_90", sm_count=132)
    assert run.stand_in(sm80) is None
    monkeypatch.setenv("CUTLASS_SPARSE_NO_COMPILE", "1")
    sm90 = Problem.contiguous("sm90", 4096, 4096, 4096, element="f16", arch="sm_90", sm_count=132)
    assert run.stand_in(sm90) is None


def test_a_compile_under_way_elsewhere_is_waited_for_not_repeated(cache_env, config, monkeypatch):
    # another process holds the kernel's lock for a while: this one waits, then goes on
    import subprocess
    import sys

    path = compile_locks.lock_file(config, "sm_80")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(1.5)"), str(path)],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    monkeypatch.setenv(compile_locks.WORKER_ENV, "1")
    assert not compile_locks.wait_for_other(config, "sm_80")     # a detached compile's worker: never waits
    monkeypatch.delenv(compile_locks.WORKER_ENV)
    start = time.monotonic()
    assert compile_locks.wait_for_other(config, "sm_80")
    assert time.monotonic() - start >= 0.5 and holder.wait() == 0
    assert not compile_locks.wait_for_other(config, "sm_80")     # nothing under way: no wait
