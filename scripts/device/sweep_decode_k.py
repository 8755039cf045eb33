#!/usr/bin/env python3
"""Issue 13 (GPU machine): decode is bound by reading the weight, and 64 CTAs at
4096x16x4096 stream it at about 2.4 TB/s. Each TMA box of a K-128 f16 tile reads 128
bytes of every weight row per k-block (64 compressed values); the 8-bit kernels read
the same 128 bytes with K 256 and won from 512 tokens down with it. This sweep times
f16 decode tiles with K 256 (256-byte row segments, half the k-blocks) against the K-128
tiles the library picks, same cluster and schedule, kernel-only, beside dense and
cuSPARSELt, every result checked (sweep_void_c's operands and checks). `--dtype e4m3` or
`s8`: the same for the 8-bit kernels, whose K-256 tiles read 128 bytes a row; K 512 reads 256.
Run from the repository root: python scripts/device/sweep_decode_k.py [--dtype D] [--compile-only]"""
import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.describe import catalog, dtypes  # noqa: E402
from cutlass_sparse.describe.problem import Epilogue, Problem  # noqa: E402
from cutlass_sparse.launch.sm90 import Sm90Plan  # noqa: E402
from cutlass_sparse.launch.sm90_choice import resolve  # noqa: E402
from sweep_void_c import compile_candidates, KINDS, as_float32, check, operands  # noqa: E402

SHAPES = [(4096, 16, 4096), (14336, 16, 4096), (4096, 16, 14336), (6144, 16, 4096), (28672, 16, 8192),
          (8192, 16, 28672), (4096, 8, 14336), (4096, 64, 14336), (14336, 64, 4096)]
PP = "pingpong"
# (threadblock, cluster): the K-256 tiles tried beside the library's choice
TILES = {"f16": [((64, 32, 256), (4, 1, 1)), ((64, 32, 256), (1, 1, 1)), ((64, 64, 256), (1, 1, 1)),
                 ((64, 64, 256), (4, 1, 1))],
         "e4m3": [((64, 32, 512), (4, 1, 1)), ((64, 32, 512), (1, 1, 1)), ((64, 64, 512), (1, 1, 1))]}
# `--round 2`: twice the K again (512 bytes of each weight row per k-block; fewer stages fit)
ROUND2 = {"f16": [((64, 32, 512), (4, 1, 1)), ((64, 64, 512), (4, 1, 1))],
          "e4m3": [((64, 32, 1024), (4, 1, 1)), ((64, 64, 1024), (1, 1, 1))]}
ROUND2["s8"] = ROUND2["e4m3"]
# `--round 3`: N 16 (a decode step's tokens) without the 16 columns a 32-wide tile idles:
# smaller stages, more of them
ROUND3 = {"f16": [((64, 16, 256), (4, 1, 1)), ((64, 16, 256), (1, 1, 1))],
          "e4m3": [((64, 16, 512), (4, 1, 1)), ((64, 16, 512), (1, 1, 1))]}
ROUND3["s8"] = ROUND3["e4m3"]
ROUNDS = {1: TILES, 2: ROUND2, 3: ROUND3}
TILES["s8"] = TILES["e4m3"]


def problem_for(dtype, m, n, k, alpha=1.0):
    out, layout_b, _, _ = KINDS[dtype]
    problem = Problem.contiguous("sm90", m, n, k, element=dtype, element_out=out, layout_b=layout_b)
    return problem if alpha == 1.0 else dataclasses.replace(problem, epilogue=Epilogue(alpha=alpha))


def candidates(dtype, tiles, shapes):
    """({shape: the library's choice}, the tiles tried beside it). tiles: (threadblock,
    cluster[, schedule]) each, ping-pong where no schedule is named."""
    out, layout_b, align_b, align_c = KINDS[dtype]
    family = catalog.load(catalog.for_element("sm90", dtype))
    base = [family.config((tile[0], (4, 1, 1), 0, tile[1], tile[2] if len(tile) > 2 else PP, "persistent"), dtype,
                          out, layout_b, align_b, align_c, reads_c=False) for tile in tiles]
    chosen = {shape: resolve(problem_for(dtype, *shape), None)[0] for shape in shapes}
    return chosen, base


def label(config):
    tb = "x".join(map(str, config.threadblock))
    return f"{tb:10} c{config.cluster[0]}x{config.cluster[1]} {config.schedule[:4]}"


def sweep(dtype, rng, tiles, shapes, flops=False):
    """Each shape: peers, the library's choice (*) and `tiles`, timed and checked, one line.
    The rate printed: the weight's bytes per second, or (flops) TFLOP/s as 2mnk."""
    chosen, base = candidates(dtype, tiles, shapes)
    out = KINDS[dtype][0]
    item = dtypes.numpy_dtype(dtype).itemsize
    for shape in shapes:
        m, n, k = shape
        sw, x, ref, alpha, peers = operands(dtype, m, n, k, rng)
        nbytes = m * k // 2 * item + m * k // 8     # values and metadata of the sparse weight

        def rate(ms):
            return f"{2.0 * m * n * k / ms / 1e9:5.0f}TF/s" if flops else f"{nbytes / ms / 1e9:5.2f}TB/s"

        line = [f"{dtype} {m}x{n}x{k}"]
        for name, run in peers.items():
            ms = reference.kernel_median_ms(run)
            line.append(f"{name} {ms * 1e3:5.1f}us" + (f" {rate(ms)}" if flops else ""))
        d = cupy.empty((m, n), dtype=dtypes.numpy_dtype(out))
        for config in [chosen[shape]] + base:
            try:
                plan = Sm90Plan(problem_for(dtype, m, n, k, alpha),
                                dataclasses.replace(config, swizzle=chosen[shape].swizzle))
                if not plan.direct:   # x or D staged (8-bit N not in whole 16-byte rows): not timed here
                    line.append(f"| {label(config)}: staged plan, not timed here")
                    continue
                d.fill(0)
                plan.launch_direct(sw, x.data.ptr, d.data.ptr)
                ok, what = check(as_float32(d, dtype), ref, dtype)
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, x.data.ptr, d.data.ptr))
                tag = "*" if config is chosen[shape] else " "
                line.append(f"| {tag}{label(config)} {ms * 1e3:5.1f}us {rate(ms)}"
                            f"{'' if ok else ' FAIL ' + what}")
            except Exception as exc:   # noqa: BLE001 - a sweep reports and goes on
                line.append(f"| {label(config)}: {type(exc).__name__}: {str(exc)[:160]}")
        print("  ".join(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="*", default=["f16"], choices=list(TILES))
    parser.add_argument("--round", type=int, default=1, choices=list(ROUNDS), help="2, 3: the ROUND2, ROUND3 tiles")
    parser.add_argument("--compile-only", action="store_true", help="compile the candidates and stop")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    run_sweep(args.dtype, {d: ROUNDS[args.round][d] for d in args.dtype}, SHAPES, args.jobs, args.compile_only)


def run_sweep(dtypes_, tiles, shapes, jobs, compile_only, flops=False):
    """Compile every dtype's candidates (tiles[dtype]) and the library's choices, then sweep."""
    items = []
    for dtype in dtypes_:
        chosen, base = candidates(dtype, tiles[dtype], shapes)
        items += [(c, "sm_90a") for c in {*chosen.values(), *base}]
    compile_candidates(items, jobs)
    if compile_only:
        return
    rng = cupy.random.default_rng(0)
    for dtype in dtypes_:
        sweep(dtype, rng, tiles[dtype], shapes, flops)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
