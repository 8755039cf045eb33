#!/usr/bin/env python3
"""Host time of the eager calls, this tree against an older copy of the package, in one
process (GPU machine): the older tree's package renamed (cutlass_sparse_old, imported from
--old's folder; the package imports itself relatively), every row of both packages
measured in turn, round after round, so the host's drift falls on both alike. Each row:
the minimum and the median over rounds of a round's mean.

    python scripts/device/ab_host.py --old ab_old --rounds 15
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_eager import host_us  # noqa: E402   one round: the mean host time of back-to-back calls

SHAPE = (128, 64, 128)   # bench_eager's HOST_SHAPE: the GPU time is far below the host's


def rows_of(cs, torch, cupy) -> dict:
    """The timed calls of one package, each checked once against torch.mm."""
    m, n, k = SHAPE
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(k, n, device="cuda").half()
    tokens = x.T.contiguous()   # [N, K]: cs.linear(tokens, sw) is (w @ x).T
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    planned = cs.plan(sw, x)
    xc, outc, tokens_c = cupy.asarray(x), cupy.asarray(out), cupy.asarray(tokens)
    planned_c = cs.plan(sw, xc)
    ref = w.float() @ x.float()
    for y in (cs.matmul(sw, x), planned(x), cs.linear(tokens, sw).T, torch.as_tensor(cs.matmul(sw, xc))):
        err = float((y.float() - ref).norm() / ref.norm())
        assert err < 1e-2, err
    rows = {
        "cs.matmul(sw, x)": lambda: cs.matmul(sw, x),
        "cs.matmul(sw, x, out=y)": lambda: cs.matmul(sw, x, out=out),
        "cs.linear(tokens, sw)": lambda: cs.linear(tokens, sw),
        "plan(x)": lambda: planned(x),
        "plan(x, out=y)": lambda: planned(x, out=out),
        "torch.mm(w, x)": lambda: torch.mm(w, x),
        "cs.matmul(sw, x) [cupy]": lambda: cs.matmul(sw, xc),
        "cs.linear(tokens, sw) [cupy]": lambda: cs.linear(tokens_c, sw),
        "plan(x, out=y) [cupy]": lambda: planned_c(xc, out=outc),
    }
    for call in rows.values():   # warm: every plan made, every launch built
        for _ in range(20):
            call()
    torch.cuda.synchronize()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="folder holding cutlass_sparse_old")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(args.old).resolve()))
    import cupy
    import torch

    packages = {"old": importlib.import_module("cutlass_sparse_old"), "new": importlib.import_module("cutlass_sparse")}
    rows = {name: rows_of(cs, torch, cupy) for name, cs in packages.items()}
    times = {(name, row): [] for name in rows for row in rows[name]}
    for _ in range(args.rounds):
        for row in rows["new"]:
            for name in rows:
                times[(name, row)].append(host_us(torch, rows[name][row], calls=300))
    new_n = new_n_us(packages, torch)
    print(f"host us per call ({'x'.join(map(str, SHAPE))} f16), {args.rounds} rounds of 300 calls, "
          f"packages alternated row by row: min / median of the rounds' means")
    print(f"  {'call':32s}{'old':>16s}{'new':>16s}")
    for row in rows["new"]:
        cells = "".join(f"{min(times[(n, row)]):8.1f}{statistics.median(times[(n, row)]):8.1f}" for n in rows)
        print(f"  {row:32s}{cells}")
    print("a new N at every call (cs.linear, 4096x4096 f16, N = 1..512 after a warm-up pass over the ranges, "
          "the packages alternated call by call): median " + ", ".join(f"{k} {v:.1f} us" for k, v in new_n.items()))
    return 0


def new_n_us(packages: dict, torch) -> dict:
    """Median host time of cs.linear at N = 1..512, each N new to both packages."""
    w = torch.randn(4096, 4096, device="cuda").half() * 0.02
    weights = {name: cs.compress(cs.prune_2to4(w)) for name, cs in packages.items()}
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in range(1, 513)}
    for n in sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512) for d in (0, 1)}):
        for name, cs in packages.items():
            cs.linear(xs[n], weights[name])
    for n in xs:   # torch's allocator sees each size first here, not in the timed loop
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    times = {name: [] for name in packages}
    for n in xs:
        for name, cs in packages.items():
            start = time.perf_counter()
            cs.linear(xs[n], weights[name])
            times[name].append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return {name: statistics.median(t) for name, t in times.items()}


if __name__ == "__main__":
    raise SystemExit(main())
