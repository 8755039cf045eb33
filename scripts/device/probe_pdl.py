"""Programmatic dependent launch (PDL) of the sm90 GEMM (launch.pdl): a chain of
GEMMs, each launched while the one before it finishes (its prologue overlapping the
previous epilogue), against the same kernels in plain stream order. Same process, same
plans, alternated rounds (launch.pdl.ENABLED flipped between them); every result
checked against dense, and a dependent chain (down(up(x)), the down GEMM reading what
up wrote) must give the same bits both ways.

    python scripts/device/probe_pdl.py

Session 11's first run (docs/probe_pdl_experiment_h100.log) compared kernels compiled
with and without CUTLASS_ENABLE_GDC_FOR_SM90 launched in plain order: within noise. Its
later runs (docs/probe_pdl_h100.log) found CUTLASS's ping-pong kernel letting the next
grid launch at once (an idle warp group's signal), now patched (emit.nvrtc_headers).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

SHAPES = ((4096, 16, 4096), (14336, 16, 4096), (4096, 16, 14336), (4096, 128, 4096), (4096, 512, 4096),
          (8192, 8192, 8192))
MODES = {"plain": False, "pdl": True}


def host_us(fn, calls: int = 300) -> float:
    """Host time of one call, queued behind a spin kernel (median of five rounds)."""
    import cupy

    from cutlass_sparse import reference

    spin = cupy.RawKernel(reference._SPIN_SOURCE, "cutlass_sparse_spin")
    cycles = int(30.0 * cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["clockRate"])
    rounds = []
    for _ in range(5):
        cupy.cuda.Device().synchronize()
        spin((1,), (1,), (cupy.int64(cycles),))
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    cupy.cuda.Device().synchronize()
    return sorted(rounds)[2]


def timed(modes_fns: dict, rounds: int = 3) -> dict:
    """Kernel-only us of each fn, alternated rounds, best round; fn: (mode, callable)."""
    from cutlass_sparse import reference
    from cutlass_sparse.launch import pdl

    times = {name: [] for name in modes_fns}
    for _ in range(rounds):
        for name, (mode, fn) in modes_fns.items():
            pdl.ENABLED = mode
            times[name].append(reference.kernel_median_ms(fn) * 1e3)
    pdl.ENABLED = True
    return {name: min(v) for name, v in times.items()}


def measure() -> None:
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference
    from cutlass_sparse.launch import pdl

    rng = cupy.random.default_rng(0)
    sws = {}
    for m, n, k in SHAPES:
        w = cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))
        x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        sw = sws[(m, n, k)] = cs.compress(w)
        planned = cs.plan(sw, x)
        y = planned(x)
        cupy.cuda.Device().synchronize()   # the host copy of Params lands: later calls pass them by value
        want = reference.to_float32(w) @ reference.to_float32(x)
        errors = {}
        for name, mode in MODES.items():
            pdl.ENABLED = mode
            y.fill(0)
            planned(x, out=y)
            errors[name] = reference.relative_error(y, want)
        best = timed({name: (mode, lambda: planned(x, out=y)) for name, mode in MODES.items()}
                     | {"dense": (True, lambda: cupy.matmul(w, x))})
        line = (f"{m}x{n}x{k} {planned.family_plan.config.name[-48:]}: plain {best['plain']:8.2f} us, pdl "
                f"{best['pdl']:8.2f} us ({best['plain'] / best['pdl']:.3f}x), dense {best['dense']:8.2f} us "
                f"(dense/pdl {best['dense'] / best['pdl']:.3f}, dense/plain {best['dense'] / best['plain']:.3f}); "
                f"rel err {errors['plain']:.1e} / {errors['pdl']:.1e}")
        if (m, n, k) == SHAPES[0]:
            hosts = {}
            for name, mode in MODES.items():
                pdl.ENABLED = mode
                hosts[name] = host_us(lambda: planned(x, out=y))
            pdl.ENABLED = True
            line += "; host us per plan call: " + ", ".join(f"{k_} {v:.2f}" for k_, v in hosts.items())
        print(line, flush=True)
    chain(sws, rng)


def chain(sws, rng) -> None:
    """up (14336x16x4096) then down (4096x16x14336) reading up's output, 16 tokens: PDL
    must give the plain launches' bits (the down GEMM waits for up's writes)."""
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse.launch import pdl

    x = rng.standard_normal((4096, 16), dtype=cupy.float32).astype(cupy.float16)
    h = cupy.empty((14336, 16), cupy.float16)
    y = cupy.empty((4096, 16), cupy.float16)
    plan_up, plan_down = cs.plan(sws[(14336, 16, 4096)], x), cs.plan(sws[(4096, 16, 14336)], h)
    plan_up(x, out=h)
    plan_down(h, out=y)
    cupy.cuda.Device().synchronize()

    def step():
        plan_up(x, out=h)
        plan_down(h, out=y)
    worst = 0.0
    for _ in range(50):
        x[...] = rng.standard_normal((4096, 16), dtype=cupy.float32).astype(cupy.float16)
        results = []
        for mode in (False, True):
            pdl.ENABLED = mode
            h.fill(0)
            y.fill(0)
            step()
            results.append(y.astype(cupy.float32))
        worst = max(worst, float(cupy.abs(results[0] - results[1]).max()))
    best = timed({name: (mode, step) for name, mode in MODES.items()})
    print(f"chain up+down, 16 tokens: plain {best['plain']:.2f} us, pdl {best['pdl']:.2f} us "
          f"({best['plain'] / best['pdl']:.3f}x); max |pdl - plain| over 50 inputs {worst}", flush=True)


if __name__ == "__main__":
    measure()
