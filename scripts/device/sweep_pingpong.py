#!/usr/bin/env python3
"""Issues 13 and 15 (GPU machine): ping-pong schedules for the large tiles. Every large
sm90 tile the catalogs hold is cooperative: both consumer warp groups share one tile, and
the tile's epilogue runs while no MMA does. In a ping-pong kernel each warp group owns a
tile (128x128, or 64x256: the same 128 accumulator registers a thread as cooperative
128x256) and one group's epilogue overlaps the other's mainloop. This sweep times them
against the library's choice at the n >= 512 rows where ours trail cuSPARSELt, kernel-
only, beside dense and cuSPARSELt, every result checked (sweep_decode_k's loop).
Run from the repository root: python scripts/device/sweep_pingpong.py [--dtype D ...] [--compile-only]"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from sweep_decode_k import run_sweep  # noqa: E402

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (4096, 512, 4096), (14336, 512, 4096),
          (28672, 512, 8192), (28672, 4096, 8192), (8192, 512, 28672)]
# (threadblock, cluster), ping-pong: 16-bit tiles take K 64 or 128, 8-bit ones K 128 or 256
TILES = {"f16": [((128, 128, 64), (2, 1, 1)), ((128, 128, 64), (1, 2, 1)), ((64, 256, 64), (2, 1, 1)),
                 ((128, 128, 128), (1, 2, 1))],
         "e4m3": [((128, 128, 128), (2, 1, 1)), ((128, 128, 128), (1, 2, 1)), ((64, 256, 128), (2, 1, 1)),
                  ((64, 256, 128), (1, 1, 1)), ((128, 128, 256), (1, 2, 1))]}
TILES["s8"] = TILES["e4m3"]
# `--round 2`, after round 1 (docs/sweep_pingpong_h100.log: ping-pong lost at every row but
# one, s8 28672x512x8192, where 128x128x256 c1x2 ping-pong matched cuSPARSELt and the
# chosen 256x128 trailed by 9%): the 512-token rows, each with the 128x128 tile the
# catalogs pick at 4096x512 (K 128 for f16, 256 for 8-bit), cooperative and ping-pong.
CO = "cooperative"
ROUND2_SHAPES = [(14336, 512, 4096), (28672, 512, 8192), (8192, 512, 28672), (4096, 512, 14336),
                 (6144, 512, 4096), (11008, 512, 4096), (4096, 512, 4096)]
ROUND2 = {"f16": [((128, 128, 128), (1, 2, 1), CO), ((128, 128, 128), (1, 2, 1), "pingpong")],
          "e4m3": [((128, 128, 256), (1, 2, 1), CO), ((128, 128, 256), (1, 2, 1), "pingpong")]}
ROUND2["s8"] = ROUND2["e4m3"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="*", default=["f16", "e4m3", "s8"], choices=list(TILES))
    parser.add_argument("--round", type=int, default=1, choices=[1, 2], help="2: ROUND2 at ROUND2_SHAPES")
    parser.add_argument("--compile-only", action="store_true", help="compile the candidates and stop")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    tiles, shapes = (TILES, SHAPES) if args.round == 1 else (ROUND2, ROUND2_SHAPES)
    run_sweep(args.dtype, tiles, shapes, args.jobs, args.compile_only, flops=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
