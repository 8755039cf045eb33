"""Experiment: does the sm90 GEMM run faster with its Params passed by value (a
__grid_constant__ kernel argument, TMA descriptors in parameter space, as CUTLASS's own
host launch does) than read through a pointer to global memory (how cutlass_sparse
launches it, because the setup entry builds Params on the device)?

Adds a `<name>_byval` entry to the emitted source of a few kernels (in this process only:
`patch()`), copies the Params the setup entry built back to the host and launches both
entries on the same operands. Kernel-only timing, both results verified.

    python scripts/device/exp_byval.py            # on the GPU machine
    python scripts/device/exp_byval.py --compile  # compile the patched kernels (no GPU)
"""
import dataclasses
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import numpy as np  # noqa: E402

from cutlass_sparse import catalog, emit_sm90  # noqa: E402

BYVAL = """
extern "C" __global__ void
__launch_bounds__(GemmKernel::MaxThreadsPerBlock, GemmKernel::MinBlocksPerMultiprocessor)
__cluster_dims__({cm}, {cn}, {ck})
{name}_byval(__grid_constant__ Params const params) {{
  extern __shared__ __align__(128) char shared_storage[];
  GemmKernel op;
  op(params, shared_storage);
}}
"""
SHAPES = [((4096, 16, 4096), ((64, 32, 128), (1, 1, 1), "pingpong")),
          ((4096, 128, 4096), ((64, 64, 128), (1, 1, 1), "pingpong")),
          ((4096, 512, 4096), ((128, 128, 128), (1, 2, 1), "cooperative")),
          ((4096, 4096, 4096), ((256, 128, 128), (2, 1, 1), "cooperative"))]


def patch() -> None:
    original = emit_sm90.emit

    def emit(config):
        emitted = original(config)
        cm, cn, ck = config.cluster
        return dataclasses.replace(emitted, source=emitted.source + BYVAL.format(name=config.name, cm=cm, cn=cn, ck=ck))
    emit_sm90.emit = emit


def config_of(tile):
    tb, cl, sched = tile
    return catalog.load("sm90").config((tb, (4, 1, 1), 0, cl, sched, "persistent"), "f16", "f16", "row", 8, 8)


def main():
    patch()
    from cutlass_sparse import kernels

    if "--compile" in sys.argv:
        index = int(sys.argv[-1])   # one kernel per process: run several in parallel
        print(kernels.get(config_of(SHAPES[index][1]), "sm_90a").from_cache)
        return
    import subprocess

    workers = [subprocess.Popen([sys.executable, __file__, "--compile", str(i)]) for i in range(len(SHAPES))]
    if any(w.wait() for w in workers):
        sys.exit("compiling the patched kernels failed")
    import cupy

    from cutlass_sparse import reference, runtime, sm90
    from problem import sm90_problem   # scripts/device/problem.py

    rng = cupy.random.default_rng(0)
    for (m, n, k), tile in SHAPES:
        config = config_of(tile)
        sw, x, ref, y, ldb = sm90_problem(m, n, k, rng)
        record = {}
        sm90.matmul(sw, x, y, y, 1.0, 0.0, config, ldb, n, n, None, record=record)
        ready = record["ready_for"](x.data.ptr, y.data.ptr, y.data.ptr)
        params = ready.params.get()                      # the bytes the setup entry wrote
        arg = np.frombuffer(params.tobytes(), dtype=np.dtype((np.void, params.nbytes)))
        loaded = runtime.load(kernels.get(config, "sm_90a"))
        function = loaded.function(x.device.id, f"{config.name}_byval", loaded.compiled.shared_bytes)
        threads = (loaded.compiled.threads, 1, 1)

        def by_pointer():
            sm90.launch(loaded, x.device.id, ready)

        def by_value():
            function(ready.grid, threads, (arg,), shared_mem=loaded.compiled.shared_bytes)
        for label, call in (("pointer", by_pointer), ("value", by_value)):
            y[...] = cupy.nan
            call()
            err = reference.relative_error(y, ref)
            us = reference.kernel_median_ms(call, calls=20, replays=11) * 1e3
            print(f"{m}x{n}x{k} {config.threadblock[0]}x{config.threadblock[1]} Params by {label:7s}: "
                  f"{us:8.2f} us  {2 * m * n * k / us / 1e6:7.1f} TFLOP/s  err {err:.1e}"
                  + ("" if err < 1e-2 else "  WRONG"), flush=True)


if __name__ == "__main__":
    main()
