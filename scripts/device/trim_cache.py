#!/usr/bin/env python3
"""A copy of the kernel cache holding only what a GPU session needs, so that it travels
under the device tool's 64 MiB (the full cache of every sweep's kernels does not).

    CUTLASS_SPARSE_CACHE=/tmp/csd/cs.db python scripts/device/trim_cache.py /tmp/csd/trim.db \
        [--round 9 ...]   # and sweep_8bit_picks.py --round 9's kernels

Keeps tests.gpu_cases' session kernels (and the round's), plus every toolchain and winner
row; then gzip the result into .device/compiled_cache.db.gz."""
import argparse
import contextlib
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts" / "device")]

from cutlass_sparse import env  # noqa: E402
from cutlass_sparse.build import kernels  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--round", type=int, action="append", default=[], choices=[9, 10],
                        help="also sweep_8bit_picks.py's kernels of this in-flight round, both variants")
    args = parser.parse_args()
    import gpu_cases

    items = gpu_cases.session_configs()
    if args.round:
        import sweep_8bit_picks as sweep
        items += [(c, "sm_90a") for dtype in ("f16", "bf16", "e4m3", "s8") for r in args.round
                  for c in sweep.configs(dtype, r)]
    keep = {kernels.key_for(config, arch) for config, arch in items}
    source = env.cache_path()
    target = Path(args.target)
    target.unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(source)) as src, contextlib.closing(sqlite3.connect(target)) as dst:
        src.backup(dst)
        present = {row[0] for row in dst.execute("select key from kernels")}
        with dst:   # one transaction
            dst.executemany("delete from kernels where key = ?", [(k,) for k in present - keep])
        dst.execute("vacuum")
    print(f"kept {len(present & keep)} of {len(present)} kernels; {len(keep - present)} wanted are not cached",
          file=sys.stderr)


if __name__ == "__main__":
    main()
