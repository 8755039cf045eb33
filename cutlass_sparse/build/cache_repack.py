"""`cutlass-sparse cache repack`: move a file's entries of an earlier cache format that this
version still reads (env.READABLE_FORMATS: raw cubins) to the current format (packed, about
16x smaller), with no compile.

An entry moves only where this version emits the very kernel it holds: its description
(meta["config"]) is emitted again and the earlier format's key of that source must be the
entry's own key. Entries of other sources, toolchains or versions stay as they are."""
from __future__ import annotations

import json
import time

from .. import env
from . import cache_files, kernels
from .cache import KernelCache
from .warmup import _config_from_json


def repack(cache: KernelCache) -> tuple[int, int]:
    """(entries moved to the current format, earlier-format entries left as they were)."""
    cache._require_writable("repack")
    earlier = set(env.readable_identities()[1:])
    with cache._lock:
        rows = cache._query(lambda c: c.execute(
            "SELECT key, name, arch, cubin, meta, checksum FROM kernels").fetchall(), [])
    ours = env.toolchain_identity()
    moved = kept = 0
    for key, name, arch, stored, meta_json, checksum in rows:
        meta = json.loads(meta_json)
        if meta.get("toolchain") not in earlier:
            continue
        cubin = cache_files.intact(stored, meta_json, checksum)
        new_key = _current_key(meta, arch, key) if cubin is not None else None
        if new_key is None:
            kept += 1
            continue
        packed, new_meta = cache_files.pack(cubin), json.dumps({**meta, "toolchain": ours}, sort_keys=True)
        row = (new_key, name, arch, packed, new_meta, cache_files.checksum(packed, new_meta), time.time())

        def move(c, row=row, key=key, checksum=checksum):   # both or neither: no entry is ever lost
            c.execute("BEGIN IMMEDIATE")
            try:
                c.execute("INSERT OR IGNORE INTO toolchains (identity, created) VALUES (?, ?)", (ours, time.time()))
                c.execute("INSERT OR REPLACE INTO kernels (key, name, arch, cubin, meta, checksum, created) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                c.execute("DELETE FROM kernels WHERE key = ? AND checksum = ?", (key, checksum))
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise

        with cache._lock:
            if not cache._write(move):
                break   # the disk refused: what moved so far stays moved, the rest as it was
        moved += 1
    return moved, kept


def _current_key(meta: dict, arch: str, stored_key: str) -> str | None:
    """The current format's key of the kernel an entry holds, if this version emits exactly
    that kernel (its earlier format's key is the stored one); else None."""
    try:
        config = _config_from_json(meta["config"])
        emitted, options, key = kernels._keyed(config, arch)
    except Exception:   # a description this version cannot read or emit: leave the entry alone
        return None
    for identity in env.readable_identities()[1:]:
        if kernels.cache_key(emitted, arch, options, identity) == stored_key:
            return key
    return None
