#!/usr/bin/env python3
"""tests/test_gpu_new_n.py::test_host_grid_is_cutlass_grid[64] failed once (session 16): a
setup reported a TMA recipe slot of rank 0 (magic and this launch's nonce, no dims). Run
that test's setups many times, in shuffled orders, and dump any slot of rank 0 with the
kernel, shape and swizzle that made it. Run from the repository root."""
import dataclasses
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse.describe.problem import Problem  # noqa: E402
from cutlass_sparse.launch import sm90_prepare, tma  # noqa: E402
from cutlass_sparse.launch.sm90 import Sm90Plan  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402

WARM = (1, 7, 16, 32, 64, 128, 256, 512)


def setup_recipes(plan, ptr):
    params = cupy.empty(plan.compiled.constants["params_bytes"], dtype=cupy.uint8)
    info_out = cupy.zeros(len(sm90_prepare.INFO_FIELDS), dtype=cupy.int64)
    recipes = cupy.zeros(16 * 128, dtype=cupy.uint8)
    block = plan._setup_arguments((ptr,) * 5, params.data.ptr, 0, recipes.data.ptr, info_out.data.ptr)
    plan.loaded.launch(plan.problem.device_id, (1, 1, 1), (block,), symbol=f"{plan.compiled.symbol}_setup",
                       threads=1, shared_bytes=0)
    info = dict(zip(sm90_prepare.INFO_FIELDS, (int(v) for v in info_out.get())))
    parsed = np.frombuffer(recipes.get().tobytes(), dtype=tma.RECIPE, count=info["tma_slots"])
    return info, parsed, params.get()


def main(rounds=8):
    scratch = cupy.empty(256, dtype=cupy.uint8)
    ptr = scratch.data.ptr
    configs = sorted({plans.get(Problem.contiguous("sm90", 4096, n, 4096, layout_b="col")).config for n in WARM},
                     key=lambda c: c.name)
    cases = [(c, s, n, m) for c in configs for s in (1, 2, 4, 8) for n in (8, 24, 136, 512, 4096) for m in (64, 4096)]
    slots_seen, bad = {}, 0
    for r in range(rounds):
        random.Random(r).shuffle(cases)
        for config, swizzle, n, m in cases:
            plan = Sm90Plan(Problem.contiguous("sm90", m, n, 4096, layout_b="col"),
                            dataclasses.replace(config, swizzle=swizzle))
            info, parsed, params = setup_recipes(plan, ptr)
            ranks = [int(p["rank"]) for p in parsed]
            slots_seen.setdefault((config.name, m), set()).add(tuple(ranks))
            if 0 in ranks:
                bad += 1
                print(f"round {r}: {config.name} m={m} n={n} swizzle={swizzle}: ranks {ranks}", flush=True)
    for (name, m), seen in sorted(slots_seen.items()):
        print(f"{name[-60:]} m={m}: slot ranks seen {sorted(seen)}")
    print(f"{bad} setups with a rank-0 slot of {rounds * len(cases)}", flush=True)


if __name__ == "__main__":
    main()
