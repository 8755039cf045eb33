#!/usr/bin/env python3
"""`cutlass-sparse bench` from a checkout: ours against dense cuBLAS and cuSPARSELt on
the same operands (GPU). `python scripts/bench.py --help` lists the options."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too


def __getattr__(name: str):
    """bench.DEFAULT_SHAPES and the rest, for callers that import this script (tests/gpu_cases.py)."""
    from cutlass_sparse.cli import bench

    return getattr(bench, name)


if __name__ == "__main__":
    # Hand the arguments over explicitly and import with none left in sys.argv:
    # cutlass_library's generator parses sys.argv when first imported.
    argv, sys.argv[1:] = sys.argv[1:], []
    from cutlass_sparse.cli.main import main

    sys.argv[1:] = argv
    sys.exit(main(["bench", *argv]))
