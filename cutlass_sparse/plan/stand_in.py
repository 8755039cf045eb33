"""A cold cache's sm90 calls, run meanwhile by the sm80 family.

An sm90 GEMM takes a minute or more to compile (NVRTC, the CUTLASS 3.x collectives'
templates), an sm80 one seconds. Where a default-family call (cs.matmul or cs.linear
naming no family and no kernel) needs an sm90 GEMM the cache lacks, that GEMM compiles
in a detached process (build.background) and the call runs on the sm80 family, with the
weight converted to the sm80 layout once (kept while standing in). The first call after
the compile lands takes the sm90 plan; the converted weights are dropped when nothing
stands in any more. CUTLASS_SPARSE_STAND_IN=0 waits for the compile instead, as do
calls that name a family or a kernel, cs.plan and the profiler.

An sm90 compile holds about 5 GB, so at most max_compiles() run at once (a serving loop
on a cold cache can need several kernels, one per N range and layout); the others wait
in line, started as earlier ones land, and their calls stand in meanwhile.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from .. import env
from ..build import background, kernels
from ..describe.problem import Problem
from ..formats.matrices import SparseMatrix
from ..formats.patterns import LAYOUT_SM80
from . import plans

log = logging.getLogger("cutlass_sparse")

CHECK_EVERY_S = 0.25     # how often a standing-in call looks whether the compile ended
START_GRACE_S = 20.0     # a compile neither cached nor under way this long after its start failed
COMPILE_BYTES = 5 << 30  # peak memory of one sm90 compile (docs/compile_time.md: 4.2-4.9 GB)

_waiting: dict[Problem, tuple] = {}       # sm90 problem -> (kernel, arch) it waits for
_queued: list[tuple] = []                 # (kernel, arch) not started yet, in order
_started: dict[tuple, float] = {}         # (kernel, arch) compiling -> when it was started
_checked: dict[tuple, float] = {}         # (kernel, arch) -> when it was last looked at
_sm80_weights: dict[int, SparseMatrix] = {}   # id(sm90 matrix) -> its sm80 copy
_lock = threading.Lock()


def max_compiles() -> int:
    """Background compiles at once: one per core, as many as the free memory holds, at least one."""
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        free = COMPILE_BYTES
    return max(1, min(os.cpu_count() or 1, free // COMPILE_BYTES))


def awaited_kernel(problem: Problem) -> tuple | None:
    """(kernel, arch) of the sm90 GEMM this default-family problem waits for, putting its
    compile in line on first sight; None where the sm90 plan can be made now (or must be:
    compiling forbidden, stand-ins turned off, no writable cache to compile into)."""
    found = _waiting.get(problem) if _waiting else None
    if found is None:
        return _first_sight(problem)
    now = time.monotonic()
    if now - _checked.get(found, 0.0) < CHECK_EVERY_S:
        return found
    _checked[found] = now
    started = _started.get(found)
    if started is None:                      # still in line
        _start_queued()
        return found
    if not (kernels.loaded(*found) or kernels.cached(*found)) and \
            (background.under_way(*found) or now - started < START_GRACE_S):
        return found
    _landed(found)          # compiled, or failed: then the sm90 plan compiles it here and says why
    return None


def _first_sight(problem: Problem) -> tuple | None:
    if problem.family != "sm90" or env.compile_disabled() or not env.stand_in_allowed() or plans.known(problem):
        return None
    try:
        asked = kernels.first_asked(lambda: plans.make(problem, None, plans.recorded_choice(problem, None)))
    except ValueError:      # refused: the sm90 plan says why
        return None
    if asked is None:
        return None
    kernel = (asked[0].as_compiled(), kernels.normalize_arch(asked[1]))
    if kernels.loaded(*kernel) or kernels.cached(*kernel) or not background.can_start():
        return None
    with _lock:
        if kernel not in _started and kernel not in _queued:
            _queued.append(kernel)
        _waiting[problem] = kernel
    _start_queued()
    return kernel


def _start_queued() -> None:
    """Start compiles in line while fewer than max_compiles() run."""
    with _lock:
        while _queued and len(_started) < max_compiles():
            kernel = _queued.pop(0)
            _started[kernel] = _checked[kernel] = time.monotonic()
            pid, log_path = background.start([kernel])
            log.warning("the sm90 GEMM %s is not compiled yet: %s (about 1-2 minutes; log %s). Meanwhile "
                        "calls that need it run on the sm80 family (CUTLASS 2.x: slower on Hopper); "
                        "CUTLASS_SPARSE_STAND_IN=0 waits for the compile instead", kernel[0].name,
                        f"compiling it in a background process (pid {pid})" if pid else
                        "another process compiles it", log_path)


def _landed(kernel: tuple) -> None:
    with _lock:
        for problem in [p for p, k in _waiting.items() if k == kernel]:
            del _waiting[problem]
        _checked.pop(kernel, None)
        _started.pop(kernel, None)
        if not _waiting:
            _sm80_weights.clear()
    log.info("the sm90 GEMM %s is compiled: calls that stood in for it take it from now on", kernel[0].name)
    _start_queued()


def sm80_weight(sw: SparseMatrix) -> SparseMatrix:
    """sw in the sm80 layout (converted on the GPU once, kept while anything stands in)."""
    found = _sm80_weights.get(id(sw))
    if found is None:
        found = sw.to_layout(LAYOUT_SM80)
        with _lock:
            _sm80_weights[id(sw)] = found
        weakref.finalize(sw, _sm80_weights.pop, id(sw), None)
    return found


def standing_in() -> bool:
    """Whether any problem runs on a stand-in now."""
    return bool(_waiting)


def clear() -> None:
    """Forget every stand-in (the next call looks at the cache afresh)."""
    with _lock:
        _waiting.clear()
        _queued.clear()
        _started.clear()
        _checked.clear()
        _sm80_weights.clear()
