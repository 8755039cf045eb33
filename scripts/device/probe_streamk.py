#!/usr/bin/env python3
"""Issue 13 (GPU machine): why CUTLASS's stream-K scheduler runs 15-30% behind the
persistent one on the same tile even where it decomposes data-parallel (sessions 17 and
30). For each row: the library's persistent pick, its stream-K twin under each
decomposition, and the twin with the producer warp group given more registers
(`load_registers`: the stream-K kernel spills at CUTLASS's 40, the persistent one does
not; nvdisasm of both cubins), each with its launch grid and workspace, kernel-only
(reference.kernel_median_ms: back-to-back calls behind a spin kernel), every result checked
against the dense product. Rows whose pick is not cooperative (ping-pong has no stream-K)
time the pick alone.
--once: run each plan once, untimed (for Nsight Compute to profile).
Run from the repository root:
python scripts/device/probe_streamk.py [--rows f16:8448x8192x8192,...] [--compile-only] [--once]"""
import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

ROWS = "f16:8448x8192x8192,f16:4096x4096x4096,f16:5120x1024x13824,f16:11008x512x4096"
DECOMPOSITIONS = ("data_parallel", "heuristic")
REGISTERS = {(128, 128): 72, (128, 256): 56}   # producer registers for each tile's twin


def kernels(rows, roomy_only=False, also=None):
    """{row: (pick, twin, twin with more producer registers)}; roomy_only: without the
    plain twin (CUTLASS's 40 producer registers, which spill). also: (threadblock, cluster)
    of a cooperative tile whose persistent kernel and roomy twin run too, at rows whose pick
    is another tile."""
    from cutlass_sparse.launch.sm90_choice import resolve, run_order
    from sweep_streamk import problem_for

    out = {}
    for dtype, shape in rows:
        pick = resolve(problem_for(dtype, *shape), None)[0]
        # where selection runs the twin (sm90_choice.tail_twin), the persistent kernel it replaced
        pick = dataclasses.replace(pick, tile_scheduler="persistent", load_registers=0)
        if pick.schedule != "cooperative":
            out[(dtype, shape)] = (pick,)
            continue
        twin = dataclasses.replace(pick, tile_scheduler="streamk")
        roomy = dataclasses.replace(twin, load_registers=REGISTERS.get(pick.threadblock[:2], 72))
        out[(dtype, shape)] = (pick, roomy) if roomy_only else (pick, twin, roomy)
        if also and (pick.threadblock, pick.cluster) != also:   # in its own swizzle and raster order
            other = run_order(problem_for(dtype, *shape), dataclasses.replace(pick, threadblock=also[0], cluster=also[1]))
            out[(dtype, shape)] += (other, dataclasses.replace(other, tile_scheduler="streamk",
                                                               load_registers=REGISTERS.get(also[0][:2], 72)))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=ROWS)
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--once", action="store_true", help="each plan once, untimed (for ncu)")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--roomy-only", action="store_true", help="only the twin with more producer registers")
    parser.add_argument("--also", help="another cooperative tile, persistent and twin, e.g. 128x256x128c2x1")
    parser.add_argument("--decompositions", default=",".join(DECOMPOSITIONS),
                        help="of data_parallel, heuristic, stream_k (CUTLASS's DecompositionMode)")
    args = parser.parse_args()
    from sustained import parse_rows
    rows = parse_rows(args.rows)
    also = None
    if args.also:
        tile, cluster = args.also.split("c")
        also = (tuple(map(int, tile.split("x"))), (*map(int, cluster.split("x")), 1))
    table = kernels(rows, args.roomy_only, also)
    from sweep_void_c import compile_candidates
    compile_candidates([(c, "sm_90a") for trio in table.values() for c in trio], args.jobs)
    if args.compile_only:
        return

    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.describe import dtypes
    from sweep_streamk import checked_plan, problem_for
    from sweep_void_c import KINDS, operands

    rng = cupy.random.default_rng(0)
    for (dtype, (m, n, k)), (pick, *twins) in table.items():
        sw, x, ref, alpha, peers = operands(dtype, m, n, k, rng)
        flops = 2.0 * m * n * k
        print(f"{dtype} {m}x{n}x{k}", flush=True)
        if not args.once:
            for name, run in peers.items():
                print(f"  {name:34} {flops / reference.kernel_median_ms(run) / 1e9:7.1f}", flush=True)
        problem = problem_for(dtype, m, n, k, alpha)
        d = cupy.empty((m, n), dtype=dtypes.numpy_dtype(KINDS[dtype][0]))
        runs = [(pick, None)] + [(c, s) if c.tile_scheduler == "streamk" else (c, None)
                                 for c in twins for s in args.decompositions.split(",")]
        for config, decomposition in runs:
            label = (f"{'x'.join(map(str, config.threadblock))} c{config.cluster[0]}x{config.cluster[1]} "
                     f"{decomposition or 'persistent'}{' ld' + str(config.load_registers) if config.load_registers else ''}")
            try:
                plan, ok, what = checked_plan(problem, config, decomposition, (sw, x, d, ref, dtype))
                info = plan.info()
                extra = f"grid {info.get('grid')} workspace {info.get('workspace_bytes', '?')}"
                if args.once:
                    print(f"  {label:34} ran once {'ok' if ok else 'FAIL ' + what}  {extra}", flush=True)
                    continue
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, x.data.ptr, d.data.ptr))
                print(f"  {label:34} {flops / ms / 1e9:7.1f}  {'ok' if ok else 'FAIL ' + what}  {extra}", flush=True)
            except Exception as exc:   # noqa: BLE001 - a probe reports and goes on
                print(f"  {label:34} {type(exc).__name__}: {str(exc)[:200]}", flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
