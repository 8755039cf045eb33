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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", nargs="*", default=["f16", "e4m3", "s8"], choices=list(TILES))
    parser.add_argument("--compile-only", action="store_true", help="compile the candidates and stop")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    run_sweep(args.dtype, TILES, SHAPES, args.jobs, args.compile_only, flops=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
