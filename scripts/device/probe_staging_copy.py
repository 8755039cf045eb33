"""GPU time of staging x (GPU machine): cudaMemcpy2DAsync of K rows of N elements into
rows padded to 16 bytes, against a one-thread-per-element CuPy kernel doing the same
copy. Narrow rows (a decode step's N = 7) are where a 2-D copy may pay per line.

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


def gpu_us(fn, calls: int = 200) -> float:
    import cupy

    fn()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop) / calls * 1e3


def main():
    import cupy

    from cutlass_sparse.launch.staging import copy_lines

    kernel = cupy.RawKernel(PAD_SOURCE, "pad_rows")
    print("rows x cols (f16)   memcpy2DAsync us   kernel us   (GPU time per copy, 200 back to back)")
    for rows, cols in ((4096, 7), (14336, 7), (4096, 15), (4096, 4095)):
        ld = -(-cols // 8) * 8
        src = cupy.random.default_rng(0).standard_normal((rows, cols), dtype=cupy.float32).astype(cupy.float16)
        dst_a = cupy.zeros((rows, ld), dtype=cupy.float16)
        dst_b = cupy.zeros((rows, ld), dtype=cupy.float16)
        a = gpu_us(lambda: copy_lines(dst_a.data.ptr, ld * 2, src.data.ptr, cols * 2, cols * 2, rows))
        total = rows * cols
        b = gpu_us(lambda: kernel(((total + 255) // 256,), (256,),
                                  (src, dst_b, cupy.int64(rows), cupy.int64(cols), cupy.int64(cols), cupy.int64(ld))))
        same = bool((dst_a[:, :cols] == src).all()) and bool((dst_b[:, :cols] == src).all())
        print(f"{rows:6d} x {cols:5d}        {a:10.2f}      {b:8.2f}   {'ok' if same else 'WRONG'}")


if __name__ == "__main__":
    main()
