#!/usr/bin/env python3
"""Where a process's first `cs.matmul` of a cached kernel spends its time (GPU machine): the
call as `scripts/run_gemm.py` times it (weight compressed before, result synchronized), under
cProfile, then the same call again. Run from the repository root after the warm step:
python scripts/device/probe_first_call.py [--m 4096 --n 4096 --k 4096] [--rows 25]"""
import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference

    w = cs.prune_2to4(cupy.random.standard_normal((args.m, args.k), dtype=cupy.float32).astype(cupy.float16))
    x = cupy.random.standard_normal((args.k, args.n), dtype=cupy.float32).astype(cupy.float16)
    sw = cs.compress(w)
    cupy.cuda.Device().synchronize()
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    y = cs.matmul(sw, x)
    cupy.cuda.get_current_stream().synchronize()
    profiler.disable()
    first = time.perf_counter() - start
    start = time.perf_counter()
    cs.matmul(sw, x)
    cupy.cuda.get_current_stream().synchronize()
    again = time.perf_counter() - start
    error = reference.relative_error(y, reference.to_float32(w) @ reference.to_float32(x))
    print(f"{args.m}x{args.n}x{args.k}: first call {first * 1e3:.1f} ms (under cProfile), the next "
          f"{again * 1e3:.2f} ms; rel error {error:.1e}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(args.rows)
    print(out.getvalue())


if __name__ == "__main__":
    main()
