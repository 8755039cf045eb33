"""GPU time of staging x (GPU machine): cudaMemcpy2DAsync of K rows of N elements into
rows padded to 16 bytes, against the library's copy kernel (launch.staging.copy_lines,
emit.line_copy) and a one-thread-per-element CuPy kernel doing the same copy. Narrow rows
(a decode step's N = 7) are where a 2-D copy may pay per line.

    python scripts/device/probe_staging_copy.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PAD_SOURCE = r"""
extern "C" __global__ void pad_rows(const unsigned short* src, unsigned short* dst, long long rows,
                                    long long cols, long long src_ld, long long dst_ld) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < rows * cols) { long long r = i / cols, c = i % cols; dst[r * dst_ld + c] = src[r * src_ld + c]; }
}
"""


def gpu_us(fn, calls: int = 200) -> tuple[float, float]:
    """(GPU us, host us) per call of `calls` back to back, queued behind a spin kernel so
    that the GPU time is the copies' own and not the host's launch rate."""
    import time

    import cupy

    from cutlass_sparse import reference

    fn()
    spin = cupy.RawKernel(reference._SPIN_SOURCE, "cutlass_sparse_spin")
    rate = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"]   # kHz
    spin((1,), (1,), (cupy.int64(int(calls * 0.05 * rate)),))       # 50 us of queue per call
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - began) / calls * 1e6
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / calls * 1e3, host


def main():
    import cupy

    from cutlass_sparse.launch.staging import copy_lines

    kernel = cupy.RawKernel(PAD_SOURCE, "pad_rows")
    print("rows x cols (f16)   GPU us per copy (host us per call), 200 back to back behind a spin kernel:\n"
          "                    memcpy2DAsync      copy_lines         CuPy kernel")
    for rows, cols in ((4096, 7), (14336, 7), (4096, 15), (4096, 4095)):
        ld = -(-cols // 8) * 8
        src = cupy.random.default_rng(0).standard_normal((rows, cols), dtype=cupy.float32).astype(cupy.float16)
        dst_a = cupy.zeros((rows, ld), dtype=cupy.float16)
        dst_b = cupy.zeros((rows, ld), dtype=cupy.float16)
        dst_c = cupy.zeros((rows, ld), dtype=cupy.float16)
        a = gpu_us(lambda: memcpy_2d(dst_a.data.ptr, ld * 2, src.data.ptr, cols * 2, cols * 2, rows))
        c = gpu_us(lambda: copy_lines(dst_c.data.ptr, ld * 2, src.data.ptr, cols * 2, cols * 2, rows))
        total = rows * cols
        b = gpu_us(lambda: kernel(((total + 255) // 256,), (256,),
                                  (src, dst_b, cupy.int64(rows), cupy.int64(cols), cupy.int64(cols), cupy.int64(ld))))
        same = all(bool((dst[:, :cols] == src).all()) for dst in (dst_a, dst_b, dst_c))
        print(f"{rows:6d} x {cols:5d}     " + "".join(f"{g:8.2f} ({h:5.1f})  " for g, h in (a, c, b))
              + ("ok" if same else "WRONG"))


def memcpy_2d(dst_ptr, dst_pitch, src_ptr, src_pitch, width, lines):
    """The copy engine's 2-D copy on the current stream (what staging did before the kernel)."""
    import cupy

    runtime = cupy.cuda.runtime
    runtime.memcpy2DAsync(dst_ptr, dst_pitch, src_ptr, src_pitch, width, lines, runtime.memcpyDeviceToDevice,
                          cupy.cuda.get_current_stream().ptr)


def chained():
    """GPU time of a staged decode call's work, queued behind a spin kernel (no host gaps):
    the x copy then the GEMM, 50 times, with the copy as cudaMemcpy2DAsync or as a kernel;
    the GEMM alone for scale."""
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference
    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.launch.staging import copy_lines
    from cutlass_sparse.plan import plans

    kernel = cupy.RawKernel(PAD_SOURCE, "pad_rows")
    spin = cupy.RawKernel(reference._SPIN_SOURCE, "cutlass_sparse_spin")
    rate = cupy.cuda.runtime.getDeviceProperties(0)["clockRate"]
    m, k, n, ld = 4096, 4096, 7, 8
    w = cs.prune_2to4(cupy.random.default_rng(1).standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
    sw = cs.compress(w)
    x = cupy.random.default_rng(2).standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
    staged = cupy.zeros((k, ld), dtype=cupy.float16)
    d = cupy.empty((m, ld), dtype=cupy.float16)
    plan = plans.get(Problem.contiguous("sm90", m, ld, k))   # the staged call's kernel problem: N = 8
    ready = plan.ready(sw, (staged.data.ptr, d.data.ptr, d.data.ptr))
    plan.launch(ready)
    cupy.cuda.Device().synchronize()
    plan._readies.clear()
    ready = plan.ready(sw, (staged.data.ptr, d.data.ptr, d.data.ptr))   # by value once the copy has landed
    print(f"GEMM launch by value (programmatic): {ready.by_value}")

    def by_memcpy():
        memcpy_2d(staged.data.ptr, ld * 2, x.data.ptr, n * 2, n * 2, k)
        plan.launch(ready)

    def by_copy_lines():
        copy_lines(staged.data.ptr, ld * 2, x.data.ptr, n * 2, n * 2, k)
        plan.launch(ready)

    def by_kernel():
        kernel(((k * n + 255) // 256,), (256,), (x, staged, cupy.int64(k), cupy.int64(n), cupy.int64(n),
                                                 cupy.int64(ld)))
        plan.launch(ready)

    def gemm_alone():
        plan.launch(ready)

    print("GPU us per staged call (copy + GEMM, 50 back to back behind a spin kernel):")
    for name, fn in (("memcpy2DAsync + GEMM", by_memcpy), ("copy_lines + GEMM", by_copy_lines),
                     ("CuPy kernel + GEMM", by_kernel), ("GEMM alone", gemm_alone)):
        times = []
        for _ in range(5):
            spin((1,), (1,), (cupy.int64(int(20.0 * rate)),))
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            for _ in range(50):
                fn()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 50 * 1e3)
        print(f"  {name:24s} {sorted(times)[2]:7.2f}")
    ref = reference.to_float32(w) @ reference.to_float32(x)
    err = reference.relative_error(d[:, :n], ref)
    print(f"result rel err {err:.1e} ({'ok' if err < 2e-2 else 'WRONG'})")


if __name__ == "__main__":
    main()
    chained()
