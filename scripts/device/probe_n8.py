#!/usr/bin/env python3
"""Why decode at N = 8 runs longer than at N = 16 on the same kernel (GPU machine; session
24 noticed it: 4096x8x14336 26.4 us against 19.2 on the H200). Kernel-only times
(reference.kernel_median_ms, the bench's method) of cs.matmul at N = 8 and 16 with x
row-major (as the bench passes it) and column-major (as cs.linear's x.T reads), every
result checked against the dense one; then Nsight Compute's launch, occupancy, memory
and warp-state sections for the row-major N = 8 and 16 kernels at 4096x?x14336.

    python scripts/device/probe_n8.py
    python scripts/device/probe_n8.py --tile8   # the pick against its tile at N = 8 (64x8x256)
    python scripts/device/probe_n8.py --n1-store   # one token: D column-major, TMA store or from registers

--tile8: at N = 8 and 4 with x row-major, default selection's kernel against the same
kernel with an 8-wide tile (x's 16-byte rows fill its TMA box), rounds alternated, every
result checked (f16; the two kernels compiled here and carried).
"""
from __future__ import annotations

import argparse
import dataclasses

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


TILE8_SHAPES = ((4096, 14336), (14336, 4096), (6144, 4096), (8192, 28672), (28672, 8192))


def alternated(calls, rounds: int) -> list[float]:
    """Median us per call of each callable (kernel-only), their rounds alternated."""
    times = [[] for _ in calls]
    for _ in range(rounds):
        for i, call in enumerate(calls):
            times[i].append(reference.kernel_median_ms(call, 20, 7) * 1e3)
    return [sorted(t)[len(t) // 2] for t in times]


def tile8(rounds: int = 5) -> int:
    from cutlass_sparse.describe import selection

    rng = np.random.default_rng(1)
    print(f"{'shape':>16} {'pick us':>9} {'64x8 us':>9}  (median of {rounds} rounds, alternated)  pick")
    for m, k in TILE8_SHAPES:
        w = cs.prune_2to4(cupy.asarray(rng.standard_normal((m, k), dtype=np.float32) * k ** -0.5).astype(cupy.float16))
        sw = cs.compress(w)
        for n in (8, 4):
            x = cupy.asarray(rng.standard_normal((k, n), dtype=np.float32)).astype(cupy.float16)
            ref = reference.to_float32(cupy.matmul(w, x))
            pick = selection.config_for_shape(m, n, k, "f16", "f16", "row", 132, "sm90")
            narrow = dataclasses.replace(pick, threadblock=(64, 8, 256))
            calls = []
            for config in (pick, narrow):
                y = cupy.full((m, n), cupy.nan, dtype=cupy.float16)
                cs.matmul(sw, x, out=y, config=config)
                err = reference.relative_error(y, ref)
                assert err < 1e-2, (m, n, k, config.name, err)
                calls.append(lambda config=config, y=y: cs.matmul(sw, x, out=y, config=config))
            med = alternated(calls, rounds)
            print(f"{m:>6}x{n:>2}x{k:<6} {med[0]:9.2f} {med[1]:9.2f}  {med[0] / med[1]:.3f}x  {pick.name}", flush=True)
    return 0


def allow_column_direct_store() -> None:
    """Let the direct store (a wish measured on row-major D only) be taken with a
    column-major D too, in this process: CUTLASS's register-to-global epilogue takes any
    D stride. The kernel it names was compiled with the same patch and carried."""
    from cutlass_sparse.describe.description import SparseGemmConfig

    rule = SparseGemmConfig.stores_directly.fget
    SparseGemmConfig.stores_directly = property(
        lambda c: rule(dataclasses.replace(c, layout_c="row") if c.layout_c == "col" else c))


def n1_configs(m: int, k: int):
    """(TMA store, direct store) kernels of a one-token call of this shape (f16)."""
    from cutlass_sparse.describe import selection

    pick = selection.config_for_shape(m, 1, k, "f16", "f16", "row", 132, "sm90")
    return dataclasses.replace(pick, direct_store=False), dataclasses.replace(pick, direct_store=True)


def n1_store(rounds: int = 5) -> int:
    allow_column_direct_store()
    rng = np.random.default_rng(2)
    print(f"{'shape':>16} {'TMA us':>9} {'direct us':>9}  (median of {rounds} rounds, alternated)")
    for m, k in TILE8_SHAPES:
        w = cs.prune_2to4(cupy.asarray(rng.standard_normal((m, k), dtype=np.float32) * k ** -0.5).astype(cupy.float16))
        sw = cs.compress(w)
        x = cupy.asarray(rng.standard_normal((k, 1), dtype=np.float32)).astype(cupy.float16)
        ref = reference.to_float32(cupy.matmul(w, x))
        calls, names = [], []
        for config in n1_configs(m, k):
            y = cupy.full((m, 1), cupy.nan, dtype=cupy.float16)
            info = {}
            cs.matmul(sw, x, out=y, config=config, info=info)
            err = reference.relative_error(y, ref)
            assert err < 1e-2, (m, k, config.name, err)
            calls.append(lambda config=config, y=y: cs.matmul(sw, x, out=y, config=config))
            names.append(info["config"])
        med = alternated(calls, rounds)
        print(f"{m:>6}x 1x{k:<6} {med[0]:9.2f} {med[1]:9.2f}  {med[0] / med[1]:.3f}x  {names[1]}", flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tile8", action="store_true")
    parser.add_argument("--n1-store", action="store_true")
    args = parser.parse_args()
    if args.tile8:
        return tile8()
    if args.n1_store:
        return n1_store()
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
