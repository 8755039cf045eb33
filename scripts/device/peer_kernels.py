#!/usr/bin/env python3
"""Which kernels cuSPARSELt runs (issues 13 and 15): its chosen algorithm for f16, e4m3 and
s8 at 8192^3 and for f16 at 4096x16x4096, called inside an NVTX range "peer" so Nsight
Compute profiles those calls only (not the algorithm search):

    ncu --nvtx --nvtx-include "peer/" --section LaunchStats --section SpeedOfLight \
        python3 scripts/device/peer_kernels.py

The kernel names carry the tile and cluster; LaunchStats gives grid, block, cluster and
shared memory. Run from the repository root."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.cli import bench, bench_quantized  # noqa: E402
from cutlass_sparse.formats.quantize import quantize, quantize_e4m3  # noqa: E402

CASES = [("f16", 8192, 8192, 8192), ("e4m3", 8192, 8192, 8192), ("s8", 8192, 8192, 8192), ("f16", 4096, 16, 4096)]


def main():
    rng = cupy.random.default_rng(0)
    for dtype, m, n, k in CASES:
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32))
        if dtype == "f16":
            run = bench.cusparselt(w.astype(cupy.float16), rng.standard_normal((k, n), dtype=cupy.float32)
                                   .astype(cupy.float16))[0]
        else:
            quant = (lambda a: quantize_e4m3(a, axis=None)[0]) if dtype == "e4m3" else \
                (lambda a: quantize(a, "s8", axis=1)[0])
            run = bench_quantized.peers(quant(w), quant(rng.standard_normal((n, k), dtype=cupy.float32)),
                                        dtype)["cslt"]
        run()
        torch.cuda.synchronize()
        print(f"{dtype} {m}x{n}x{k}", flush=True)
        torch.cuda.nvtx.range_push("peer")
        run()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
