#!/usr/bin/env python3
"""The host cost of one kernel launch, by how it is called (GPU machine): CuPy's
Function call, cuda.bindings' cuLaunchKernel, and libcuda's cuLaunchKernel through
ctypes with the argument array made once; the same sm90 GEMM (128x64x128 f16), so the
driver's own share is the same in each."""
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager, eager_keys, interop, matmul as api_matmul  # noqa: E402
# launches queued behind a spin kernel, so the GPU's own time never shows in a row
from probe_pdl import host_us  # noqa: E402  (this folder is on sys.path when run as a script)


def main():
    m, n, k = 128, 64, 128
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(k, n, device="cuda").half()
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    ref = (w.float() @ x.float())
    cs.matmul(sw, x, out=out)
    plan = eager.lookup(eager_keys.torch_key(sw, x, out, api_matmul._DEFAULT_OPTIONS)).plan
    stream = interop.torch_stream(0)
    ready = plan.ready(sw, (x.data_ptr(), out.data_ptr(), out.data_ptr()), None, stream)
    compiled = plan.compiled
    function = plan.loaded.function(0, compiled.symbol, compiled.shared_bytes)
    threads, shared = (compiled.threads, 1, 1), compiled.shared_bytes
    grid = ready.grid
    print("grid", grid, "threads", threads, "shared", shared)
    import numpy as np
    from cupy.cuda.function import CIntptr

    # CuPy's arguments: the Params record (or the placeholder) as a NumPy record, then the buffer pointer
    size = compiled.constants["params_bytes"]   # the record's Params (kernelParams follow them)
    record = ready.held[0] if ready.by_value else ready.held[1]   # setup Readies: (kernelParams, placeholder, ...)
    args = (np.frombuffer(bytes(record)[:size], dtype=(np.void, size)),
            CIntptr(0 if ready.params is None else ready.params.data.ptr))

    def via_cupy():
        function(grid, threads, args, shared_mem=shared, stream=stream)

    def via_cupy_positional():
        function(grid, threads, args, shared, stream)

    def via_library():   # launch.programmatic: cuLaunchKernelEx, kernelParams made once
        plan.launch(ready, stream)

    from cuda.bindings import driver

    cu_function = driver.CUfunction(function.ptr)
    cu_stream = driver.CUstream(stream.ptr)
    params_address = ready.arguments
    gx, gy, gz = grid
    tx = threads[0]

    def via_bindings():
        driver.cuLaunchKernel(cu_function, gx, gy, gz, tx, 1, 1, shared, cu_stream, params_address, 0)

    libcuda = ctypes.CDLL("libcuda.so.1")
    launch = libcuda.cuLaunchKernel
    launch.restype = ctypes.c_int
    launch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                       ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.c_void_p]
    f_ptr, s_ptr = function.ptr, stream.ptr

    def via_ctypes():
        if launch(f_ptr, gx, gy, gz, tx, 1, 1, shared, s_ptr, params_address, None):
            raise RuntimeError("launch failed")

    for name, call in (("cupy Function(..., shared_mem=, stream=)", via_cupy),
                       ("cupy Function positional", via_cupy_positional),
                       ("cuda.bindings cuLaunchKernel", via_bindings),
                       ("library (cuLaunchKernelEx, programmatic)", via_library),
                       ("ctypes libcuda cuLaunchKernel", via_ctypes),
                       ("torch.mm(w, x, out=out)", lambda: torch.mm(w, x, out=out)),
                       ("empty python call", lambda: None)):
        out.zero_()
        us = host_us(call)
        torch.cuda.synchronize()
        err = float((out.float() - ref).norm() / ref.norm()) if "empty" not in name else 0.0
        print(f"  {name:44s} {us:6.2f} us  (result rel err {err:.1e})")

    # torch's allocator meeting output sizes for the first time, as a loop over new N does
    for label in ("first sight", "again"):
        times = []
        for rows in range(2000, 2512):
            start = time.perf_counter()
            torch.empty((rows, 4096), device="cuda", dtype=torch.float16)
            times.append((time.perf_counter() - start) * 1e6)
        print(f"torch.empty([N, 4096]) for N = 2000..2511, {label}: median {statistics.median(times):.1f} us, "
              f"max {max(times):.0f} us")


if __name__ == "__main__":
    main()
