#!/usr/bin/env python3
"""Issues 13 and 15 (GPU machine): at 512 tokens the tile the library picks often leaves
the last wave part-empty (6144x512 with 128x256 tiles: 96 tiles on 132 SMs; 14336x512:
224 tiles, 1.7 waves). CUTLASS's stream-K scheduler can spread that remainder over every
SM. For each shape, the library's persistent kernel against the same tile and cluster on
the stream-K scheduler, with its heuristic (data-parallel waves plus a stream-K
remainder) and with pure stream-K, beside dense and cuSPARSELt, kernel-only, every
result checked (sweep_void_c's operands and checks). Stream-K launches include the
memset of their reduction barriers. Run from the repository root:
python scripts/device/sweep_streamk.py [dtype ...] [--compile-only]"""
import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.describe import dtypes  # noqa: E402
from cutlass_sparse.describe.problem import Epilogue, Problem  # noqa: E402
from cutlass_sparse.launch.sm90 import Sm90Plan  # noqa: E402
from cutlass_sparse.launch.sm90_choice import Scheduling, resolve  # noqa: E402
from sweep_void_c import compile_candidates, KINDS, as_float32, check, operands  # noqa: E402

SHAPES = [(4096, 512, 4096), (6144, 512, 4096), (11008, 512, 4096), (14336, 512, 4096), (4096, 512, 14336),
          (8192, 512, 28672), (28672, 512, 8192), (4096, 4096, 4096), (11008, 4096, 4096)]
DECOMPOSITIONS = ("heuristic", "stream_k")


def problem_for(dtype, m, n, k, alpha=1.0):
    out, layout_b, _, _ = KINDS[dtype]
    problem = Problem.contiguous("sm90", m, n, k, element=dtype, element_out=out, layout_b=layout_b)
    return dataclasses.replace(problem, epilogue=Epilogue(alpha=alpha))


def kernels(dtype):
    """The library's choice at each shape and its stream-K twin (same tile, cluster, swizzle)."""
    chosen = {shape: resolve(problem_for(dtype, *shape), None)[0] for shape in SHAPES}
    twins = {c: dataclasses.replace(c, tile_scheduler="streamk") for c in chosen.values()}
    return chosen, twins


def label(config, decomposition=""):
    tb = "x".join(map(str, config.threadblock))
    return f"{tb:11} c{config.cluster[0]}x{config.cluster[1]} swz{config.swizzle} {decomposition or 'persistent'}"


def checked_plan(problem, config, decomposition, run):
    """(plan, ok, what): the config's plan under the decomposition (None: its own), run once
    on run = (sw, x, d, reference, dtype) and checked."""
    sw, x, d, ref, dtype = run
    plan = Sm90Plan(problem, config)
    if decomposition:
        plan.scheduling = Scheduling(decomposition, 1)
        plan._block = plan._setup_block()
    d.fill(0)
    plan.launch_direct(sw, x.data.ptr, d.data.ptr)
    return (plan, *check(as_float32(d, dtype), ref, dtype))


def sweep(dtype, rng):
    chosen, twins = kernels(dtype)
    out = KINDS[dtype][0]
    for shape in SHAPES:
        m, n, k = shape
        sw, x, ref, alpha, peers = operands(dtype, m, n, k, rng)
        flops = 2.0 * m * n * k
        line = [f"{dtype} {m}x{n}x{k}"]
        for name, run in peers.items():
            line.append(f"{name} {flops / reference.kernel_median_ms(run) / 1e9:6.0f}")
        problem = problem_for(dtype, m, n, k, alpha)
        d = cupy.empty((m, n), dtype=dtypes.numpy_dtype(out))
        runs = [(chosen[shape], None)] + [(twins[chosen[shape]], s) for s in DECOMPOSITIONS]
        for config, decomposition in runs:
            try:
                plan, ok, what = checked_plan(problem, config, decomposition, (sw, x, d, ref, dtype))
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, x.data.ptr, d.data.ptr))
                line.append(f"| {label(config, decomposition)} {flops / ms / 1e9:6.0f}{'' if ok else ' FAIL ' + what}")
            except Exception as exc:   # noqa: BLE001 - a sweep reports and goes on
                line.append(f"| {label(config, decomposition)}: {type(exc).__name__}: {str(exc)[:160]}")
        print("  ".join(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dtypes", nargs="*", help="of f16, bf16, e4m3, s8; default: f16 e4m3 s8")
    parser.add_argument("--compile-only", action="store_true", help="compile the candidates and stop")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    args.dtypes = args.dtypes or ["f16", "e4m3", "s8"]
    items = []
    for dtype in args.dtypes:
        chosen, twins = kernels(dtype)
        items += [(c, "sm_90a") for c in {*chosen.values(), *twins.values()}]
    compile_candidates(items, args.jobs)
    if args.compile_only:
        return
    rng = cupy.random.default_rng(0)
    for dtype in args.dtypes:
        sweep(dtype, rng)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
