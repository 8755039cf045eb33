"""`cutlass-sparse cache repack`: move a file's entries of an earlier cache format that this
version still reads (env.READABLE_FORMATS: raw cubins) to the current format (packed, about
16x smaller), with no compile.

An entry moves only where this version emits the very kernel it holds: its description
(meta["config"]) is emitted again and the earlier format's key of that source must be the
entry's own key. Entries of other sources, toolchains or versions stay as they are. Each
move deletes the row it listed and inserts the packed one in one transaction, so an entry
is never lost, nor brought back after another process removed it."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from .. import env
from . import cache_files, kernels
from .cache import KernelCache
from .warmup import _config_from_json


@dataclass
class Repacked:
    moved: int = 0       # entries now in the current format
    kept: int = 0        # earlier-format entries left as they were (another source or version)
    complete: bool = True   # False: the disk refused a write and the rest was not tried


class SetAside(RuntimeError):
    """The file was found damaged during the repack and set aside (KernelCache's repair)."""


def repack(cache: KernelCache) -> Repacked:
    cache._require_writable("repack")
    earlier = set(env.readable_identities()[1:])
    ours = env.toolchain_identity()
    aside = len(cache.moved_aside)
    with cache._lock:   # no blobs in the listing: a file of raw sm90 cubins runs to gigabytes
        listed = cache._query(lambda c: c.execute("SELECT key, arch, meta FROM kernels").fetchall(), [])
    result = Repacked()
    for key, arch, meta_json in listed:
        meta = _meta(meta_json)
        if meta.get("toolchain") not in earlier:
            continue
        with cache._lock:
            found = cache._query(lambda c: c.execute(
                "SELECT name, cubin, meta, checksum FROM kernels WHERE key = ?", (key,)).fetchone())
        cubin = None if found is None else cache_files.intact(found[1], found[2], found[3])
        new_key = None if cubin is None else _current_key(meta, arch, key)
        if new_key is None:
            result.kept += found is not None
            continue
        name, _, meta_json, checksum = found
        packed = cache_files.pack(cubin)
        new_meta = json.dumps({**_meta(meta_json), "toolchain": ours}, sort_keys=True)
        row = (new_key, name, arch, packed, new_meta, cache_files.checksum(packed, new_meta), time.time())
        moved = []

        def move(c, row=row, key=key, checksum=checksum, moved=moved):
            if len(cache.moved_aside) != aside:   # _query set a damaged file aside and runs us on a fresh one
                raise SetAside(f"{cache.path} was damaged and set aside during the repack: its entries are "
                               f"in {cache.moved_aside[-1]}")
            c.execute("BEGIN IMMEDIATE")
            try:
                # the row as listed, or nothing: another process may have removed or replaced it
                if c.execute("DELETE FROM kernels WHERE key = ? AND checksum = ?", (key, checksum)).rowcount:
                    c.execute("INSERT OR IGNORE INTO toolchains (identity, created) VALUES (?, ?)", (ours, row[-1]))
                    c.execute("INSERT OR REPLACE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                    moved.append(key)
                c.execute("COMMIT")
            except BaseException:
                moved.clear()
                if c.in_transaction:   # a refused COMMIT (disk full) has already rolled back
                    c.execute("ROLLBACK")
                raise

        with cache._lock:
            if not cache._write(move):
                result.complete = False
                return result
        result.moved += len(moved)
    return result


def _meta(meta_json: str) -> dict:
    """An entry's metadata; {} where it is not a JSON object (the entry is left alone)."""
    try:
        meta = json.loads(meta_json)
    except (TypeError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _current_key(meta: dict, arch: str, stored_key: str) -> str | None:
    """The current format's key of the kernel an entry holds, if this version emits exactly
    that kernel (its earlier format's key is the stored one); else None."""
    try:
        config = _config_from_json(meta["config"])
        emitted, options, key = kernels._keyed(config, arch)
    except Exception:   # a description this version cannot read or emit: leave the entry alone
        return None
    return key if stored_key in kernels.earlier_keys(emitted, arch, options) else None
