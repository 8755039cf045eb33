#!/usr/bin/env python3
"""`cutlass-sparse warmup` from a checkout: fill compiled_cache.db ahead of time, no GPU
needed. `python scripts/warmup_cache.py --help` lists the options.

    python scripts/warmup_cache.py [--arch sm_80,sm_90a] [--jobs N] [--shard i/N] ...
    python scripts/warmup_cache.py merge OUT.db IN.db [IN.db ...]   (= cutlass-sparse cache merge --path OUT.db IN.db ...)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too


def parse_shapes(path: str) -> list[tuple]:
    """The --tune shapes file; a bad line raises SystemExit with the reason."""
    from cutlass_sparse.cli import warmup
    from cutlass_sparse.cli.args import UsageError

    try:
        return warmup.parse_shapes(path)
    except UsageError as exc:
        raise SystemExit(str(exc)) from None


def command(argv: list[str]) -> list[str]:
    """The cutlass-sparse command line for this script's arguments."""
    if argv[:1] == ["merge"]:   # merge OUT.db IN.db ...: the first file is the target
        target = ["--path", argv[1]] if len(argv) > 1 and not argv[1].startswith("-") else argv[1:2]
        return ["cache", "merge", *target, *argv[2:]]
    return ["warmup", *argv]


if __name__ == "__main__":
    # Hand the arguments over explicitly and import with none left in sys.argv:
    # cutlass_library's generator parses sys.argv when first imported.
    argv, sys.argv[1:] = sys.argv[1:], []
    from cutlass_sparse.cli.main import main

    sys.argv[1:] = argv
    sys.exit(main(command(argv)))
