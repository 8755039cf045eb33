"""Sweep sm90 kernels for the compute-bound shapes: the catalog's large tiles, tiles and
clusters beyond it, and the tile scheduler's run-time rasterization (swizzle 1/2/4,
raster heuristic / along M / along N) for the two fastest. Kernel-only timing, every
result verified against a dense reference. Output: docs/tune90_large_h100.log.
Run from the repository root."""
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import cupy  # noqa: E402

from cutlass_sparse import catalog, reference, sm90, warmup  # noqa: E402
from problem import sm90_problem  # noqa: E402  (scripts/device/problem.py)

SHAPES = [(8192, 8192, 8192), (16384, 16384, 16384), (4096, 4096, 4096), (11008, 4096, 4096)]
# (threadblock, cluster, schedule)
TILES = [((256, 128, 128), (2, 1, 1), "cooperative"), ((128, 256, 128), (1, 2, 1), "cooperative"),
         ((128, 256, 128), (2, 1, 1), "cooperative"), ((256, 128, 128), (1, 2, 1), "cooperative"),
         ((256, 128, 128), (2, 2, 1), "cooperative"), ((128, 128, 128), (1, 2, 1), "pingpong")]
RASTERS = {0: "heuristic", 1: "along M", 2: "along N"}


def candidates():
    fam = catalog.load("sm90")
    return [fam.config((tb, (4, 1, 1), 0, cl, sched, "persistent"), "f16", "f16", "row", 8, 8)
            for tb, cl, sched in TILES]


def set_raster(raster: int) -> None:
    """The setup entry's raster argument (a run-time choice; built Params are dropped)."""
    sm90.RASTER = raster
    sm90._params_cache.clear()
    sm90._prepared.clear()


def main():
    configs = candidates()
    print("compile:", [r[2] for r in warmup.compile_all(configs, "sm_90a", 16)], flush=True)
    rng = cupy.random.default_rng(0)
    for m, n, k in SHAPES:
        sw, x, ref, y, ldb = sm90_problem(m, n, k, rng)

        def measure(config, swizzle=1, raster=0):
            import dataclasses

            set_raster(raster)
            config = dataclasses.replace(config, swizzle=swizzle)

            def call():
                sm90.matmul(sw, x, y, y, 1.0, 0.0, config, ldb, n, n, None)
            try:
                y[...] = cupy.nan
                call()
                err = reference.relative_error(y, ref)
                ms = reference.kernel_median_ms(call, calls=10, replays=7)
                return (2 * m * n * k / ms / 1e9, config, swizzle, raster, err)
            except Exception as exc:  # reported, the sweep goes on
                print("  failed", config.name, swizzle, raster, str(exc)[:120], flush=True)
                return None

        rows = [r for r in (measure(c) for c in configs) if r]
        rows.sort(key=lambda r: -r[0])
        for _, config, _, _, _ in rows[:2]:
            rows += [r for r in (measure(config, s, ra) for s in (1, 2, 4) for ra in RASTERS
                                 if (s, ra) != (1, 0)) if r]
        rows.sort(key=lambda r: -r[0])
        print(f"{m}x{n}x{k}:", flush=True)
        for tflops, config, swizzle, raster, err in rows[:10]:
            tb, cl = config.threadblock, config.cluster
            print(f"  {tflops:7.1f} TFLOP/s  {tb[0]}x{tb[1]} c{cl[0]}x{cl[1]} {config.schedule[:4]} swizzle {swizzle} "
                  f"raster {RASTERS[raster]}  err {err:.1e}" + ("" if err < 1e-2 else "  WRONG"), flush=True)
    set_raster(0)


if __name__ == "__main__":
    main()
