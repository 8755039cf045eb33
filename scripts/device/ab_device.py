#!/usr/bin/env python3
"""Device time (host included) of the eager rows bench_eager times, this tree against an
older copy of the package (ab_host.py's cutlass_sparse_old), rows alternated between the
packages round by round: the decode loop of 32 MLP blocks at 1 and 16 tokens, and
cs.matmul at N = 7 and 8 (a staged odd N against a direct even one); then a profile of
the new package's slowest row. --rows n1: cs.matmul at one token on the LLM projections
(torch eager, and kernel-only as scripts/bench.py times it: CuPy, out= the first result).
--rows n8: decode at N = 1, 4 and 8 in f16 and bf16, x either way, and cs.linear's step
(the 8-wide decode tile); --compile first, on the CPU machine, to carry their kernels.

    python scripts/device/ab_device.py --old ab_old --rounds 5 [--rows n1|n8]
    python scripts/device/ab_device.py --old ab_old --rows n8 --compile
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_eager import device_ms, relative_error  # noqa: E402


def rows_of(cs, torch) -> dict:
    rows = {}
    width, hidden = 4096, 11008
    w_up = cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5)
    w_down = cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5)
    s_up, s_down = cs.compress(w_up), cs.compress(w_down)
    act = torch.nn.functional.silu
    for tokens in (1, 16):
        x = torch.randn(tokens, width, device="cuda").half()
        block = (lambda x=x: cs.linear(cs.linear(x, s_up, activation="silu"), s_down))
        ref = torch.mm(act(torch.mm(x, w_up.T)), w_down.T)
        assert relative_error(block(), ref) < 2e-2

        def layers(block=block):
            for _ in range(32):
                y = block()
            return y
        rows[f"decode x32, {tokens} tokens"] = (layers, 3)
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half())
    sw = cs.compress(w)
    for n in (7, 8):
        x = torch.randn(4096, n, device="cuda").half()
        assert relative_error(cs.matmul(sw, x), w.float() @ x.float()) < 2e-2
        rows[f"cs.matmul 4096x{n}x4096"] = ((lambda x=x: cs.matmul(sw, x)), 20)
    return rows


N1_SHAPES = ((4096, 14336), (14336, 4096), (6144, 4096), (8192, 28672), (28672, 8192))


def n1_rows_of(cs, torch) -> dict:
    """cs.matmul at N = 1, f16: eager on torch tensors (device time, host included) and
    kernel-only (reference.kernel_median_ms, the bench's method: out= the first result)."""
    import cupy

    rows = {}
    for m, k in N1_SHAPES:
        w = cs.prune_2to4(torch.randn(m, k, device="cuda").half() * k ** -0.5)
        sw = cs.compress(w)
        x = torch.randn(k, 1, device="cuda").half()
        ref = w.float() @ x.float()
        assert relative_error(cs.matmul(sw, x), ref) < 2e-2
        rows[f"eager {m}x1x{k}"] = ((lambda sw=sw, x=x: cs.matmul(sw, x)), 20, "eager")
        xc = cupy.asarray(x)
        yc = cs.matmul(sw, xc)
        assert relative_error(torch.as_tensor(yc, device="cuda"), ref) < 2e-2
        rows[f"kernel {m}x1x{k}"] = ((lambda sw=sw, xc=xc, yc=yc: cs.matmul(sw, xc, out=yc)), 20, "kernel")
    return rows


DTYPES = ("f16", "bf16")
# (N, x layout) of the decode rows: a row-major x as cs.matmul takes it, a column-major one as
# cs.linear reads its tokens; [K, 1] reads as a column either way
N8_CASES = ((1, "col"), (4, "row"), (4, "col"), (8, "row"), (8, "col"))


def n8_rows_of(cs, torch) -> dict:
    """cs.matmul at N = 1, 4 and 8, f16 and bf16, x row- and column-major, kernel-only (the
    bench's method), and cs.linear's eager decode step at 1 and 8 tokens (torch, device
    time, host included); every result checked against the dense one. Kernel rows pass
    torch tensors: reference.kernel_median_ms times them on the same (default) stream."""
    rows = {}
    for m, k in N1_SHAPES:
        for dtype in DTYPES:
            torch_dtype = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[dtype])
            w = cs.prune_2to4((torch.randn(m, k, device="cuda") * k ** -0.5).to(torch_dtype))
            sw = cs.compress(w)
            for n, layout in N8_CASES:
                x = torch.randn(k, n, device="cuda").to(torch_dtype)
                if layout == "col":
                    x = x.T.contiguous().T
                y = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype)
                cs.matmul(sw, x, out=y)
                assert relative_error(y, w.float() @ x.float()) < 2e-2, (m, n, k, dtype, layout)
                rows[f"kernel {dtype} {m}x{n}x{k} x {layout}"] = (
                    (lambda sw=sw, x=x, y=y: cs.matmul(sw, x, out=y)), 20, "kernel")
            for tokens in (1, 8):
                x = torch.randn(tokens, k, device="cuda").to(torch_dtype)
                assert relative_error(cs.linear(x, sw), x.float() @ w.float().T) < 2e-2
                rows[f"linear {dtype} {m}x{tokens}x{k}"] = ((lambda sw=sw, x=x: cs.linear(x, sw)), 20, "eager")
    return rows


def n8_kernels(cs) -> list:
    """(configuration, arch) of every kernel n8_rows_of runs with package cs (no GPU: what
    to compile and carry)."""
    from importlib import import_module

    selection = import_module(cs.__name__ + ".describe.selection")
    found = []
    for m, k in N1_SHAPES:
        for dtype in DTYPES:
            for n, layout in N8_CASES:   # the linear rows' x [tokens, K] reads as (1 or 8, "col")
                config = selection.config_for_shape(m, n, k, dtype, dtype, layout, 132, "sm90")
                found.append((config.as_compiled(), "sm_90a"))
    return list(dict.fromkeys(found))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", choices=("mlp", "n1", "n8"), default="mlp")
    parser.add_argument("--compile", action="store_true",
                        help="--rows n8: compile both packages' kernels into the cache (no GPU) and stop")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(args.old).resolve()))
    packages = {"old": importlib.import_module("cutlass_sparse_old"), "new": importlib.import_module("cutlass_sparse")}
    if args.compile:
        for name, cs in packages.items():
            warmup = importlib.import_module(cs.__name__ + ".build.warmup")
            for kernel, arch, status, seconds in warmup.compile_all(
                    [c for c, _ in n8_kernels(cs)], "sm_90a"):
                print(f"{name} {status:10s} {seconds:6.1f} s  {kernel}", flush=True)
        return 0
    import torch

    make = {"n1": n1_rows_of, "n8": n8_rows_of}.get(args.rows) or (lambda cs, torch: {
        name: (*row, "eager") for name, row in rows_of(cs, torch).items()})
    rows = {name: make(cs, torch) for name, cs in packages.items()}
    times = {(name, row): [] for name in rows for row in rows[name]}
    from cutlass_sparse.reference import kernel_median_ms
    for _ in range(args.rounds):
        for row in rows["new"]:
            for name in rows:
                call, repeats, how = rows[name][row]
                ms = device_ms(torch, call, repeats, 3) if how == "eager" else kernel_median_ms(call, repeats, 5)
                times[(name, row)].append(ms * 1e3)
    print(f"us per call (eager: device time, host included; kernel: reference.kernel_median_ms), "
          f"{args.rounds} rounds, packages alternated: min / median")
    print(f"  {'row':32s}{'old':>16s}{'new':>16s}")
    for row in rows["new"]:
        cells = "".join(f"{min(times[(n, row)]):8.1f}{statistics.median(times[(n, row)]):8.1f}" for n in rows)
        print(f"  {row:32s}{cells}")
    if args.rows != "mlp":
        return 0
    import cProfile
    import pstats

    call, _, _ = rows["new"]["decode x32, 1 tokens"]
    profile = cProfile.Profile()
    profile.runcall(lambda: [call() for _ in range(20)])
    torch.cuda.synchronize()
    print("\nnew: decode x32 at 1 token, 20 loops, by cumulative time:")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
