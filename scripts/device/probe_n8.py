#!/usr/bin/env python3
"""Why decode at N = 8 runs longer than at N = 16 on the same kernel (GPU machine; session
24 noticed it: 4096x8x14336 26.4 us against 19.2 on the H200). Kernel-only times
(reference.kernel_median_ms, the bench's method) of cs.matmul at N = 8 and 16 with x
row-major (as the bench passes it) and column-major (as cs.linear's x.T reads), every
result checked against the dense one; then Nsight Compute's launch, occupancy, memory
and warp-state sections for the row-major N = 8 and 16 kernels at 4096x?x14336.

    python scripts/device/probe_n8.py
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.cli import bench_ncu  # noqa: E402

SHAPES = ((4096, 14336), (14336, 4096), (8192, 28672))
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "MemoryWorkloadAnalysis", "WarpStateStats",
            "SchedulerStats")
# report lines worth reading side by side
KEEP = re.compile(r"Duration|DRAM Throughput|Memory Throughput|L1/TEX Hit|L2 Hit|Grid Size|Registers|"
                  r"Shared Memory Configuration Size|Achieved Occupancy|Warp Cycles Per Issued|"
                  r"Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Mem Busy|Max Bandwidth|"
                  r"Cluster Size|Waves Per SM|Block Size")


def timed(m: int, n: int, k: int, x_layout: str, rng) -> tuple[float, str]:
    w = cs.prune_2to4(cupy.asarray(rng.standard_normal((m, k), dtype=np.float32) * k ** -0.5).astype(cupy.float16))
    x = cupy.asarray(rng.standard_normal((k, n), dtype=np.float32)).astype(cupy.float16)
    if x_layout == "col":
        x = cupy.asfortranarray(x)
    sw = cs.compress(w)
    y = cs.matmul(sw, x)
    info = {}
    cs.matmul(sw, x, out=y, info=info)
    err = reference.relative_error(y, reference.to_float32(cupy.matmul(w, x)))
    assert err < 1e-2, (m, n, k, x_layout, err)
    return reference.kernel_median_ms(lambda: cs.matmul(sw, x, out=y)) * 1e3, info["config"]


def main() -> int:
    rng = np.random.default_rng(0)
    names = {}
    print(f"{'shape':>16} {'x':>4} {'us':>8}  kernel")
    for m, k in SHAPES:
        for n in (8, 16):
            for layout in ("row", "col"):
                us, config = timed(m, n, k, layout, rng)
                names[(m, n, k, layout)] = config
                print(f"{m:>6}x{n:>2}x{k:<6} {layout:>4} {us:8.2f}  {config}", flush=True)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("ncu is not on PATH")
        return 0
    for n in (8, 16):
        row = {"m": 4096, "n": n, "k": 14336, "dtype": "f16", "config": names[(4096, n, 14336, "row")]}
        argv = bench_ncu.command(row, ncu)
        at = argv.index("SpeedOfLight")
        argv[at - 1:at + 1] = [a for s in SECTIONS for a in ("--section", s)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=240)
        print(f"\nncu 4096x{n}x14336 row-major x (rc {done.returncode}):")
        print("\n".join(line for line in done.stdout.splitlines() if KEEP.search(line)) or done.stdout[-2000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
