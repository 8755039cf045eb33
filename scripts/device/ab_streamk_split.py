#!/usr/bin/env python3
"""Issue 13 (GPU machine): what the stream-K Params patch (emit/nvrtc_headers,
_STREAM_K_PATCHES) changes for a user of split-K on sm90: cs.matmul(sw, x, out=y,
split_k=S) as called, kernel-only (the workspace barrier's memset included), every
result checked against the dense product. STREAMK_UNPATCHED=1 runs CUTLASS's scheduler
as it was (its own kernels, keyed apart); LOAD_REGISTERS=N runs the same tiles with that
register split (SparseGemmConfig.load_registers; 0: CUTLASS's; unset: the catalog's). Each
variant is its own process:
    python scripts/device/ab_streamk_split.py; STREAMK_UNPATCHED=1 python scripts/device/ab_streamk_split.py
--compile-only: compile this variant's kernels and stop (no GPU needed)."""
import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cutlass_sparse.emit import nvrtc_headers  # noqa: E402

if os.environ.get("STREAMK_UNPATCHED"):
    nvrtc_headers._STREAM_K_PATCHES = {}

LOAD_REGISTERS = os.environ.get("LOAD_REGISTERS")   # None: the catalog's split
SHAPES = [(4096, 128, 16384), (2048, 256, 16384), (8192, 64, 8192), (4096, 512, 14336)]
SPLITS = (2, 4)


def problems():
    """(shape, splits, Problem) as cs.matmul(sw, x, out=y, split_k=S) plans it (y row-major)."""
    import dataclasses

    from cutlass_sparse.describe.problem import Problem
    return [(shape, s, dataclasses.replace(Problem.contiguous("sm90", *shape, element="f16", out_layout="row"),
                                           split_k=s))
            for shape in SHAPES for s in SPLITS]


def kernel(problem):
    """The kernel cs.matmul picks for the problem, with this variant's register split."""
    import dataclasses

    from cutlass_sparse.launch.sm90_choice import resolve
    config = resolve(problem, None)[0]
    return config if LOAD_REGISTERS is None else dataclasses.replace(config, load_registers=int(LOAD_REGISTERS))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args()
    variant = "CUTLASS's scheduler" if os.environ.get("STREAMK_UNPATCHED") else "Params by pointer"
    variant += f", load_registers {LOAD_REGISTERS}" if LOAD_REGISTERS is not None else ", the catalog's registers"
    if args.compile_only:
        from cutlass_sparse.build import warmup
        configs = {kernel(p).as_compiled() for _, _, p in problems()}
        for name, _, status, _ in warmup.compile_all(list(configs), "sm_90a", 2):
            print(f"{status[:60]:12} {name}", flush=True)
        return

    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference
    from sweep_void_c import check

    rng = cupy.random.default_rng(0)
    print(f"== {variant}", flush=True)
    for (m, n, k), splits, problem in problems():
        config = kernel(problem)
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
        x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        sw = cs.compress(w, layout="sm90")
        y = cupy.empty((m, n), dtype=cupy.float16)
        info = {}
        cs.matmul(sw, x, out=y, split_k=splits, config=config, info=info)
        ok, what = check(y.astype(cupy.float32), w.astype(cupy.float32) @ x.astype(cupy.float32), "f16")
        ms = reference.kernel_median_ms(lambda: cs.matmul(sw, x, out=y, split_k=splits, config=config))
        print(f"  {m}x{n}x{k} split_k={splits}  {2.0 * m * n * k / ms / 1e9:7.1f} TFLOP/s  "
              f"{'ok' if ok else 'FAIL'} ({what})  {info.get('config', '')[36:]}", flush=True)
        if not ok:
            raise SystemExit(f"{m}x{n}x{k} split_k={splits}: result does not match the dense product ({what})")


if __name__ == "__main__":
    main()
