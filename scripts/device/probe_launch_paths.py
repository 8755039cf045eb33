"""Host time of the sm90 launch path, piece by piece (GPU machine): the driver launch
through ctypes (launch.pdl, now) against cuda-bindings' cuLaunchKernelEx (session 11),
both from the same prepared kernelParams; and a torch plan call, cs.matmul and
torch.mm around them. Each row: calls queued behind a spin kernel (the GPU never
drains the queue), median of five rounds.

    python scripts/device/probe_launch_paths.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT.parent), str(ROOT / "device")]

from probe_pdl import host_us  # noqa: E402


def bindings_launcher(entry):
    """Session 11's launch: cuda-bindings' cuLaunchKernelEx with a CUlaunchConfig object."""
    from cuda.bindings import driver

    config = driver.CUlaunchConfig()
    config.blockDimX, config.blockDimY, config.blockDimZ = entry._threads
    config.sharedMemBytes = entry._shared
    attribute = driver.CUlaunchAttribute()
    attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attribute.value.programmaticStreamSerializationAllowed = 1
    config.attrs, config.numAttrs = [attribute], 1
    function = driver.CUfunction(entry._function)
    launch = driver.cuLaunchKernelEx

    def run(grid, params, stream):
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.hStream = stream.ptr
        err, = launch(config, function, ctypes_address(params), 0)
        if err:
            raise RuntimeError(err)
    return run


def ctypes_address(params):
    import ctypes

    return ctypes.addressof(params)


def main():
    import cupy
    import torch

    import cutlass_sparse as cs
    from cutlass_sparse.api import interop

    m, n, k = 128, 64, 128
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(k, n, device="cuda").half()
    y = torch.empty(m, n, device="cuda").half()
    planned = cs.plan(sw, x)
    planned(x, out=y)
    planned(x, out=y)
    torch.cuda.synchronize()
    ref = w.float() @ x.float()
    err = float((y.float() - ref).norm() / ref.norm())
    print(f"plan result rel err {err:.1e} ({'ok' if err < 2e-2 else 'WRONG'})")
    fam = planned.family_plan
    ready = next(iter(planned._readies.values()))
    entry = fam.loaded.entry(0)
    stream = cupy.cuda.get_current_stream()
    old = bindings_launcher(entry)
    xp, yp = x.data_ptr(), y.data_ptr()
    rows = {
        "launch: ctypes cuLaunchKernelEx (pdl.Entry)": lambda: entry(ready.grid, ready.arguments, stream, True),
        "launch: cuda-bindings cuLaunchKernelEx": lambda: old(ready.grid, ready.arguments, stream),
        "plan._launch(x_ptr, y_ptr, stream)": lambda: planned._launch(xp, yp, stream),
        "interop.torch_stream(0)": lambda: interop.torch_stream(0),
        "plan(x, out=y)": lambda: planned(x, out=y),
        "plan(x)": lambda: planned(x),
        "cs.matmul(sw, x, out=y)": lambda: cs.matmul(sw, x, out=y),
        "cs.matmul(sw, x)": lambda: cs.matmul(sw, x),
        "torch.mm(w, x, out=y)": lambda: torch.mm(w, x, out=y),
        "torch.mm(w, x)": lambda: torch.mm(w, x),
        "torch.empty(m, n)": lambda: torch.empty((m, n), dtype=torch.float16, device="cuda"),
    }
    for _ in range(2):   # the second pass is the one to read (the first warms caches)
        print("host us per call (behind a spin kernel, median of 5 rounds of 300):")
        for name, fn in rows.items():
            print(f"  {name:46s} {host_us(fn):7.2f}")
    torch.cuda.synchronize()
    err = float((planned(x).float() - ref).norm() / ref.norm())
    print(f"after the loops: plan rel err {err:.1e} ({'ok' if err < 2e-2 else 'WRONG'})")
    odd_n(torch, cs)


def odd_n(torch, cs):
    """N = 7 against N = 8 (row-major x [K, N]): host time of the eager call and of the
    staged launch's pieces."""
    import cupy

    from cutlass_sparse.api import eager, interop, matmul as api_matmul
    from cutlass_sparse.launch.staging import copy_lines

    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    print("odd N (4096 x N x 4096, row-major x), host us per call:")
    for n in (7, 8):
        x = torch.randn(4096, n, device="cuda").half()
        y = torch.empty(4096, n, device="cuda").half()
        ref = w.float() @ x.float()
        for out in (None, y):
            got = cs.matmul(sw, x, out=out)
            torch.cuda.synchronize()
            err = float((got.float() - ref).norm() / ref.norm())
            print(f"  N={n} out={'y' if out is not None else 'None':4s} {host_us(lambda: cs.matmul(sw, x, out=out)):7.2f}"
                  f"   rel err {err:.1e} ({'ok' if err < 2e-2 else 'WRONG'}) strides {tuple(got.stride())}")
        if n == 7:
            key = eager.torch_key(sw, x, y, api_matmul._DEFAULT_OPTIONS)
            entry = eager.lookup(key)
            plan = entry.plan
            stream = interop.torch_stream(0)
            xp, yp = x.data_ptr(), y.data_ptr()
            buf = cupy.empty(4096 * 8 * 2, dtype=cupy.uint8)
            pieces = {
                "torch_key": lambda: eager.torch_key(sw, x, y, api_matmul._DEFAULT_OPTIONS),
                "lookup": lambda: eager.lookup(key),
                "cupy.empty (pool)": lambda: cupy.empty(4096 * 8 * 2, dtype=cupy.uint8),
                "copy_lines (memcpy2DAsync)": lambda: copy_lines(buf.data.ptr, 16, xp, 14, 14, 4096),
                "with stream: (enter/exit)": lambda: stream.__enter__() and stream.__exit__(None, None, None),
                "plan.launch_staged": lambda: plan.launch_staged(sw, xp, yp, stream),
                "eager.torch_run": lambda: eager.torch_run(entry, sw, x, y),
            }
            for name, fn in pieces.items():
                print(f"    {name:30s} {host_us(fn):7.2f}")


if __name__ == "__main__":
    main()
