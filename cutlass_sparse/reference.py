"""Dense references and timing helpers shared by the CLI, benchmarks and tests."""
from __future__ import annotations

from .describe import dtypes


to_float32 = dtypes.to_float32   # kept here too: the references' callers name it


def relative_error(result, reference) -> float:
    """||result - reference|| / ||reference|| in float64; NaN anywhere gives inf."""
    xp = dtypes.array_module(reference)
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


_SPIN_SOURCE = r"""
extern "C" __global__ void cutlass_sparse_spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) { }
}
"""


def kernel_median_ms(fn, calls: int = 20, replays: int = 15, spin_ms: float = 20.0) -> float:
    """Kernel-only time of fn() in ms (kernel_medians_ms with one contestant)."""
    return kernel_medians_ms({"fn": fn}, calls, replays, spin_ms)["fn"]


def kernel_medians_ms(fns: dict, calls: int = 20, replays: int = 15, spin_ms: float = 20.0) -> dict:
    """Kernel-only time in ms of each fn() in fns: `calls` back-to-back calls between two
    events, median over `replays`, divided by `calls`.

    Each timing first queues a spin kernel of about spin_ms, so all `calls` launches are
    enqueued while the GPU is busy and then run with no host gaps: Python and launch
    overhead stay out of the number, whatever fn is (CuPy refuses to capture cuBLAS in a
    CUDA graph, so graphs cannot give both peers the same treatment).

    The contestants take turns, one timing each per replay, the first place rotating and
    the order reversed every other cycle (so no contestant always follows the same one): at
    shapes that reach the card's power cap, timing them one after another in blocks started
    each block from another state of the card's power control (session 28).
    """
    import cupy

    spin = cupy.RawKernel(_SPIN_SOURCE, "cutlass_sparse_spin")
    rate_khz = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["clockRate"]
    cycles = int(spin_ms * rate_khz)
    names = list(fns)
    for name in names:
        fns[name]()
    times = {name: [] for name in names}
    for replay in range(replays):
        cycle = names if (replay // len(names)) % 2 == 0 else names[::-1]
        for i in range(len(names)):
            name = cycle[(replay + i) % len(names)]
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            spin((1,), (1,), (cupy.int64(cycles),))
            start.record()
            for _ in range(calls):
                fns[name]()
            stop.record()
            stop.synchronize()
            times[name].append(cupy.cuda.get_elapsed_time(start, stop) / calls)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def activation(name: str, v, leaky_slope: float = 0.01):
    """The epilogue activations in float32 on a CuPy array, written from their definitions
    (not from CUTLASS's functors), to check the kernels against."""
    import math

    import cupy
    from cupyx.scipy.special import erf

    table = {
        "identity": lambda: v,
        "relu": lambda: cupy.maximum(v, 0),
        "leaky_relu": lambda: cupy.where(v > 0, v, leaky_slope * v),
        "gelu": lambda: 0.5 * v * (1 + erf(v / math.sqrt(2.0))),
        "gelu_tanh": lambda: 0.5 * v * (1 + cupy.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))),
        "silu": lambda: v / (1 + cupy.exp(-v)),
        "sigmoid": lambda: 1 / (1 + cupy.exp(-v)),
        "tanh": lambda: cupy.tanh(v),
        "hardswish": lambda: v * cupy.clip(v + 3, 0, 6) / 6,
    }
    if name not in table:
        raise ValueError(f"activation {name!r} is not one of {sorted(table)}")
    return table[name]()
