"""A cold cache's sm90 calls, run meanwhile by the sm80 family.

An sm90 GEMM takes a minute or more to compile (NVRTC, the CUTLASS 3.x collectives'
templates), an sm80 one seconds. Where a default-family fp16/bf16 call (cs.matmul or
cs.linear naming no family and no kernel) needs an sm90 GEMM the cache lacks, that GEMM
compiles in a detached process (build.background) and the call runs on the sm80 family,
with the weight converted to the sm80 layout once (kept while anything stands in). The
first call after the compile lands takes the sm90 plan. CUTLASS_SPARSE_STAND_IN=0 waits
for the compile instead, as do calls that name a family or a kernel, cs.plan, the
profiler, 8-bit weights and calls under CUDA graph capture.

An sm90 compile holds about 5 GB, so at most max_compiles() of this process's compiles run at once
(a serving loop on a cold cache can need several kernels, one per N range and layout);
the others wait in line and start as earlier ones end, looked at on any standing-in call.
A kernel whose background compile fails (or whose start, or the weight's conversion,
fails) is not stood in for again in this process: its calls compile in-process and
report why, as without stand-ins.
"""
from __future__ import annotations

import logging
import threading
import time
import weakref

from .. import env, host
from ..build import background, kernels, warmup
from ..describe import dtypes
from ..describe.problem import Problem
from ..formats import sm80_layout
from ..formats.matrices import SparseMatrix
from ..formats.patterns import LAYOUT_SM80
from ..launch import graphs, retiring
from . import plans

log = logging.getLogger("cutlass_sparse")

CHECK_EVERY_S = 0.25     # how often standing-in calls look whether compiles ended
START_GRACE_S = 20.0     # a compile neither cached nor under way this long after its start failed
MAX_WAITING = 1 << 16    # problems remembered as standing in (a serving loop's every new N is one)

_waiting: dict[Problem, tuple] = {}       # sm90 problem -> (kernel, arch) it waits for
_queued: list[tuple] = []                 # (kernel, arch) not started yet, in order
_started: dict[tuple, float] = {}         # (kernel, arch) compiling -> when it was started
_failed: set[tuple] = set()               # (kernel, arch) whose stand-in ended in a failure
_sm80_weights: dict[int, SparseMatrix] = {}   # id(sm90 matrix) -> its sm80 copy
_weight_streams: dict[int, set[int]] = {}     # id(sm90 matrix) -> streams whose calls read the copy
# sm80 copies no stand-in needs any more, each behind an event per stream that read it: freed
# at once, a copy's memory would go back to its first stream's pool while GEMMs queued on
# the others still read it
_retiring = retiring.Retiring()
_last_look = 0.0
_lock = threading.RLock()


def max_compiles() -> int:
    """Background compiles at once: one per usable CPU, as many as the free memory holds, at least one."""
    return host.compiles_at_once(warmup.SM90_GEMM_BYTES)


def awaited_kernel(problem: Problem) -> tuple | None:
    """(kernel, arch) of the sm90 GEMM this default-family problem waits for, putting its
    compile in line on first sight; None where the sm90 plan can be made now (or must be:
    compiling forbidden, stand-ins turned off or failed, no writable cache to compile into,
    the current stream capturing a CUDA graph, which would keep the stand-in for good)."""
    if _waiting:
        _look()             # whatever call comes: a kernel may have landed for problems not called again
        found = _waiting.get(problem)
        if found is not None:
            return None if _capturing() else found
    return _first_sight(problem)


def _capturing() -> bool:
    import cupy

    return graphs.capturing(cupy.cuda.get_current_stream().ptr)


def gemm_kernel(problem: Problem, config=None, choice=None) -> tuple | None:
    """(kernel, arch) of the sm90 GEMM a plan of problem would load, as its binary is
    cached (nothing compiled or loaded); None where the plan refuses the problem."""
    try:
        asked = kernels.first_asked(lambda: plans.make(problem, config, choice))
    except ValueError:      # refused: the sm90 plan says why
        return None
    return None if asked is None else (asked[0].as_compiled(), kernels.normalize_arch(asked[1]))


def _pending(kernel: tuple) -> bool:
    return kernel in _started or kernel in _queued


def _first_sight(problem: Problem) -> tuple | None:
    if problem.family != "sm90" or problem.element not in dtypes.INPUT_NAMES or env.compile_disabled() or \
            not env.stand_in_allowed() or plans.known(problem) or _capturing():
        return None
    kernel = gemm_kernel(problem, None, plans.recorded_choice(problem, None))
    if kernel is None:
        return None
    if _pending(kernel):    # another N of its range, say: one dict insert
        with _lock:
            if len(_waiting) < MAX_WAITING and _pending(kernel):
                _waiting[problem] = kernel
        return kernel if _pending(kernel) else None
    try:
        if kernel in _failed or kernels.loaded(*kernel) or kernels.cached(*kernel) or not background.can_start():
            return None
    except Exception as exc:    # an unreadable cache or lock directory: no stand-in, the plan says why
        log.debug("no stand-in for %s: %s", kernel[0].name, exc)
        return None
    with _lock:
        if kernel in _failed:
            return None
        if not _pending(kernel):
            _queued.append(kernel)
        _waiting[problem] = kernel
    _look(now=True)
    return _waiting.get(problem)


def _ended(kernel: tuple, started: float | None, moment: float) -> tuple[str, bool] | None:
    """(why, failed) where kernel's stand-in should end now, else None. The lock first: a
    compile under way has cached nothing yet, and asking the cache costs milliseconds."""
    if background.under_way(*kernel):
        return None
    if started is None:         # in line, and nobody compiles it
        return None
    if kernels.loaded(*kernel) or kernels.cached(*kernel):
        return "is compiled: calls that stood in for it take it from now on", False
    if moment - started < START_GRACE_S:    # its process may not hold the lock yet
        return None
    return "did not compile in the background: its calls compile it here, and say why", True


def _look(now: bool = False) -> None:
    """At most every CHECK_EVERY_S: end the stand-ins of compiles that ended (landed or
    failed) or that another process compiled while in line, then start compiles in line
    while fewer than max_compiles() of ours run."""
    global _last_look
    moment = time.monotonic()
    if not now and moment - _last_look < CHECK_EVERY_S:
        return
    _last_look = moment
    _retiring.drop_done()
    pending = list(_started.items()) + [(k, None) for k in list(_queued)]
    for kernel, started in pending:
        try:
            ended = _ended(kernel, started, moment)
        except Exception as exc:    # the cache or the lock directory unreadable: stop standing in
            ended = f"could not be looked for ({type(exc).__name__}: {exc}): its calls compile it here", True
        if ended is not None:
            _end(kernel, *ended)
    with _lock:
        # slots count this process's compiles still running, whatever became of their stand-ins
        while _queued and background.running() < max_compiles():
            kernel = _queued.pop(0)
            try:
                pid, log_path = background.start([kernel])
            except Exception as exc:    # OSError, an untrusted lock directory, ...
                _end(kernel, f"could not be compiled in the background ({type(exc).__name__}: {exc}): its calls "
                             f"compile it here", failed=True)
                continue
            _started[kernel] = time.monotonic()
            log.warning("the sm90 GEMM %s is not compiled yet: %s (about %s; log %s). Meanwhile "
                        "calls that need it run on the sm80 family (CUTLASS 2.x: slower on Hopper); "
                        "CUTLASS_SPARSE_STAND_IN=0 waits for the compile instead", kernel[0].name,
                        f"compiling it in a background process (pid {pid})" if pid else
                        "another process compiles it", kernels.compile_estimate(kernel[0]), log_path)


def _end(kernel: tuple, why: str, failed: bool) -> None:
    """Stop standing in for kernel (its problems take the sm90 plan from their next call)."""
    with _lock:
        for problem in [p for p, k in _waiting.items() if k == kernel]:
            del _waiting[problem]
        _started.pop(kernel, None)
        if kernel in _queued:
            _queued.remove(kernel)
        if failed:
            _failed.add(kernel)
        if not _waiting:
            _retire_weights()
    (log.warning if failed else log.info)("the sm90 GEMM %s %s", kernel[0].name, why)


def _retire_weights() -> None:
    """Move every sm80 copy to _retiring (under _lock)."""
    for key, weight in _sm80_weights.items():
        _retiring.add(weight, _weight_streams.get(key, ()))
    _sm80_weights.clear()
    _weight_streams.clear()


def sm80_weight(sw: SparseMatrix, kernel: tuple) -> SparseMatrix | None:
    """sw in the sm80 layout (converted on the GPU once, kept while anything stands in);
    None where the conversion failed (out of memory, say): then kernel's calls stop
    standing in and compile it here."""
    found = _sm80_weights.get(id(sw))
    if found is not None:
        _read_on_current_stream(sw)
        return found
    try:
        values, metadata = sm80_layout.encode(sw.to_dense(), sw.element)
        # kept for calls on any stream: done before any uses it (a cold start's one wait;
        # stand-ins never run under graph capture)
        if sw.is_device:
            import cupy

            cupy.cuda.get_current_stream().synchronize()
    except Exception as exc:    # CuPy's OutOfMemoryError among others: the sm90 plan still runs
        _end(kernel, f"stand-in could not convert the weight ({type(exc).__name__}: {exc}): its calls compile "
                     f"it here", failed=True)
        return None
    found = SparseMatrix(sw.shape, sw.dtype, values, metadata, LAYOUT_SM80)
    with _lock:
        if not _waiting:        # every stand-in ended meanwhile: keep nothing
            return found
        _sm80_weights[id(sw)] = found
        _read_on_current_stream(sw)
    weakref.finalize(sw, _sm80_weights.pop, id(sw), None)
    return found


def _read_on_current_stream(sw: SparseMatrix) -> None:
    """Note that a call on the current stream reads sw's sm80 copy (see _retiring)."""
    if not sw.is_device:   # host arrays: no stream reads them
        return
    import cupy

    with _lock:
        _weight_streams.setdefault(id(sw), set()).add(cupy.cuda.get_current_stream().ptr)


def standing_in() -> bool:
    """Whether any problem runs on a stand-in now."""
    return bool(_waiting)


def clear() -> None:
    """Forget every stand-in (the next call looks at the cache afresh)."""
    global _last_look
    with _lock:
        _waiting.clear()
        _queued.clear()
        _started.clear()
        _failed.clear()
        _retire_weights()
        _last_look = 0.0
