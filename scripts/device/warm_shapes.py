#!/usr/bin/env python3
"""Compile, with 16 processes, the kernels cs.linear_fp8 / cs.linear_int8 (scripts/bench.py
--dtypes e4m3 / s8 --shapes ...) plan at these shapes, before a bench that would compile
them one at a time (GPU machine):
    python3 scripts/device/warm_shapes.py e4m3 4608x2048x8192,4096x1280x14336"""
import sys
from pathlib import Path

root = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(root), str(root / "tests")]


def main():
    import gpu_cases
    from cutlass_sparse.build import warmup

    element, shapes = sys.argv[1], [tuple(map(int, s.split("x"))) for s in sys.argv[2].split(",")]
    problems = [p for p in gpu_cases.quantized_problems(element=element, shapes=shapes)
                if (p.m, p.n, p.k) in shapes]
    results = warmup.compile_all(gpu_cases.planned_configs(problems), None, 16)
    print(f"warm_shapes: {sum(r[2] == 'compiled' for r in results)} compiled, "
          f"{sum(r[2] == 'cached' for r in results)} cached, failed: {[r[0] for r in results if r[2].startswith('failed')]}")


if __name__ == "__main__":
    main()
