#!/usr/bin/env python3
"""Issue 11 probe (GPU machine): the pointer map of each kernel the new-N tests use, at
the shapes test_host_grid_is_cutlass_grid sets up; where a map cannot be made, which
words a moved pointer changes."""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse.describe.problem import Problem  # noqa: E402
from cutlass_sparse.launch import sm90_params, sm90_prepare  # noqa: E402
from cutlass_sparse.launch.sm90 import Sm90Plan  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402


def main():
    scratch = cupy.empty(256, dtype=cupy.uint8)
    ptr = scratch.data.ptr
    kernels = {plans.get(Problem.contiguous("sm90", 4096, n, 4096, layout_b="col")).config
               for n in (1, 7, 16, 32, 64, 128, 256, 512)}
    for config in kernels:
        for m in (4096,) if "--quick" in sys.argv else (64, 1000, 4096, 8192):
            for swizzle in (1,) if "--quick" in sys.argv else (1, 8):
                for n in (24, 136, 512) if "--quick" in sys.argv else (8, 24, 136, 512, 4096):
                    plan = Sm90Plan(Problem.contiguous("sm90", m, n, 4096, layout_b="col"),
                                    dataclasses.replace(config, swizzle=swizzle))
                    prepared = sm90_prepare.on_device(plan, (ptr,) * 5)
                    found = sm90_params.pointer_maps.get((plan.compiled.key, 0))
                    print(f"{'map' if found else 'NONE'} {config.name} m {m} n {n} swizzle {swizzle}: "
                          f"{sm90_params.failures if found is None else found}", flush=True)
                    if found is None:
                        print(f"NONE {config.name} m {m} n {n} swizzle {swizzle}", flush=True)
                        explain(plan, prepared.templates, ptr)
                    sm90_params.pointer_maps.pop((plan.compiled.key, 0), None)
        print(f"checked {config.name}", flush=True)


def explain(plan, templates, base):
    def run_setup(pointers):
        params = cupy.zeros(plan.compiled.constants["params_bytes"], dtype=cupy.uint8)
        block = plan._setup_arguments(pointers[:5], params.data.ptr, templates.data.ptr)
        plan.loaded.launch(0, (1, 1, 1), (block,), symbol=f"{plan.compiled.symbol}_setup", threads=1, shared_bytes=0)
        return np.frombuffer(params.get().tobytes(), dtype=np.uint64)
    pointers = tuple(base + (4 << 20) * i for i in range(5))
    ref = run_setup(pointers)
    again = run_setup(pointers)
    print("  same pointers twice, words that differ:", [int(w) * 8 for w in np.nonzero(ref != again)[0]])
    for i in range(5):
        for delta in (16, 1 << 20):
            moved = run_setup(tuple(p + delta * (j == i) for j, p in enumerate(pointers)))
            changed = np.nonzero(moved != ref)[0]
            print(f"  pointer {i} + {delta:#x}: " + ", ".join(
                f"@{8 * int(w)} {int(ref[w]):#x}->{int(moved[w]):#x}" for w in changed[:6]))


if __name__ == "__main__":
    main()
