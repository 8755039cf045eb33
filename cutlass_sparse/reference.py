"""Dense references and timing helpers shared by the CLI, benchmarks and tests."""
from __future__ import annotations

from . import dtypes


def to_float32(array):
    """Exact float32 copy of an f16/bf16/f32 numpy or cupy array (bf16 via its bit pattern)."""
    xp = _xp(array)
    if dtypes.name_of(array.dtype) == "bf16":
        bits = xp.ascontiguousarray(array).view(xp.uint16)
        return (bits.astype(xp.uint32) << 16).view(xp.float32)
    return array.astype(xp.float32)


def _xp(array):
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    import numpy

    return numpy


def relative_error(result, reference) -> float:
    """||result - reference|| / ||reference|| in float64; NaN anywhere gives inf."""
    xp = _xp(reference)
    r = to_float32(result).astype(xp.float64)
    ref = to_float32(reference).astype(xp.float64) if reference.dtype != xp.float64 else reference
    if bool(xp.isnan(r).any()):
        return float("inf")
    denom = float(xp.linalg.norm(ref)) or 1.0
    return float(xp.linalg.norm(r - ref)) / denom


def median_ms(fn, repeats: int = 20, warmup: int = 3) -> float:
    """Median device time of fn() in milliseconds, CUDA events around each call."""
    import cupy

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop))
    times.sort()
    return times[len(times) // 2]


def kernel_median_ms(fn, calls: int = 20, replays: int = 15) -> tuple[float, str]:
    """Kernel-only time of fn() in ms and how it was taken.

    Preferred: `calls` calls captured in one CUDA graph, median replay / calls, so host
    overhead stays out, as in the peers' figures. Where the callee refuses capture (CuPy's
    cuBLAS does), `calls` back-to-back calls between two events, median / calls: host
    overhead then hides behind queued work only when each call outlasts it.
    """
    try:
        return _graph_median_ms(fn, calls, replays), "graph"
    except Exception:
        return _queued_median_ms(fn, calls, replays), "back-to-back"


def _queued_median_ms(fn, calls: int, replays: int) -> float:
    import cupy

    fn()
    times = []
    for _ in range(replays):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    times.sort()
    return times[len(times) // 2]


def _graph_median_ms(fn, calls: int, replays: int) -> float:
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # warm: loads modules outside the capture
        stream.synchronize()
        stream.begin_capture()
        try:
            for _ in range(calls):
                fn()
        finally:
            graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(replays):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            stop.record(stream)
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    times.sort()
    return times[len(times) // 2]


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
