#!/usr/bin/env python3
"""Two one-off GPU test failures of session 16 (a TMA recipe slot of rank 0 in
test_host_grid_is_cutlass_grid, a NaN in test_runs_on_torchs_current_stream) both ran
while Params for a range's other N were being built on a side stream (build_ahead).
The setup entry marks the recipes it writes with a nonce held in a module-global
`__device__` variable: two setups of one kernel running at once on two streams can take
each other's nonce, then miss their own recipes (a wrong slot count, or a recipe left in
Params where the GEMM expects an encoded TMA descriptor).

This probe runs setups of one kernel on two streams at once, each with its own nonce and
buffers, and counts the setups whose slot count or recipes are wrong (mode "recipes",
as sm90_prepare.on_device), and the Params that still hold a recipe after encoding
(mode "encode", as build_ahead and every call of a stream-K kernel). The same setups on
one stream are the control. Since session 36 the nonce is in the setup block's shared memory
(emit.nvrtc_headers.RECIPE_HOOK): two streams should find what one does. --shapes picks the
kernels (the 128x256x64 ones load the nonce thousands of instructions after storing it).
Run from the repository root:
python scripts/device/probe_setup_race.py [--shapes f16:4608x1792x4096:row,...] [--rounds 400]"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse.describe.problem import Problem  # noqa: E402
from cutlass_sparse.launch import sm90_prepare, tma  # noqa: E402
from cutlass_sparse.launch.sm90 import Sm90Plan  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402

SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) { }
}""", "spin")
MAGIC = np.uint64(0x50435241544D5343)   # cutlass_sparse_tma::kMagic


def run(plan, ptr, rounds: int, streams, templates) -> tuple[int, int]:
    """(setups whose recipes/slots are wrong, Params left holding a recipe) of 2*rounds setups,
    queued as the library queues them (Sm90Plan.queue_setup)."""
    nbytes = plan.compiled.constants["params_bytes"]
    count = rounds * 2
    params = cupy.zeros((count, -(-nbytes // 128) * 128), dtype=cupy.uint8)
    info = cupy.zeros((count, len(sm90_prepare.INFO_FIELDS)), dtype=cupy.int64)
    recipes = cupy.zeros((count, 16 * 128), dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()
    for stream in streams:   # hold each stream's queue until all are queued: they then run at once
        with stream:
            SPIN((1,), (1,), (np.int64(100_000_000),))
    for i in range(count):
        with streams[i % len(streams)]:
            block = plan._setup_arguments((ptr,) * 5, params[i].data.ptr, templates,
                                          recipes[i].data.ptr, info[i].data.ptr)
            plan.queue_setup(block)
    cupy.cuda.Device().synchronize()
    slots = info.get()[:, sm90_prepare.INFO_FIELDS.index("tma_slots")]
    expected = int(np.bincount(slots).argmax())
    wrong = 0
    for i in range(count):
        parsed = np.frombuffer(recipes[i].get().tobytes(), dtype=tma.RECIPE, count=16)
        ranks = [int(r["rank"]) for r in parsed[:max(slots[i], 1)]]
        if slots[i] != expected or 0 in ranks:
            wrong += 1
    left = 0
    if templates:
        host = params.get()[:, :nbytes // 64 * 64].reshape(count, -1, 64)
        left = int(np.count_nonzero((host[:, :, :8].copy().view(np.uint64)[..., 0] == MAGIC).any(axis=1)))
    return wrong, left


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="f16:4096x64x4096:col,f16:4608x1792x4096:row,bf16:4608x2048x4096:row")
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    scratch = cupy.empty(256, dtype=cupy.uint8)
    ptr = scratch.data.ptr
    one = [cupy.cuda.Stream(non_blocking=True)]
    two = [cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)]
    for shape in args.shapes.split(","):
        element, mnk, layout = shape.split(":")
        m, n, k = map(int, mnk.split("x"))
        problem = Problem.contiguous("sm90", m, n, k, element=element, layout_b=layout)
        plan = Sm90Plan(problem, plans.get(problem).config)
        prepared = sm90_prepare.on_device(plan, (ptr,) * 5)
        print(f"{shape} kernel {plan.config.name}: {prepared.templates.size // 128} TMA slots", flush=True)
        for mode, templates in (("recipes", 0), ("encode", prepared.templates.data.ptr)):
            for label, streams in (("one stream", one), ("two streams", two)):
                wrong, left = run(plan, ptr, args.rounds, streams, templates)
                print(f"{mode:8s} {label:13s}: {wrong} of {2 * args.rounds} setups found wrong slots; "
                      f"{left} Params left holding a recipe", flush=True)


if __name__ == "__main__":
    main()
