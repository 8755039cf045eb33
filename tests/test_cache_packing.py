"""Cubins are stored packed (build.cache_files.pack) and unpacked on the way out; a packed
entry that does not unpack is a miss, like one that fails its checksum."""
import json
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


def test_maintenance_sees_an_entry_that_does_not_unpack(tmp_path):
    db = private(tmp_path / "c") / "c.db"
    cache = KernelCache(db)
    cache.put("good", "kernel-good", "sm_80", b"\x7fELF" * 100, {})
    cache.put("bad", "kernel-bad", "sm_80", b"\x7fELF" * 100, {})
    cache.close()
    _forge(db, "bad", cache_files.PACKED + b"garbage")
    cache = KernelCache(db)
    assert {row[0]: row[4] for row in cache.rows()} == {"good": True, "bad": False}   # ls, stats
    target = KernelCache(private(tmp_path / "m") / "m.db")
    with pytest.warns(UserWarning, match="does not unpack; not merged"):
        assert target.merge_from(db) == 1                                            # merge, --ship
    assert target.keys() == ["good"]
    assert cache.verify() == ["bad"] and cache.keys() == ["good"]                    # verify drops it


def _legacy_world(tmp_path, monkeypatch, read_only: bool):
    """A cache holding one sm80 kernel as the previous cache format stored it (raw, keyed and
    stamped with format 2), compiling forbidden."""
    from cutlass_sparse import env
    from cutlass_sparse.build import kernels
    from cutlass_sparse.describe import selection

    config = selection.config_for_shape(256, 64, 256, "f16", "f16", "row", 108, "sm80")
    emitted, options, _ = kernels._keyed(config, "sm_80")
    old = env.toolchain_identity(2)
    db = private(tmp_path / "c") / "old.db"
    writer = KernelCache(db)
    writer.put("placeholder", "x", "sm_80", b"x", {})   # creates the file; replaced below
    writer.close()
    meta = json.dumps({"constants": {"shared_bytes": 1, "threads": 128}, "compile_seconds": 2.0,
                       "config": config.to_json(), "toolchain": old}, sort_keys=True)
    raw = b"\x7fELF raw cubin of format 2"
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM kernels")
        conn.execute("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, 0)",
                     (kernels.cache_key(emitted, "sm_80", options, old), config.name, "sm_80", raw, meta,
                      cache_files.checksum(raw, meta)))
        conn.execute("DELETE FROM toolchains")
        conn.execute("INSERT INTO toolchains VALUES (?, 0)", (old,))
    if read_only:
        db.chmod(0o444)
    monkeypatch.setenv("CUTLASS_SPARSE_NO_COMPILE", "1")
    return config, raw, KernelCache(db, read_only=read_only)


@pytest.mark.parametrize("read_only", [False, True], ids=["writable", "shipped"])
def test_an_entry_of_the_previous_format_serves_without_a_compile(tmp_path, monkeypatch, read_only):
    import warnings

    from cutlass_sparse.build import kernels

    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a format-2 file is not reported as another version's
        config, raw, cache = _legacy_world(tmp_path, monkeypatch, read_only)
        assert kernels.cached(config, "sm_80", cache)
        got = kernels.get(config, "sm_80", cache)
        assert got.from_cache and got.cubin == raw and got.key == kernels.key_for(config, "sm_80")
        assert config in kernels.present("sm_80", cache)     # the no-compile fallback lists it


def _stamps(db):
    with sqlite3.connect(db) as conn:
        return {row[0] for row in conn.execute("SELECT identity FROM toolchains")}


def test_repack_moves_what_this_version_emits_and_keeps_the_rest(tmp_path, monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    from cutlass_sparse import env
    from cutlass_sparse.build import cache_repack, kernels

    config, raw, cache = _legacy_world(tmp_path, monkeypatch, read_only=False)
    old = env.toolchain_identity(2)
    stray = json.dumps({"constants": {}, "compile_seconds": 1.0, "config": config.to_json(), "toolchain": old},
                       sort_keys=True)
    with sqlite3.connect(cache.path) as conn:   # format 2, but not what this version emits under that key
        conn.execute("INSERT INTO kernels VALUES ('stray', 'n', 'sm_80', ?, ?, ?, 0)",
                     (b"\x7fELF other", stray, cache_files.checksum(b"\x7fELF other", stray)))
        conn.execute("INSERT INTO kernels VALUES ('garbled', 'n', 'sm_80', ?, 'not json', ?, 0)",
                     (b"x", cache_files.checksum(b"x", "not json")))
    assert cache_repack.repack(cache) == cache_repack.Repacked(moved=1, kept=1, complete=True)
    new_key = kernels.key_for(config, "sm_80")
    assert sorted(cache.keys()) == sorted([new_key, "stray", "garbled"])
    assert stored(cache.path, new_key).startswith(cache_files.PACKED)
    assert env.toolchain_identity() in _stamps(cache.path)            # the file says who wrote the moved entry
    got = kernels.get(config, "sm_80", KernelCache(cache.path))      # compiling is forbidden here
    assert got.from_cache and got.cubin == raw
    assert cache_repack.repack(cache) == cache_repack.Repacked(moved=0, kept=1)   # nothing left to move
    cache.close()
    done = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "repack", "--path", str(cache.path)],
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent)))
    assert done.returncode == 0 and "0 entries moved to cache format 3; 1 of an earlier format" in done.stdout


def test_a_move_that_fails_leaves_the_entry_as_it_was(tmp_path, monkeypatch):
    from cutlass_sparse.build import cache_repack, kernels

    config, raw, cache = _legacy_world(tmp_path, monkeypatch, read_only=False)
    before = cache.keys()
    with sqlite3.connect(cache.path) as conn:   # the insert fails after the delete, inside the transaction
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON kernels BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(sqlite3.DatabaseError, match="refused"):
        cache_repack.repack(cache)
    assert cache.keys() == before and not stored(cache.path, before[0]).startswith(cache_files.PACKED)
    assert kernels.get(config, "sm_80", KernelCache(cache.path)).cubin == raw


def test_a_refused_write_stops_the_repack_and_loses_nothing(tmp_path, monkeypatch):
    from cutlass_sparse.build import cache_repack

    _, _, cache = _legacy_world(tmp_path, monkeypatch, read_only=False)
    before = cache.keys()
    monkeypatch.setattr(cache, "_write", lambda run: False)   # what a full disk answers
    assert cache_repack.repack(cache) == cache_repack.Repacked(moved=0, kept=0, complete=False)
    assert cache.keys() == before


def test_an_entry_removed_meanwhile_is_not_brought_back(tmp_path, monkeypatch):
    from cutlass_sparse.build import cache_repack

    _, _, cache = _legacy_world(tmp_path, monkeypatch, read_only=False)
    real = cache_repack._current_key

    def cleared_meanwhile(meta, arch, key):   # another process clears the file between look and move
        with sqlite3.connect(cache.path) as conn:
            conn.execute("DELETE FROM kernels")
        return real(meta, arch, key)

    monkeypatch.setattr(cache_repack, "_current_key", cleared_meanwhile)
    assert cache_repack.repack(cache).moved == 0
    assert cache.keys() == []


def test_repack_refuses_a_read_only_file(tmp_path, monkeypatch):
    from cutlass_sparse.build import cache_repack

    _, _, cache = _legacy_world(tmp_path, monkeypatch, read_only=True)
    with pytest.raises(PermissionError, match="cannot repack read-only"):
        cache_repack.repack(cache)
