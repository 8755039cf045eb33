#!/usr/bin/env python3
"""Issue 13 (GPU machine): where selection picked a finer tile for its last wave (128x128 in
1x2 clusters) and another tile's stream-K twin is predicted faster
(sm90_choice.twin_tile_instead), the library's kernel before (the pick, persistent) and
now (the twin), beside dense and cuSPARSELt on the same operands, in one process,
kernel-only (reference.kernel_median_ms), every result checked against the dense product.
Run from the repository root:
    python scripts/device/ab_twin_tile.py --rows f16:5120x1024x13824,e4m3:3072x2048x28672 [--compile-only]"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402


def kernels(rows):
    """{row: (before, now)}: resolve's kernel without and with twin_tile_instead."""
    from unittest import mock

    from cutlass_sparse.launch import sm90_choice
    from sweep_streamk import problem_for

    out = {}
    for dtype, shape in rows:
        problem = problem_for(dtype, *shape)
        sm90_choice.resolve.cache_clear()   # (resolve keeps its answers: the patched one must not reuse them)
        with mock.patch.object(sm90_choice, "twin_tile_instead", lambda p, tile: None):
            before = sm90_choice.resolve(problem, None)
        sm90_choice.resolve.cache_clear()   # (resolve keeps its answers)
        out[(dtype, shape)] = (before, sm90_choice.resolve(problem, None))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", required=True)
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=16)
    args = parser.parse_args()
    from sustained import parse_rows
    table = kernels(parse_rows(args.rows))
    from sweep_void_c import compile_candidates
    compile_candidates([(c, "sm_90a") for pair in table.values() for c, _ in pair], args.jobs)
    if args.compile_only:
        return

    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.describe import dtypes
    from sweep_streamk import checked_plan, problem_for
    from sweep_void_c import KINDS, operands

    rng = cupy.random.default_rng(0)
    for (dtype, (m, n, k)), pair in table.items():
        sw, x, ref, alpha, peers = operands(dtype, m, n, k, rng)
        flops = 2.0 * m * n * k
        print(f"{dtype} {m}x{n}x{k}", flush=True)
        rates = {name: flops / reference.kernel_median_ms(run) / 1e9 for name, run in peers.items()}
        problem = problem_for(dtype, m, n, k, alpha)
        d = cupy.empty((m, n), dtype=dtypes.numpy_dtype(KINDS[dtype][0]))
        for label, (config, scheduling) in zip(("before", "now"), pair):
            plan, ok, what = checked_plan(problem, config, scheduling.decomposition, (sw, x, d, ref, dtype))
            rates[label] = flops / reference.kernel_median_ms(lambda: plan.launch_direct(sw, x.data.ptr, d.data.ptr)) / 1e9
            tile = f"{'x'.join(map(str, config.threadblock))} c{config.cluster[0]}x{config.cluster[1]}"
            print(f"  {label:7} {tile:18} {config.tile_scheduler:10} {rates[label]:7.1f}  {'ok' if ok else 'FAIL ' + what}",
                  flush=True)
        for name in peers:
            print(f"  {name:7} {rates[name]:7.1f}", flush=True)
        cslt = rates.get("cslt")
        print(f"  now/before {rates['now'] / rates['before']:.3f}"
              + (f"  before/cslt {rates['before'] / cslt:.3f}  now/cslt {rates['now'] / cslt:.3f}" if cslt else ""),
              flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
