#!/usr/bin/env python3
"""The tile scheduler's swizzle against its padding (session 29): CUTLASS rounds both tile
counts up to whole groups of swizzle x cluster tiles and runs the added tiles on zeros.
For each row, the library's pick (and with --rivals other catalog tiles) at swizzle 8, 4,
2 and 1, and cuSPARSELt; every result checked against dense
first. Short timings (the bench's: 20 calls behind a spin, median of 15, taking turns),
and with --heat S the sustained ones of sustained.py as well (GPU machine).

    python scripts/device/sweep_swizzle.py [--rows f16:5120x8192x5120,...] [--rivals tall,wide] [--heat 1.2]
    python scripts/device/sweep_swizzle.py --compile-only [--rivals tall]      # CPU machine: the kernels
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.describe import catalog, selection  # noqa: E402
from sustained import checked_calls, parse_rows, sustained_ms  # noqa: E402
from sweep_8bit_picks import library_pick  # noqa: E402

ROWS = ("f16:5120x8192x5120,f16:5120x4096x13824,f16:13824x4096x5120,f16:3072x8192x3072,f16:7168x4096x7168,"
        "f16:12288x4352x12288,f16:8192x8448x12288,f16:8448x8192x8192,f16:11008x4096x4096,f16:8192x8192x8192,"
        "bf16:5120x8192x5120")
SWIZZLES = (8, 4, 2, 1)


def contestants(dtype, m, n, k, rivals=(), swizzles=SWIZZLES, rasters=None) -> dict:
    """name -> config: the pick and each rival ("tall": the catalog's tile for the largest
    problems, "wide": its first tile, 128x256x64 c2x1 in flight, "square": 128x128x128 c1x2 in
    flight, "wide12": 128x256x64 in 1x2 clusters, in flight, "streamk": the pick on CUTLASS's
    stream-K scheduler, its heuristic decomposition) at each swizzle up to the clusters along
    the scarcer side (selection.sm90_clusters; a larger one CUTLASS would cut to a smaller one,
    repeating that one's run) and each raster order (r0 CUTLASS's heuristic, r1 along M, r2
    along N; None: the one selection gives each kernel at each swizzle, marked *)."""
    pick = library_pick(dtype, m, n, k)
    tiles = {"pick": pick}
    fam = catalog.load(catalog.for_element("sm90", dtype))
    square = next((t for t in fam.tiles if t[0] == (128, 128, 128) and t[3] == (1, 2, 1)), None)
    wide = fam.tiles[0]
    wide12 = (wide[0], wide[1], wide[2], (1, 2, 1)) + tuple(wide[4:])
    for rival, tile in (("tall", fam.mk_bounds[0][0] if fam.mk_bounds else None), ("wide", wide),
                        ("square", square), ("wide12", wide12)):
        if rival in rivals and tile is not None and (pick.threadblock, pick.cluster) != (tile[0], tile[3]):
            # the pick's operands and epilogue; wide12 (not a catalog tile) the wide tile's fields
            config = fam.config(wide if rival == "wide12" else tile, dtype, pick.element_out, pick.layout_b,
                                pick.alignment_b, pick.alignment_c, pick.element_b, reads_c=False)
            tiles[rival] = dataclasses.replace(config, layout_c=pick.layout_c, scales=pick.scales,
                                               cluster=tile[3])
    if "streamk" in rivals and pick.schedule == "cooperative":
        tiles["streamk"] = dataclasses.replace(pick, tile_scheduler="streamk")
    found = {}
    for label, config in tiles.items():
        heuristic = selection.sm90_swizzle(config.threadblock, m, n, 132, 1, config.cluster)
        for s in swizzles:
            if selection.sm90_clusters(config.threadblock, m, n, config.cluster) < s:
                continue
            padding = selection.swizzle_padding(s, config.threadblock, m, n, config.cluster)
            mark = "*" if s == heuristic else " "
            chosen = selection.sm90_raster(config.threadblock, m, n, k, 132, s,
                                           *selection.operand_items(config.element, config.b_element), config.cluster)
            for r in (chosen,) if rasters is None else rasters:
                found[f"{label} s{s}{mark} r{r}{'*' if r == chosen else ' '} pad {padding:4.0%}"] = \
                    dataclasses.replace(config, swizzle=s, raster=r)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=ROWS, help="dtype:MxNxK, comma-separated")
    parser.add_argument("--rivals", default="", help="tall, wide, square, wide12, streamk: other kernels timed "
                        "beside the pick")
    parser.add_argument("--swizzles", default=",".join(map(str, SWIZZLES)))
    parser.add_argument("--rasters", default="", help="raster orders: 0 CUTLASS's heuristic, 1 along M, 2 along N "
                        "(default: each kernel's, as selection gives it)")
    parser.add_argument("--heat", type=float, default=0.0, help="> 0: sustained timings as well")
    parser.add_argument("--compile-only", action="store_true", help="CPU machine: compile the kernels")
    args = parser.parse_args()
    rivals = args.rivals.split(",")
    swizzles = tuple(int(z) for z in args.swizzles.split(","))
    rasters = tuple(int(r) for r in args.rasters.split(",")) if args.rasters else None
    if args.compile_only:
        items = {c.name: (c, "sm_90a") for dtype, (m, n, k) in parse_rows(args.rows)
                 for c in contestants(dtype, m, n, k, rivals).values()}
        for name, _, status, seconds in warmup.compile_all(list(items.values()), None, 2):
            print(f"{status[:200]:12} {seconds:6.1f} s {name}", flush=True)
        return 0

    import cupy

    from cutlass_sparse import reference

    rng = cupy.random.default_rng(0)
    print("* the swizzle selection gives; pad: the tiles CUTLASS's scheduler adds", flush=True)
    for dtype, (m, n, k) in parse_rows(args.rows):
        calls, names = checked_calls(rng, dtype, m, n, k, contestants(dtype, m, n, k, rivals, swizzles, rasters))
        flops = 2.0 * m * n * k
        short = reference.kernel_medians_ms(calls, calls=20, replays=15)
        held = ({name: statistics.median(t) for name, t in
                 sustained_ms(calls, 2, args.heat, 0.4, 5).items()} if args.heat > 0 else {})
        print(f"\n{dtype} {m}x{n}x{k}   TFLOP/s short" + ("   at the cap" if held else ""), flush=True)
        for name in calls:
            line = f"  {name:26} {flops / short[name] / 1e9:7.1f}"
            if "cslt" in short:
                line += f" ({short['cslt'] / short[name]:.3f})"
            if held:
                line += f"   {flops / held[name] / 1e9:7.1f}" + (f" ({held['cslt'] / held[name]:.3f})" if "cslt" in held else "")
            if name in names:
                line += "  " + names[name].split("_f32_")[1][:44]
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
