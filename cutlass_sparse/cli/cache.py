"""cache: look after compiled_cache.db (kernels and profiler records).

    ls       every kernel (key, arch, stored bytes, intact or not) and profiler record
    stats    counts by arch, stored bytes, entries failing their checksum or not unpacking
    verify   drop entries that fail their checksum or do not unpack (exit 1 if there were any, or if the
             file was too damaged to check and was set aside whole)
    clear    remove every kernel and profiler record
    merge    copy every intact entry of SOURCES that --path lacks (--path may be new);
             --ship: write --path as a file to ship to serving machines (one file in
             rollback-journal mode, compacted, mode 0444, renamed into place whole)
    repack   move the entries of an earlier cache format (raw cubins) to the current one
             (packed, about 16x smaller) where this version emits the same kernel; no compile

--path names the cache file (default: $CUTLASS_SPARSE_CACHE's first entry, else
~/.cache/...); for every action but merge it must exist, and is never created.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from ..build import cache_repack, cache_ship
from ..build.cache import KernelCache
from .. import env
from . import args as types
from .args import UsageError

log = logging.getLogger("cutlass_sparse")

ACTIONS = {
    "ls": "every kernel and profiler record",
    "stats": "counts by arch, stored bytes, entries failing their checksum or not unpacking",
    "verify": "drop entries that fail their checksum or do not unpack (exit 1 if there were any, or the file was damaged)",
    "clear": "remove every kernel and profiler record",
    "merge": "copy every intact entry of SOURCE files that --path lacks",
    "repack": "move earlier-format entries (raw cubins) to the current, packed format; no compile",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", parser_class=type(p))
    for name, text in ACTIONS.items():
        action = actions.add_parser(name, help=text, description=text)
        if name == "merge":
            action.add_argument("sources", nargs="+", type=types.existing_file, metavar="SOURCE",
                                help="cache files to copy entries from")
            action.add_argument("--ship", action="store_true",
                                help="write --path for serving machines: read-only, no -wal/-shm (NFS, read-only mounts)")
        action.add_argument("--path", default=None, type=types.cache_file,
                            help="cache file (default: $CUTLASS_SPARSE_CACHE or ~/.cache)" +
                                 ("; created if new" if name == "merge" else "; must exist"))


def main(args) -> int:
    path = env.cache_path() if args.path is None else Path(args.path).expanduser()
    if args.action != "merge" and not path.is_file():
        if args.path is not None:
            raise UsageError(f"argument --path: no cache file at {args.path}")
        log.info("no cache file at %s yet: nothing to %s", path, args.action)
        return 0
    if args.action == "merge":
        if args.path is not None and not path.parent.is_dir():   # a mistyped --path makes no directories
            raise UsageError(f"argument --path: no directory {path.parent} to write {path.name} in")
        for source in args.sources:    # before --path is made: a failed merge leaves no new file
            KernelCache.merge_source(source).close()
    if args.action == "merge" and args.ship:
        for source, added in cache_ship.ship(path, args.sources):
            print(f"{source}: {added} entries added to {path}")
        shipped = KernelCache(path, read_only=True)
        try:
            return _stats(shipped, args)
        finally:
            shipped.close()
    cache = KernelCache(path, read_only=True if args.action in ("ls", "stats") else None)
    try:
        done = ACTION[args.action](cache, args)
        if args.action in ("ls", "stats") and not cache.readable and path.stat().st_size:   # damaged
            log.error("%s is damaged or unreadable: nothing in it was listed; run "
                      "'cutlass-sparse cache verify --path %s'", path, path)
            return 1
        return done
    finally:
        cache.close()


def _ls(cache: KernelCache, args) -> int:
    for key, name, arch, size, ok in cache.rows():
        print(f"{key[:12]}  {arch:7}  {size:>9}  {'ok ' if ok else 'BAD'}  {name}")
    for signature, choice_json, _ in cache.records():   # whoever wrote them (winners() serves ours only)
        choice = json.loads(choice_json)
        print(f"winner  {signature}  ->  {choice.get('name')} split {choice.get('split_k')}")
    return 0


def _stats(cache: KernelCache, args) -> int:
    rows = cache.rows()
    by_arch: dict[str, int] = {}
    for _, _, arch, _, _ in rows:
        by_arch[arch] = by_arch.get(arch, 0) + 1
    print(f"{cache.path}: {len(rows)} kernels, {sum(r[3] for r in rows) / 1e6:.1f} MB of cubins (as stored), "
          f"{sum(not r[4] for r in rows)} failing their checksum or not unpacking; by arch: {by_arch}; "
          f"{len(cache.records())} profiler records")
    print(f"built by: {_built_by(cache)}")
    noted = cache.performance_notes()
    print(f"{len(noted)} kernels compiled with ptxas performance notes" + (":" if noted else ""))
    for name, arch, notes in noted:
        print(f"  {arch:7}  {name}: {'; '.join(notes)}")
    return 0


def _built_by(cache: KernelCache) -> str:
    theirs = cache.toolchains()
    if not theirs:
        return "unrecorded (a file written before caches were stamped; every entry is still keyed by version)"
    try:
        readable = env.readable_identities()
    except Exception:    # no NVRTC or headers here to compare with
        readable = ()
    names = [" / ".join(line for line in t.splitlines()
                        if line.startswith(("cutlass_sparse", "nvidia-cutlass", "cache format")))
             + (" (this version)" if readable and t == readable[0] else
                " (an earlier cache format this version reads)" if t in readable else "") for t in theirs]
    return "; ".join(names)


def _verify(cache: KernelCache, args) -> int:
    """Exit 1 where entries failed, or the file was too damaged to check: set aside whole
    (every entry in it is gone from the cache), or unreadable (a read-only one)."""
    bad = cache.verify()
    print(f"{len(bad)} entries failed their checksum or did not unpack" + (" and were removed" if bad else ""))
    for aside in cache.moved_aside:
        print(f"{cache.path} was damaged: moved it (every entry) to {aside} and started a fresh cache")
    if not cache.readable:
        print(f"{cache.path} is damaged or unreadable: nothing in it could be checked")
    return 1 if bad or cache.moved_aside or not cache.readable else 0


def _clear(cache: KernelCache, args) -> int:
    print(f"removed {cache.clear()} entries from {cache.path}")
    return 0


def _merge(cache: KernelCache, args) -> int:
    for source in args.sources:
        print(f"{source}: {cache.merge_from(source)} entries added to {cache.path}")
    print(f"{cache.path}: {len(cache.keys())} kernels")
    return 0


def _repack(cache: KernelCache, args) -> int:
    """Exit 1 where the disk refused a write (what moved stays moved, the rest as it was)."""
    try:
        done = cache_repack.repack(cache)
    except cache_repack.SetAside as exc:
        print(exc)
        return 1
    print(f"{cache.path}: {done.moved} entries moved to cache format {env.CACHE_FORMAT}; {done.kept} of an "
          f"earlier format left as they were (not what this version emits)")
    if not done.complete:
        print(f"{cache.path}: the disk refused a write; run repack again once there is room")
        return 1
    if done.moved:
        try:
            cache.compact()   # give the freed pages back to the file system
        except Exception as exc:   # VACUUM needs room for a copy: the repack itself stands
            print(f"{cache.path}: not compacted ({exc}); the file keeps its free pages")
    return 0


ACTION = {"ls": _ls, "stats": _stats, "verify": _verify, "clear": _clear, "merge": _merge, "repack": _repack}
