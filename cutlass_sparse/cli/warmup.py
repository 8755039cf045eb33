"""warmup: fill compiled_cache.db ahead of time; no GPU needed (except for --tune).

The list is the package's catalog, or with --preset a set worth shipping: the kernels
default selection picks for a workload (llm: the projections of 4096-, 5120- and
8192-wide models, N from 1 to 8192 tokens, fp16 and bf16; llm-4096 etc.: one width).
Each of N machines (a Slurm array, an indexed Job, a CI matrix) runs its --shard i/N of
the same list; without --shard the share comes from SLURM_ARRAY_TASK_ID and
SLURM_ARRAY_TASK_COUNT, or from a Kubernetes indexed Job's JOB_COMPLETION_INDEX with
CUTLASS_SPARSE_SHARD_COUNT. `cutlass-sparse cache merge --ship` combines their databases
into the one file serving machines use. --arch sm_90a is the sm90 family; every other
target (sm_80, sm_86, sm_89, sm_90, ...) the sm80 family's kernels for that GPU. Exits 1
if any kernel failed to compile.
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path

from .. import env
from ..build import warmup
from . import args as types
from .args import UsageError
from ..plan import presets

log = logging.getLogger("cutlass_sparse")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--arch", default="sm_80,sm_90a", type=types.arch_list,
                   help="comma-separated targets (default sm_80,sm_90a)")
    p.add_argument("--jobs", type=types.positive_int, default=None,
                   help="compile worker processes (default: one per CPU this job may use, no more than its "
                        "free memory holds: about 5 GB per sm90 GEMM compile)")
    p.add_argument("--shard", default=None, type=types.shard, metavar="i/N",
                   help="this machine's share of the list, 0 <= i < N (default: from a Slurm array or a "
                        "Kubernetes indexed Job, else 0/1)")
    p.add_argument("--preset", default=None, choices=sorted(presets.PRESETS),
                   help="the kernels default selection picks for a workload (see above), not the catalog")
    p.add_argument("--sm-count", type=types.positive_int, default=None,
                   help="with --preset: the GPU's SM count that selection plans for (default: A100 108 for "
                        "sm_80, H100 132 for sm_90/sm_90a)")
    p.add_argument("--all-alignments", action="store_true", help="also the narrower-alignment variants")
    p.add_argument("--only", default=None, help="keep only kernels whose name contains this")
    p.add_argument("--cache", default=None, type=types.cache_file,
                   help="cache file (default: $CUTLASS_SPARSE_CACHE or ~/.cache)")
    p.add_argument("--tune", default=None, metavar="SHAPES.txt", type=types.existing_file,
                   help="also profile these problems (GPU needed): lines 'M N K [f16|bf16] [row|col] [sm80|sm90]'")
    p.add_argument("--no-catalog", action="store_true", help="skip compiling the catalog (with --tune)")


def main(args) -> int:
    if args.no_catalog and not args.tune:
        raise UsageError("argument --no-catalog: only with --tune (it would leave nothing to do)")
    if args.preset and (args.all_alignments or args.no_catalog):
        raise UsageError(f"argument --preset: not with {'--all-alignments' if args.all_alignments else '--no-catalog'}"
                         " (a preset lists exact kernels)")
    if args.sm_count and not args.preset:
        raise UsageError("argument --sm-count: only with --preset")
    unknown = [a for a in args.arch if args.preset and not args.sm_count and a not in presets.SM_COUNTS]
    if unknown:
        raise UsageError(f"argument --preset: no default SM count for {unknown[0]} (known: "
                         f"{', '.join(presets.SM_COUNTS)}): pass --sm-count")
    index, count, source = shard_of(args.shard)
    shapes = parse_shapes(args.tune) if args.tune else []
    if shapes:
        from .. import reference

        if not reference.gpu_available():
            raise RuntimeError("--tune times kernels on a GPU; none is visible")
    if args.cache:
        os.environ["CUTLASS_SPARSE_CACHE"] = str(args.cache.resolve())
    if args.preset:
        counts = {arch: args.sm_count for arch in args.arch} if args.sm_count else None
        items = presets.items(args.preset, args.arch, counts)
    else:
        items = warmup.catalog_items(args.arch, widest_only=not args.all_alignments)
    listed = len(items)
    if args.only:
        items = [item for item in items if args.only in item[0].name]
        if not items and not args.no_catalog:   # else a typo passes as "0 failed", a cache warm of nothing
            raise UsageError(f"argument --only: {args.only!r} matches no kernel of {','.join(args.arch)}")
    # said after the usage checks: a bad command line is one line on stderr
    if "sm_90" in args.arch:
        log.info("sm_90: the sm80 family's kernels for an sm_90 GPU (the sm90 family's are --arch sm_90a)")
    if args.preset:
        log.info("preset %s: %d kernels for %s", args.preset, listed, ",".join(args.arch))
    mine = [] if args.no_catalog else warmup.shard(items, index, count)
    log.info("shard %d/%d%s: %d of %d kernels, up to %d jobs, cache %s", index, count, source, len(mine), len(items),
             warmup.jobs_for(mine, args.jobs) if mine else 0, os.environ.get("CUTLASS_SPARSE_CACHE") or "default")
    start = time.perf_counter()
    results = warmup.compile_all(mine, jobs=args.jobs, progress=progress)
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
    if shapes:
        failed += tune_shapes(shapes, index, count, args.jobs)
    return 1 if failed else 0


def shard_of(given: tuple[int, int] | None) -> tuple[int, int, str]:
    """(index, count, where it came from): --shard, else a job array's environment, else 0/1."""
    if given is not None:
        return *given, ""
    try:
        found = env.shard_from_environment()
    except ValueError as exc:
        raise UsageError(f"shard from the environment: {exc}") from None
    return (0, 1, "") if found is None else (found[0], found[1], f" (from {found[2]})")


def progress(done: int, total: int, result) -> None:
    name, arch, status, seconds = result
    log.info("[%d/%d] %-8s %6.1f s  %s  %s", done, total, status[:8], seconds, arch, name)


def parse_shapes(path) -> list[tuple]:
    """(m, n, k, dtype, layout_b, family or None) per non-empty, non-comment line."""
    shapes = []
    try:
        text = Path(path).read_text()
    except (UnicodeDecodeError, OSError) as exc:
        raise UsageError(f"argument --tune: cannot read {path} as text ({exc})") from None
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#")[0].split()
        if not words:
            continue
        try:
            m, n, k = (int(w) for w in words[:3])
        except ValueError:
            raise UsageError(f"argument --tune: {path}:{number}: expected 'M N K [dtype] [layout] [family]', "
                             f"got {line!r}") from None
        if min(m, n, k) < 1:
            raise UsageError(f"argument --tune: {path}:{number}: M, N and K must be >= 1, got {line!r}")
        rest = dict(dtype="f16", layout="row", family=None)
        for word in words[3:]:
            key = "dtype" if word in ("f16", "bf16") else "layout" if word in ("row", "col") else \
                "family" if word in ("sm80", "sm90") else None
            if key is None:
                raise UsageError(f"argument --tune: {path}:{number}: unknown word {word!r}")
            rest[key] = word
        shapes.append((m, n, k, rest["dtype"], rest["layout"], rest["family"]))
    return shapes


def tune_shapes(shapes: list[tuple], index: int, count: int, jobs: int | None) -> int:
    """Profile this shard's share of the shapes; returns how many failed."""
    import cupy

    import cutlass_sparse as cs
    from ..describe import dtypes

    failed = 0
    for m, n, k, dtype, layout, family in warmup.shard_list(shapes, index, count):
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
