"""Warm-up jobs and a cache that never fails its users (CPU only)."""
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cutlass_sparse.build import cache_files, warmup
from cutlass_sparse.build.cache import KernelCache

ROOT = Path(__file__).resolve().parent.parent


def run_script(*args, cache_path):
    env = dict(os.environ, CUTLASS_SPARSE_CACHE=str(cache_path))
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "warmup_cache.py"), *args],
                          env=env, capture_output=True, text=True)


def test_shards_cover_every_kernel_exactly_once():
    items = warmup.catalog_items(["sm_80", "sm_86", "sm_90a"], widest_only=False)
    shards = [warmup.shard(items, i, 7) for i in range(7)]
    seen = [(c.name, a) for part in shards for c, a in part]
    assert len(seen) == len(set(seen)) == len({(c.name, a) for c, a in items})
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    with pytest.raises(ValueError, match="shard 7/7"):
        warmup.shard(items, 7, 7)


def test_warmup_small_catalog_then_everything_cached(tmp_path):
    db = tmp_path / "warm.db"
    first = run_script("--arch", "sm_80", "--jobs", "2", "--only", "f16_s16832spgemm_f16_64x64_64x4_t",
                       cache_path=db)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "summary: 2 compiled, 0 already cached, 0 failed" in first.stdout
    second = run_script("--arch", "sm_80", "--jobs", "2", "--only", "f16_s16832spgemm_f16_64x64_64x4_t",
                        cache_path=db)
    assert "summary: 0 compiled, 2 already cached, 0 failed" in second.stdout


def test_warmup_sm90a_compressors(tmp_path):
    result = run_script("--arch", "sm_90a", "--jobs", "2", "--only", "compressor", cache_path=tmp_path / "w.db")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "summary: 2 compiled" in result.stdout


def test_shards_then_merge(tmp_path):
    only = ["--arch", "sm_80", "--jobs", "1", "--only", "f16_s16832spgemm_f16_64x64_64x4_t"]
    for i in range(2):
        assert run_script(*only, "--shard", f"{i}/2", cache_path=tmp_path / f"s{i}.db").returncode == 0
    merged = tmp_path / "merged.db"
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "warmup_cache.py"), "merge", str(merged),
                          str(tmp_path / "s0.db"), str(tmp_path / "s1.db")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"{merged}: 2 kernels" in out.stdout
    again = run_script(*only, cache_path=merged)
    assert "0 compiled, 2 already cached" in again.stdout


WRITER = """
import sys, time
from cutlass_sparse.build.cache import KernelCache
if len(sys.argv) > 4:
    time.sleep(max(0.0, float(sys.argv[4]) - time.time()))
cache = KernelCache(sys.argv[1])
who, count = sys.argv[2], int(sys.argv[3])
for i in range(count):
    cache.put(f"{who}-{i}", f"kernel-{who}-{i}", "sm_80", bytes([i % 256]) * 20000, {"i": i, "who": who})
"""


def test_concurrent_writers_lose_nothing(tmp_path):
    db = tmp_path / "busy.db"
    KernelCache(db)   # create
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), f"w{w}", "150"], env=env) for w in range(6)]
    assert all(p.wait() == 0 for p in procs)
    elapsed = time.perf_counter() - start
    cache = KernelCache(db)
    rows = cache.rows()
    assert len(rows) == 6 * 150 and all(ok for *_, ok in rows)
    assert cache.verify() == []
    print(f"6 processes x 150 puts of 20 kB: {len(rows)} entries intact in {elapsed:.2f} s")


@pytest.mark.parametrize("round", range(3))
def test_processes_creating_a_new_cache_at_once_all_succeed(tmp_path, round):
    # The race CI hit: workers opening a file none had created yet. "locked" is contention,
    # never corruption, so nobody may set the file aside and nothing may be lost.
    db = tmp_path / "fresh.db"
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="error")
    start_at = str(time.time() + 1.0)  # every process opens the file at the same instant
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(db), f"w{w}", "5", start_at], env=env,
                              stderr=subprocess.PIPE, text=True) for w in range(8)]
    errors = [p.communicate()[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    assert not list(tmp_path.glob("fresh.db.corrupt-*"))
    assert len(KernelCache(db).rows()) == 8 * 5


def test_corrupted_file_is_set_aside_and_rebuilt(tmp_path):
    db = tmp_path / "c.db"
    db.write_bytes(cache_files.SQLITE_HEADER + b"this is not a sqlite database" * 100)   # a cache, damaged
    with pytest.warns(UserWarning, match="unreadable"):
        cache = KernelCache(db)
    cache.put("k", "n", "sm_80", b"x", {})
    assert cache.get("k").cubin == b"x"
    assert list(tmp_path.glob("c.db.corrupt-*"))


@pytest.mark.parametrize("content", ["text", "another database"])
def test_a_file_that_is_not_a_cache_is_refused_and_left_as_it_is(tmp_path, content):
    """Session 37's review: a text file named as the cache was renamed aside and replaced,
    and another program's SQLite database got our tables. Now neither is touched."""
    db = tmp_path / "notes.db"
    if content == "text":
        db.write_text("my notes\n" * 100)
    else:
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE users (name TEXT)")
    before = db.read_bytes()
    for read_only in (None, True):
        with pytest.raises(cache_files.NotACacheError, match="is not a cutlass-sparse kernel cache"):
            KernelCache(db, read_only=read_only)
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_truncated_entry_is_dropped(tmp_path):
    db = tmp_path / "t.db"
    cache = KernelCache(db)
    cache.put("k", "n", "sm_80", b"\x7fELF" + b"\0" * 100, {"a": 1})
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE kernels SET cubin = substr(cubin, 1, 10)")
    with pytest.warns(UserWarning, match="failed its checksum"):
        assert KernelCache(db).get("k") is None


def test_read_only_cache_serves_and_keeps_new_kernels_in_memory(tmp_path, monkeypatch):
    db = tmp_path / "ro.db"
    KernelCache(db).put("old", "n", "sm_80", b"old", {})
    ro = KernelCache(db, read_only=True)
    assert ro.get("old").cubin == b"old"
    ro.put("new", "n", "sm_80", b"new", {})
    assert ro.get("new").cubin == b"new"
    with pytest.raises(PermissionError, match="read-only"):
        ro.clear()
    ro.close()
    assert KernelCache(db).get("new") is None     # nothing was written to the file
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE_READONLY", "1")
    assert KernelCache(db).read_only


def test_entries_of_another_toolchain_are_not_served(monkeypatch):
    from cutlass_sparse import env
    from cutlass_sparse.build import kernels

    source, options = "// some kernel", ["-arch=sm_80"]
    ours = kernels.cache_key(source, "sm_80", options)
    monkeypatch.setattr(env, "toolchain_identity", lambda: "nvidia-cutlass 9.9.9\nnvrtc 99.0")
    assert kernels.cache_key(source, "sm_80", options) != ours


def test_cache_command_line(tmp_path):
    db = tmp_path / "cli.db"
    KernelCache(db).put("abc", "some_kernel", "sm_80", b"bytes", {})
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", *args, "--path", str(db)],
                              capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert "some_kernel" in cli("ls").stdout
    assert "1 kernels" in cli("stats").stdout
    assert "0 kernels compiled with ptxas performance notes" in cli("stats").stdout
    KernelCache(db).put("def", "slow_kernel", "sm_90a", b"bytes", {"ptxas_notes": ["C7512: wgmma serialized"]})
    assert "1 kernels compiled with ptxas performance notes:\n  sm_90a   slow_kernel: C7512: wgmma serialized" \
        in cli("stats").stdout
    assert cli("verify").returncode == 0
    assert "removed 2 entries" in cli("clear").stdout


def test_workers_compile_every_kind_of_kernel(tmp_path, monkeypatch):
    # GEMMs, the split-K reduction and the sm90 compressor all travel to workers as JSON.
    from cutlass_sparse.describe.helper_kernels import CompressorConfig, ReductionConfig

    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "kinds.db"))
    items = [(ReductionConfig("f16", 8, "relu"), "sm_80"), (CompressorConfig("bf16"), "sm_90a")]
    results = warmup.compile_all(items, jobs=2)
    assert sorted(status for _, _, status, _ in results) == ["compiled", "compiled"], results


def test_gpu_session_list_enumerates_every_kernel_it_runs():
    # tests/gpu_cases.py --family session: what the CPU machine compiles for the GPU session
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpu_cases

    items = gpu_cases.session_configs()
    assert len(items) == len(set(items)) > 50
    assert {arch for _, arch in items} == {"sm_90", "sm_90a"}
    for config, arch in items:   # sm80 kernels for the H100's own sm_90; sm90 ones and the staging copy for sm_90a
        sm90a = config.family.startswith("sm90") or config.family == "line_copy"
        assert arch == ("sm_90a" if sm90a else "sm_90"), (config.name, arch)


def test_stats_passes_over_an_entry_whose_meta_does_not_parse(tmp_path):
    import sqlite3

    db = tmp_path / "bad_meta.db"
    KernelCache(db).put("abc", "some_kernel", "sm_80", b"bytes", {"ptxas_notes": ["C7512: x"]})
    with sqlite3.connect(db) as c:
        c.execute("UPDATE kernels SET meta = 'not json' WHERE key = 'abc'")
    assert KernelCache(db).performance_notes() == []
    result = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "stats", "--path", str(db)],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0 and "0 kernels compiled with ptxas performance notes" in result.stdout


def test_another_programs_database_is_not_written_even_with_a_wal_pending(tmp_path):
    """Session 37's second review: refusing on a read-write connection still checkpointed the
    foreign file's WAL into it when that connection closed. The check reads immutable."""
    db = tmp_path / "app.db"
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("PRAGMA journal_mode=wal")
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("CREATE TABLE users (name TEXT)")
    writer.execute("INSERT INTO users VALUES ('a')")
    files = ("app.db", "app.db-wal")   # (the -shm index changes with every reader: SQLite's, not data)
    snapshot = {name: (tmp_path / name).read_bytes() for name in files}   # the WAL holds the insert
    assert (tmp_path / "app.db-wal").stat().st_size
    for read_only in (None, True):
        with pytest.raises(cache_files.NotACacheError):
            KernelCache(db, read_only=read_only)
    assert {name: (tmp_path / name).read_bytes() for name in files} == snapshot
    writer.close()


def test_a_cache_whose_header_was_zeroed_is_set_aside_not_refused(tmp_path):
    db = tmp_path / "c.db"
    KernelCache(db).put("k", "n", "sm_80", b"x", {})
    data = bytearray(db.read_bytes())
    data[:100] = bytes(100)
    db.write_bytes(bytes(data))
    for name in ("c.db-wal", "c.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    with pytest.warns(UserWarning, match="damaged"):
        cache = KernelCache(db)
    cache.put("k2", "n", "sm_80", b"y", {})
    assert cache.get("k2").cubin == b"y" and list(tmp_path.glob("c.db.corrupt-*"))
