#!/usr/bin/env python3
"""A library user's first calls on a cold kernel cache (GPU machine; run with an empty
CUTLASS_SPARSE_CACHE): compress a 4096x4096 fp16 weight, call cs.matmul once a second
for up to --seconds, and print when each call returned, which kernel ran it and its error
against a float32 dense product. The first calls run on the sm80 family while the sm90
GEMM compiles in a background process (plan.stand_in); later ones on the sm90 GEMM."""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=200)
    args = parser.parse_args()
    t0 = time.perf_counter()
    import cupy
    import numpy as np

    import cutlass_sparse as cs
    from cutlass_sparse import reference

    print(f"{time.perf_counter() - t0:7.2f} s  imported", flush=True)
    rng = np.random.default_rng(0)
    w = cs.prune_2to4(cupy.asarray(rng.standard_normal((args.m, args.k), dtype=np.float32).astype(np.float16)))
    x = cupy.asarray(rng.standard_normal((args.k, args.n), dtype=np.float32).astype(np.float16))
    ref = reference.to_float32(w) @ reference.to_float32(x)
    t = time.perf_counter()
    sw = cs.compress(w)
    cupy.cuda.runtime.deviceSynchronize()
    print(f"{time.perf_counter() - t0:7.2f} s  compressed ({sw.layout} layout) in {time.perf_counter() - t:.2f} s",
          flush=True)
    last = None
    while time.perf_counter() - t0 < args.seconds:
        info = {}
        t = time.perf_counter()
        y = cs.matmul(sw, x, info=info)
        cupy.cuda.runtime.deviceSynchronize()
        took = time.perf_counter() - t
        err = reference.relative_error(y, ref)
        kernel = info["config"]
        if kernel != last or took > 0.5:
            print(f"{time.perf_counter() - t0:7.2f} s  call took {took * 1e3:9.1f} ms  rel err {err:.2e} "
                  f"{'PASS' if err < 2e-3 else 'FAIL'}  {kernel}", flush=True)
        if last is not None and kernel != last and kernel.startswith("cutlass3x_sm90"):
            break
        last = kernel
        time.sleep(1.0)
    # kernel-only speed of what runs now, against dense, in this process
    sparse_ms, dense_ms = reference.kernel_median_ms(lambda: cs.matmul(sw, x)), reference.kernel_median_ms(lambda: w @ x)
    print(f"kernel-only: sparse {sparse_ms:.4f} ms, dense {dense_ms:.4f} ms, {dense_ms / sparse_ms:.3f}x dense", flush=True)

if __name__ == "__main__":
    main()
