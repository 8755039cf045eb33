#!/usr/bin/env python3
"""Issue 13 (GPU machine): the large-shape winners under each tile-scheduler swizzle and
raster order (run-time arguments: no new kernels), against cuSPARSELt and dense in the
same process, each result checked. Usage: sweep_raster.py [RASTER] (0 heuristic, 1 along
M, 2 along N). With --shapes MxNxK,... --pick: only the kernel default selection picks
(nothing to compile), under every raster order and swizzles 4 and 8, with cuSPARSELt timed
before and after the shape's variants (a long kernel heats the card: the peer's two
times show the drift)."""
import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.cli.bench import cusparselt  # noqa: E402
from cutlass_sparse.describe import catalog  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (4096, 4096, 11008), (28672, 4096, 8192),
          (11008, 512, 4096)]


# --pick: fewer calls per timing than kernel_median_ms's default (16384^3 runs 9 ms a call)
CALLS, REPLAYS, SWIZZLES = 5, 9, (4, 8)


def picked(shapes, rasters=(0, 1, 2), swizzles=SWIZZLES):
    """Default selection's kernel at each shape, under each raster order and swizzle."""
    from cutlass_sparse.describe import selection

    import time

    start = time.perf_counter()

    def progress(what):
        print(f"  [{time.perf_counter() - start:6.1f} s] {what}", flush=True)

    rng = cupy.random.default_rng(0)
    for m, n, k in shapes:
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
        x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        sw = cs.compress(w)
        ref = reference.to_float32(cupy.matmul(w, x))
        progress(f"{m}x{n}x{k}: operands")
        run, _ = cusparselt(w, x)
        progress("cuSPARSELt's search")
        before = reference.kernel_median_ms(run, CALLS, REPLAYS)
        chosen = selection.config_for_shape(m, n, k, "f16", "f16", "row", cupy.cuda.Device().attributes[
            "MultiProcessorCount"], "sm90")
        y = cupy.empty((m, n), dtype=cupy.float16)
        rows = []
        for raster in rasters:
            for swizzle in swizzles:
                config = dataclasses.replace(chosen, swizzle=swizzle, raster=raster)
                y.fill(0)
                cs.matmul(sw, x, out=y, config=config)
                err = reference.relative_error(y, ref)
                ms = reference.kernel_median_ms(lambda: cs.matmul(sw, x, out=y, config=config), CALLS, REPLAYS)
                rows.append((ms, raster, swizzle, err))
                progress(f"raster {raster} swizzle {swizzle}: {ms * 1e3:.1f} us, err {err:.1e}")
        after = reference.kernel_median_ms(run, CALLS, REPLAYS)
        print(f"\n{m}x{n}x{k} {chosen.name} (default swizzle {chosen.swizzle}): cuSPARSELt {before * 1e3:.1f} us "
              f"before, {after * 1e3:.1f} us after", flush=True)
        for ms, raster, swizzle, err in sorted(rows):
            print(f"  raster {raster} swz{swizzle}  {ms * 1e3:9.1f} us  /LT {min(before, after) / ms:.3f}  "
                  f"err {err:.1e}  {'ok' if err < 2e-3 else 'FAIL'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raster", nargs="?", type=int, default=0)
    parser.add_argument("--shapes", help="MxNxK,... (default: the module's SHAPES)")
    parser.add_argument("--pick", action="store_true", help="only default selection's kernel, every raster order")
    parser.add_argument("--rasters", default="0,1,2", help="with --pick: these raster orders")
    parser.add_argument("--swizzles", default=",".join(map(str, SWIZZLES)), help="with --pick: these swizzles")
    args = parser.parse_args()
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes.split(",")] if args.shapes else SHAPES
    if args.pick:
        return picked(shapes, [int(r) for r in args.rasters.split(",")], [int(z) for z in args.swizzles.split(",")])
    raster = args.raster
    fam = catalog.load("sm90")
    tiles = [t for t in fam.tiles if t[0] in ((128, 256, 64), (256, 128, 64), (128, 128, 128)) and t[5] == "persistent"]
    rng = cupy.random.default_rng(0)
    for m, n, k in shapes:
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
        x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        sw = cs.compress(w)
        y_dense = cupy.matmul(w, x)
        ref = reference.to_float32(y_dense)
        dense_ms = reference.kernel_median_ms(lambda: cupy.matmul(w, x, out=y_dense))
        run, _ = cusparselt(w, x)
        cslt_ms = reference.kernel_median_ms(run)
        y = cupy.empty((m, n), dtype=cupy.float16)
        rows = []
        for tile in tiles:
            for swizzle in (1, 2, 4, 8):
                config = dataclasses.replace(fam.config(tile, "f16", "f16", "row", 8, 8), swizzle=swizzle,
                                             raster=raster)
                y.fill(0)
                cs.matmul(sw, x, out=y, config=config)
                err = reference.relative_error(y, ref)
                ms = reference.kernel_median_ms(lambda: cs.matmul(sw, x, out=y, config=config))
                rows.append((cslt_ms / ms, ms, tile, swizzle, err))
        rows.sort(reverse=True, key=lambda r: r[0])
        print(f"\nraster {raster} {m}x{n}x{k}: dense {dense_ms * 1e3:.1f} us, cuSPARSELt {cslt_ms * 1e3:.1f} us", flush=True)
        for vs_lt, ms, tile, swizzle, err in rows[:5]:
            print(f"  {'x'.join(map(str, tile[0]))} c{tile[3][0]}x{tile[3][1]} swz{swizzle}  {ms * 1e3:8.1f} us  "
                  f"/LT {vs_lt:.3f}  /dense {dense_ms / ms:.3f}  err {err:.1e}  {'ok' if err < 2e-3 else 'FAIL'}",
                  flush=True)


if __name__ == "__main__":
    main()
