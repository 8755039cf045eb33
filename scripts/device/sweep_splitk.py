"""Sweep sm90 kernels and K decompositions (data-parallel, split-K 2..8, stream-K) over the
shapes where M x N has few tiles; kernel-only timing, every result verified against a
dense reference. Prints the eight fastest per shape. Used to calibrate selection's
split-K cost (output: docs/tune90_splitk_h100.log). Run from the repository root."""
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]

import cupy  # noqa: E402

from cutlass_sparse import catalog, reference, selection, sm90, warmup  # noqa: E402
from problem import sm90_problem  # noqa: E402  (scripts/device/problem.py)

SHAPES = [(4096, 16, 4096), (4096, 128, 4096), (4096, 512, 4096), (11008, 512, 4096), (11008, 128, 4096),
          (4096, 16, 11008), (4096, 4096, 4096)]
# Beyond the catalog: narrow N tiles for decode shapes (both compile with NVRTC) and a wide
# stream-K tile. (threadblock, cluster, schedule, tile scheduler)
EXTRA = [((128, 256, 128), (1, 1, 1), "cooperative", "streamk"),
         ((256, 128, 128), (2, 1, 1), "cooperative", "streamk"),
         ((128, 32, 128), (1, 1, 1), "cooperative", "streamk"),
         ((128, 16, 128), (1, 1, 1), "cooperative", "streamk"),
         ((64, 32, 128), (1, 1, 1), "pingpong", "persistent")]


def candidates():
    fam = catalog.load("sm90")
    tiles = list(fam.tiles) + [(tb, (4, 1, 1), 0, cl, sched, ts) for tb, cl, sched, ts in EXTRA]
    return [fam.config(t, "f16", "f16", "row", 8, 8) for t in tiles]


def schedulings(config, k):
    if config.tile_scheduler != "streamk":
        return [sm90.Scheduling()]
    k_tiles = -(-k // config.threadblock[2])
    return ([sm90.Scheduling(), sm90.Scheduling("stream_k", 1)]
            + [sm90.Scheduling.split_k(s) for s in (2, 3, 4, 6, 8) if s <= k_tiles])


def main():
    configs = candidates()
    results = warmup.compile_all(configs, "sm_90a", 16)
    print("compile:", [r[2] for r in results], flush=True)
    rng = cupy.random.default_rng(0)
    for m, n, k in SHAPES:
        sw, x, ref, y, ldb = sm90_problem(m, n, k, rng)
        rows = []
        for config in configs:
            for sched in schedulings(config, k):
                def call():
                    sm90.matmul(sw, x, y, y, 1.0, 0.0, config, ldb, n, n, None, sched)
                try:
                    y[...] = cupy.nan
                    call()
                    err = reference.relative_error(y, ref)
                    ms = reference.kernel_median_ms(call, calls=20, replays=7)
                    rows.append((2 * m * n * k / ms / 1e9, ms * 1e3, config, sched, err))
                except Exception as exc:  # reported, the sweep goes on
                    print("  failed", config.name, sched, str(exc)[:100], flush=True)
        rows.sort(key=lambda r: -r[0])
        print(f"{m}x{n}x{k}:", flush=True)
        for tflops, us, config, sched, err in rows[:8]:
            tb, cl = config.threadblock, config.cluster
            print(f"  {tflops:7.1f} TFLOP/s {us:8.1f} us  {tb[0]}x{tb[1]} c{cl[0]}x{cl[1]} {config.schedule[:4]} "
                  f"{config.tile_scheduler:10s} {sched.decomposition}/{sched.splits}  err {err:.1e}"
                  + ("" if err < 1e-2 else "  WRONG"), flush=True)
        tile, splits = selection.choose_sm90(m, n, k, 132)
        print(f"  selection picks {tile[0]} {tile[5]} splits {splits}", flush=True)


if __name__ == "__main__":
    main()
