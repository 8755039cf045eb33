#!/usr/bin/env python3
"""Fill compiled_cache.db ahead of time; no GPU needed.

    python scripts/warmup_cache.py [--arch sm_80,sm_90a] [--jobs N] [--shard i/N] [--all-alignments]
                                   [--only SUBSTRING] [--cache PATH]
    python scripts/warmup_cache.py merge OUT.db IN.db [IN.db ...]

Each of N machines (a Slurm array, an indexed Job, a CI matrix) runs its --shard i/N of
the same list; `merge` combines their databases into the one serving machines copy.
Exits 1 if any kernel failed to compile.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cutlass_sparse.build import cache, warmup  # noqa: E402


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "merge":
        if len(argv) < 3:
            print("usage: warmup_cache.py merge OUT.db IN.db [IN.db ...]", file=sys.stderr)
            return 2
        target = cache.KernelCache(argv[1], read_only=False)
        for source in argv[2:]:
            print(f"{source}: {target.merge_from(source)} entries added to {argv[1]}")
        print(f"{argv[1]}: {len(target.keys())} kernels")
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="sm_80,sm_90a", help="comma-separated targets")
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--shard", default="0/1", help="i/N: this machine's share of the list")
    p.add_argument("--all-alignments", action="store_true", help="also the narrower-alignment variants")
    p.add_argument("--only", default=None, help="keep only kernels whose name contains this")
    p.add_argument("--cache", default=None, help="cache file (default: $CUTLASS_SPARSE_CACHE or ~/.cache)")
    p.add_argument("--tune", default=None, metavar="SHAPES.txt",
                   help="also profile these problems (GPU needed): lines 'M N K [f16|bf16] [row|col] [sm80|sm90]'")
    p.add_argument("--no-catalog", action="store_true", help="skip compiling the catalog (with --tune)")
    args = p.parse_args(argv)
    if args.cache:
        os.environ["CUTLASS_SPARSE_CACHE"] = str(Path(args.cache).resolve())
    index, count = (int(v) for v in args.shard.split("/"))
    items = warmup.catalog_items(args.arch.split(","), widest_only=not args.all_alignments)
    if args.only:
        items = [item for item in items if args.only in item[0].name]
    mine = [] if args.no_catalog else warmup.shard(items, index, count)
    print(f"shard {index}/{count}: {len(mine)} of {len(items)} kernels, {args.jobs} jobs, "
          f"cache {os.environ.get('CUTLASS_SPARSE_CACHE') or 'default'}")
    start = time.perf_counter()
    results = warmup.compile_all(mine, jobs=args.jobs, progress=warmup.print_progress)
    wall = time.perf_counter() - start
    counts = {"compiled": 0, "cached": 0, "failed": 0}
    for _, _, status, _ in results:
        counts["failed" if status.startswith("failed") else status] += 1
    print(f"summary: {counts['compiled']} compiled, {counts['cached']} already cached, "
          f"{counts['failed']} failed, wall {wall:.1f} s")
    for name, arch, status, _ in results:
        if status.startswith("failed"):
            print(f"  {arch} {name}: {status}")
    failed = counts["failed"]
    if args.tune:
        failed += tune_shapes(args.tune, index, count, args.jobs)
    return 1 if failed else 0


def parse_shapes(path: str) -> list[tuple]:
    """(m, n, k, dtype, layout_b, family or None) per non-empty, non-comment line."""
    shapes = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        words = line.split("#")[0].split()
        if not words:
            continue
        try:
            m, n, k = (int(w) for w in words[:3])
        except ValueError:
            raise SystemExit(f"{path}:{number}: expected 'M N K [dtype] [layout] [family]', got {line!r}")
        rest = dict(dtype="f16", layout="row", family=None)
        for word in words[3:]:
            key = "dtype" if word in ("f16", "bf16") else "layout" if word in ("row", "col") else \
                "family" if word in ("sm80", "sm90") else None
            if key is None:
                raise SystemExit(f"{path}:{number}: unknown word {word!r}")
            rest[key] = word
        shapes.append((m, n, k, rest["dtype"], rest["layout"], rest["family"]))
    return shapes


def tune_shapes(path: str, index: int, count: int, jobs: int) -> int:
    """Profile this shard's share of the shapes; returns how many failed."""
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse.describe import dtypes

    shapes = warmup.shard_list(parse_shapes(path), index, count)
    failed = 0
    for m, n, k, dtype, layout, family in shapes:
        rng = cupy.random.default_rng(0)
        np_dtype = dtypes.numpy_dtype(dtype)
        w = cs.prune_2to4(dtypes.from_float32(rng.standard_normal((m, k), dtype=cupy.float32), np_dtype))
        x = dtypes.from_float32(rng.standard_normal((k, n), dtype=cupy.float32), np_dtype)
        if layout == "col":
            x = cupy.asfortranarray(x)
        try:
            winner, rows = cs.tune(cs.compress(w, layout=family), x, jobs=jobs)
            best = min(r.ms for r in rows if r.ms is not None)
            print(f"tuned {m}x{n}x{k} {dtype} {layout}: {winner.label}, {best * 1e3:.1f} us, "
                  f"{2 * m * n * k / best / 1e9:.0f} TFLOP/s ({len(rows)} candidates)", flush=True)
        except Exception as exc:  # reported per shape, the rest go on
            failed += 1
            print(f"tune {m}x{n}x{k} {dtype} {layout} failed: {exc}", flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
