"""Cubins are stored packed (build.cache_files.pack) and unpacked on the way out; a packed
entry that does not unpack is a miss, like one that fails its checksum."""
import os
import sqlite3
import zlib

import pytest

from cutlass_sparse.build import cache_files
from cutlass_sparse.build.cache import KernelCache


def private(path):
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def stored(db, key):
    with sqlite3.connect(db) as conn:
        return bytes(conn.execute("SELECT cubin FROM kernels WHERE key = ?", (key,)).fetchone()[0])


def test_a_cubin_is_stored_packed_and_served_as_it_was(tmp_path):
    db = private(tmp_path / "c") / "c.db"
    cubin = b"\x7fELF" + b"_ZN4cute5tupleIJNS_1CILi128EEEEE5valueE\0" * 20000 + os.urandom(4096)
    KernelCache(db).put("k", "kernel", "sm_90a", cubin, {"constants": {}})
    blob = stored(db, "k")
    assert blob.startswith(cache_files.PACKED) and len(blob) < len(cubin) // 10
    assert KernelCache(db).get("k").cubin == cubin


def test_a_blob_without_the_tag_is_served_as_it_is():
    assert cache_files.unpack(b"\x7fELF raw") == b"\x7fELF raw"


def _forge(db, key, blob):
    """Replace an entry's stored cubin, checksum recomputed (what a damaged writer could leave)."""
    with sqlite3.connect(db) as conn:
        meta = conn.execute("SELECT meta FROM kernels WHERE key = ?", (key,)).fetchone()[0]
        conn.execute("UPDATE kernels SET cubin = ?, checksum = ? WHERE key = ?",
                     (blob, cache_files.checksum(blob, meta), key))


@pytest.mark.parametrize("blob", [cache_files.PACKED + b"not zlib at all",
                                  cache_files.PACKED + zlib.compress(b"\x7fELF" * 1000)[:-6]],   # cut short
                         ids=["garbage", "truncated"])
def test_a_packed_entry_that_does_not_unpack_is_a_miss_and_dropped(tmp_path, blob):
    db = private(tmp_path / "c") / "c.db"
    KernelCache(db).put("k", "kernel", "sm_90a", b"\x7fELF" * 1000, {})
    _forge(db, "k", blob)
    with pytest.warns(UserWarning, match="failed its checksum"):
        assert KernelCache(db).get("k") is None
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone()[0] == 0


def test_a_blob_that_inflates_past_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(cache_files, "UNPACKED_LIMIT", 1 << 20)
    bomb = cache_files.pack(bytes(4 << 20))          # 4 MiB of zeros: a few KiB packed
    assert len(bomb) < 16 << 10
    assert cache_files.unpack(bomb) is None
    assert cache_files.unpack(cache_files.pack(bytes(1 << 19))) == bytes(1 << 19)
