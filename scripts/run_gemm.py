#!/usr/bin/env python3
"""`cutlass-sparse run` from a checkout: one verified 2:4 sparse GEMM against dense cuBLAS
(compile-only without a GPU). `python scripts/run_gemm.py --help` lists the options."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too

if __name__ == "__main__":
    # Hand the arguments over explicitly and import with none left in sys.argv:
    # cutlass_library's generator parses sys.argv when first imported.
    argv, sys.argv[1:] = sys.argv[1:], []
    from cutlass_sparse.cli.main import main

    sys.argv[1:] = argv
    sys.exit(main(["run", *argv]))
