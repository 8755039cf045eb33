#!/usr/bin/env python3
"""Compile, with 16 processes, the kernels of the probes and the fp8 checks that the carried
cache may lack (GPU machine; a subset of `python -m tests.gpu_cases --family session`)."""
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(root), str(root / "tests"), str(root / "scripts" / "device")]


def main():
    import gpu_cases
    import sweep_8bit
    from cutlass_sparse.build import warmup
    from cutlass_sparse.describe.problem import Problem

    items = [(c, "sm_90a") for c in sweep_8bit.CANDIDATES + sweep_8bit.SCALED]
    problems = gpu_cases.quantized_problems(bench=True) + [gpu_cases.linear_problem(4096, n, 4096) for n in range(1, 1025)]
    problems += [Problem.contiguous("sm90", 128, 64, 128, layout_b="row"), gpu_cases.linear_problem(128, 64, 128)]
    items = list(dict.fromkeys(items + gpu_cases.planned_configs(problems)))
    results = warmup.compile_all(items, None, 16)
    print(f"warm_some: {sum(r[2] == 'compiled' for r in results)} compiled, "
          f"{sum(r[2] == 'cached' for r in results)} cached, failed: {[r[0] for r in results if r[2].startswith('failed')]}")


if __name__ == "__main__":
    main()
