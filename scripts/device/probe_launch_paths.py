"""Host time of the sm90 launch path, piece by piece (GPU machine): the bare driver call
(cuLaunchKernelEx through ctypes and through cuda-bindings, plain and programmatic, and a
one-pointer kernel's launch for scale), launch.pdl.Entry, a torch plan call, cs.matmul
and torch.mm. Each row: calls queued behind a spin kernel (the GPU never drains the
queue), median of five rounds; two passes (hosts vary: read both).

    python scripts/device/probe_launch_paths.py

Session 12 (docs/probe_launch_paths_h100.log): the bare call costs the same through
ctypes and cuda-bindings, so launch.pdl stays on cuda-bindings.
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT.parent), str(ROOT / "device")]

from probe_pdl import host_us  # noqa: E402


class LaunchAttribute(ctypes.Structure):
    """cuda.h's CUlaunchAttribute: an id, then a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("_pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("_rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def raw_ctypes(function: int, grid, threads, shared: int, stream_ptr: int, address: int, programmatic: bool):
    """A bare ctypes cuLaunchKernelEx with a prepared configuration."""
    launch = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
    launch.argtypes, launch.restype = [ctypes.c_void_p] * 4, ctypes.c_int
    config = LaunchConfig(*grid, *threads, shared, stream_ptr)
    attribute = LaunchAttribute(id=6, value=1)   # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    if programmatic:
        config.attrs, config.numAttrs = ctypes.pointer(attribute), 1
    config_address = ctypes.addressof(config)
    keep = (config, attribute)
    return lambda: launch(config_address, function, address, None) or keep


def raw_bindings(function: int, grid, threads, shared: int, stream_ptr: int, address: int, programmatic: bool):
    """A bare cuda-bindings cuLaunchKernelEx with a prepared configuration."""
    from cuda.bindings import driver

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = threads
    config.sharedMemBytes = shared
    config.hStream = stream_ptr
    if programmatic:
        attribute = driver.CUlaunchAttribute()
        attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attribute.value.programmaticStreamSerializationAllowed = 1
        config.attrs, config.numAttrs = [attribute], 1
    cu_function, launch = driver.CUfunction(function), driver.cuLaunchKernelEx
    return lambda: launch(config, cu_function, address, 0)


def main():
    import cupy
    import torch

    import cutlass_sparse as cs
    from cutlass_sparse import reference
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
    ready = next(iter(planned._readies.values()))
    entry = planned.family_plan.loaded.entry(0)
    stream = cupy.cuda.get_current_stream()
    gemm = (int(entry._function), ready.grid, entry._threads, entry._shared, stream.ptr,
            ready.arguments)
    # a kernel of one 8-byte argument, for scale: the spin kernel told to spin 0 cycles
    spin = cupy.RawKernel(reference._SPIN_SOURCE, "cutlass_sparse_spin")
    spin((1,), (1,), (cupy.int64(0),))
    zero = ctypes.c_int64(0)
    zero_params = (ctypes.c_void_p * 1)(ctypes.addressof(zero))
    small = (spin.kernel.ptr, (1, 1, 1), (1, 1, 1), 0, stream.ptr, ctypes.addressof(zero_params))
    xp, yp = x.data_ptr(), y.data_ptr()
    rows = {
        "bare ctypes, GEMM, programmatic": raw_ctypes(*gemm, True),
        "bare ctypes, GEMM, plain": raw_ctypes(*gemm, False),
        "bare cuda-bindings, GEMM, programmatic": raw_bindings(*gemm, True),
        "bare cuda-bindings, GEMM, plain": raw_bindings(*gemm, False),
        "bare ctypes, 8-byte-argument kernel": raw_ctypes(*small, False),
        "bare cuda-bindings, 8-byte-argument kernel": raw_bindings(*small, False),
        "launch.pdl.Entry": lambda: entry(ready.grid, ready.arguments, stream, True),
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
    for _ in range(2):
        print("host us per call (behind a spin kernel, median of 5 rounds of 300):")
        for name, fn in rows.items():
            print(f"  {name:46s} {host_us(fn):7.2f}")
    torch.cuda.synchronize()
    err = float((planned(x).float() - ref).norm() / ref.norm())
    print(f"after the loops: plan rel err {err:.1e} ({'ok' if err < 2e-2 else 'WRONG'})")


if __name__ == "__main__":
    main()
