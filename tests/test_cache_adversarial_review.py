"""Session 19's adversarial review of the kernel cache (docs/review_cache_session19.md).

Every test here demonstrates a bug found in the review and failed on the tree it was
written against; its docstring names the rule it breaks. Fixed in session 19: findings 1,
2, 3, 4, 6, 9, 11; in session 20: findings 5, 7, 8 and 10 (every test here passes now, and
session 20 added the tests after each finding's own). CPU only, nothing compiles:
entries are synthetic, as in tests/test_cache_trust.py. A reader that cannot write the
file or its directory is emulated the way the existing tests do it (cache._writable).
"""
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import warnings
from pathlib import Path

import pytest

from cutlass_sparse import env, trust
from cutlass_sparse.build import cache as cache_mod
from cutlass_sparse.build import cache_files, cache_repair, cache_ship
from cutlass_sparse.build.cache import KernelCache, UnsafeCacheError

ROOT = Path(__file__).resolve().parent.parent
OTHER_UID = 12345


sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cache_trust import fresh_state  # noqa: E402,F401  (autouse: private temp dir, no cache left over)


@pytest.fixture(autouse=True)
def no_cache_environment(monkeypatch):
    for name in ("CUTLASS_SPARSE_CACHE", "CUTLASS_SPARSE_CACHE_READONLY", "CUTLASS_SPARSE_NO_COMPILE"):
        monkeypatch.delenv(name, raising=False)


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def put(cache: KernelCache, key: str, cubin: bytes, **meta) -> None:
    cache.put(key, f"kernel-{key}", "sm_80", cubin, {"who": key, **meta})


def filled(path: Path, prefix: str, count: int, size: int = 100, **kw) -> Path:
    cache = KernelCache(path, **kw)
    for i in range(count):
        put(cache, f"{prefix}{i}", bytes([i % 251]) * size)
    cache.close()
    return path


def as_reader_that_cannot_write(monkeypatch, path: Path) -> KernelCache:
    """KernelCache(path) as a user who can write neither the file nor its directory sees it."""
    with monkeypatch.context() as m:
        m.setattr(cache_mod, "_writable", lambda p: False)
        return KernelCache(path)


def killed_writer(db: Path, before: list[str], after: list[str]) -> None:
    """A process puts `before`, checkpoints, puts `after` (committed, still in db-wal), is SIGKILLed."""
    pid = os.fork()
    if pid == 0:
        try:
            cache = KernelCache(db)
            for key in before:
                put(cache, key, b"b" * 100)
            cache._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            for key in after:
                put(cache, key, b"a" * 100)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)


def cli(*args, cwd=None, **variables):
    return subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT), **variables))


# -- 1. a wrong binary -------------------------------------------------------------------

@pytest.mark.parametrize("rows, size", [(120, 20000), (1000, 1500)])
def test_immutable_reader_never_serves_another_kernels_binary(tmp_path, monkeypatch, rows, size):
    """Rule: the cache never serves a wrong binary. A reader that can write neither the file
    nor its directory (a root-owned shared cache read by users) opens it immutable, which tells
    SQLite the file never changes; the owner's `cache clear`, compact and warm-up rewrite the
    same inode, the reader mixes its cached index pages with the new table pages, and
    get(A_i) returns kernel B_i's cubin. The per-row checksum covers cubin and meta only, not
    the key, so nothing notices."""
    db = filled(private(tmp_path / "shared") / "c.db", "A", rows, size)
    reader = as_reader_that_cannot_write(monkeypatch, db)
    assert not reader._immutable   # the fix: a file its owner may rewrite is never opened immutable
    assert all(reader.get(f"A{i}").meta["who"] == f"A{i}" for i in range(rows))
    owner = KernelCache(db)              # the owner: cache clear, compact, a warm-up
    owner.clear()
    owner.compact()
    for i in range(rows):
        put(owner, f"B{i}", bytes([(i * 7) % 251]) * size)
    owner.close()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        served = {f"A{i}": reader.get(f"A{i}") for i in range(rows)}
    wrong = {key: entry.meta["who"] for key, entry in served.items() if entry and entry.meta["who"] != key}
    assert wrong == {}, f"{len(wrong)} keys served another kernel's cubin, e.g. {list(wrong.items())[:3]}"


# -- 2. shipping ---------------------------------------------------------------------------

def test_ship_over_a_cache_that_a_process_holds_open_keeps_the_shipped_entries(tmp_path):
    """Rule: `cache merge --ship` never loses an entry, and readers see the old file or the new
    one. ship() renames the new file over the target but leaves the target's -wal and -shm;
    SQLite applies the old file's WAL to the new file, so the shipped entries vanish (the file
    reads as the old one, or as malformed and is set aside by the next writer)."""
    d = private(tmp_path / "c")
    filled(d / "src.db", "s", 3)
    live = KernelCache(d / "own.db")        # a serving or warm-up process with the cache open
    put(live, "old", b"o" * 100)
    cache_ship.ship(d / "own.db", [d / "src.db"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reader = KernelCache(d / "own.db", read_only=True)
        found = {key: reader.get(key) is not None for key in ("s0", "s1", "s2", "old")}
    live.close()
    assert all(found.values()), f"after shipping, a fresh reader finds {found}; beside it: {os.listdir(d)}"


def test_ship_after_a_killed_writer_keeps_the_shipped_entries(tmp_path):
    """Rule: never loses an entry (a crash mid-write, then merge of shards). A warm-up killed
    with committed entries in own.db-wal, then `cache merge --ship --path own.db src.db`:
    the stale WAL overlays the shipped file for good, and src's entries are gone."""
    d = private(tmp_path / "c")
    filled(d / "src.db", "s", 3)
    killed_writer(d / "own.db", ["b0", "b1"], ["a0"])
    cache_ship.ship(d / "own.db", [d / "src.db"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = set(KernelCache(d / "own.db").keys())
    assert {"s0", "s1", "s2", "b0", "b1", "a0"} <= keys, sorted(keys)


def test_two_concurrent_ships_into_one_target_lose_nothing(tmp_path):
    """Rule: never loses an entry (concurrent writers in several processes, merge of shards).
    Two `cache merge --ship` runs into one target, started together in two processes: each
    read the target, built its own file and renamed it over the target, so the last rename
    won and the other's shard was lost, both exiting 0 (two real processes lost 200 of 400
    entries). Ships now take turns (a lock file beside the target)."""
    import multiprocessing

    d = private(tmp_path / "c")
    filled(d / "a.db", "a", 200)
    filled(d / "b.db", "b", 200)
    fleet = d / "fleet.db"
    context = multiprocessing.get_context("fork")
    start = context.Event()

    def run(shard):
        start.wait()
        cache_ship.ship(fleet, [d / shard])

    workers = [context.Process(target=run, args=(shard,)) for shard in ("a.db", "b.db")]
    for w in workers:
        w.start()
    start.set()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    keys = set(KernelCache(fleet, read_only=True).keys())
    assert {f"a{i}" for i in range(200)} | {f"b{i}" for i in range(200)} <= keys, len(keys)


@pytest.mark.parametrize("ship", [False, True])
def test_merge_of_an_unreadable_source_is_not_a_success(tmp_path, ship):
    """Rule: merging shards never loses an entry silently. A shard that cannot be read (not a
    database, or truncated while being copied) adds 0 entries with one warning that says
    'compiling into memory', and `cache merge [--ship]` exits 0: the pipeline ships a fleet
    file without that shard. (ship() refuses an unreadable target, but not a source.)"""
    d = private(tmp_path / "c")
    good = filled(d / "good.db", "g", 2)
    shard = filled(d / "shard.db", "s", 50, size=3000)
    with open(shard, "r+b") as handle:        # truncated on its way to the shared directory
        handle.truncate(4096 * 2)
    result = cli("cache", "merge", *(["--ship"] if ship else []), "--path", str(d / "fleet.db"), str(good),
                 str(shard))
    assert result.returncode != 0, result.stdout + result.stderr


# -- 3. read-only and immutable ------------------------------------------------------------

def test_immutable_open_does_not_ignore_committed_entries_in_the_wal(tmp_path, monkeypatch):
    """Rule: never loses an entry; serves read-only. A WAL file whose writer was killed keeps
    committed entries in its -wal; a reader that can write neither it nor its directory opens
    it immutable, which ignores the -wal (cache_files.shipped_file says so, but the
    unwritable-directory case opens immutable anyway): a committed kernel is not served, and
    with CUTLASS_SPARSE_NO_COMPILE=1 its call fails. A merge from such a shard loses it too."""
    db = private(tmp_path / "c") / "c.db"
    killed_writer(db, ["k0"], ["k1"])
    assert Path(f"{db}-wal").stat().st_size > 0
    assert KernelCache(db, read_only=True).get("k1") is not None      # a reader that may lock sees it
    reader = as_reader_that_cannot_write(monkeypatch, db)
    assert reader.get("k0") is not None
    assert reader.get("k1") is not None, f"immutable={reader._immutable}: k1 (committed, in c.db-wal) not served"


FULL_DISK_READ = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))   # no file may grow past 4 kB: a full disk
from cutlass_sparse.build.cache import default_cache
print("served", default_cache().get("k3") is not None)
"""


@pytest.mark.parametrize("read_only", ["0", "1"])
def test_a_full_disk_does_not_stop_a_warm_cache_from_serving(tmp_path, read_only):
    """Rule: never loses an entry (a full disk). A warm, intact cache on a disk with no room
    left: opening it needs a -shm (and -wal) it cannot create, so default_cache() raises
    'disk I/O error' (every call fails, cache hits included), or read-only it warns
    'unreadable' and serves nothing. Also seen on a full 2 MB tmpfs (ENOSPC)."""
    db = filled(private(tmp_path / "c") / "c.db", "k", 10, size=50000)
    assert sorted(os.listdir(db.parent)) == ["c.db"]
    result = subprocess.run([sys.executable, "-c", FULL_DISK_READ], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), CUTLASS_SPARSE_CACHE=str(db),
                                     CUTLASS_SPARSE_CACHE_READONLY=read_only))
    assert result.returncode == 0 and "served True" in result.stdout, \
        (result.stdout + result.stderr).strip().splitlines()[-1:]


FULL_DISK_PUT = """
import resource, sys, warnings
from cutlass_sparse.build.cache import KernelCache
cache = KernelCache(sys.argv[1])
cache.put("old", "n", "sm_80", b"o" * 100, {})
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))   # the disk fills up while the process runs
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    cache.put("new", "n", "sm_80", b"x" * 100000, {})       # compiled: too big for what is left
    cache.put("next", "n", "sm_80", b"y" * 100000, {})
    cache.put_winner("sig", {"name": "w"}, [])
print("warnings", len(caught), "found", [cache.get(k) is not None for k in ("old", "new", "next")],
      cache.get_winner("sig"))
"""


def test_a_put_on_a_full_disk_keeps_the_kernel_in_memory(tmp_path):
    """Finding 5, its second half: a put that the disk refuses raised after a successful
    compile, so the caller's GEMM failed instead of running from memory. Now the kernel (and
    every later one, and a profiler record) stays in the overlay, with one warning."""
    db = private(tmp_path / "c") / "c.db"
    result = subprocess.run([sys.executable, "-c", FULL_DISK_PUT, str(db)], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.returncode == 0, result.stderr.strip().splitlines()[-1:]
    assert "warnings 1 found [True, True, True] ({'name': 'w'}, [])" in result.stdout, result.stdout
    assert KernelCache(db).keys() == ["old"]      # the file is intact: what it held, nothing half-written


# -- 4. damaged files ----------------------------------------------------------------------

def test_cache_verify_of_a_damaged_cache_does_not_report_success(tmp_path):
    """Rule: `cache verify` exits 1 when entries failed (cli/cache.py). A cache of 300 entries
    with a damaged index page: verify sets the whole file aside and prints '0 entries failed
    their checksum', exit 0, with all 300 entries gone from the cache."""
    db = filled(private(tmp_path / "c") / "c.db", "k", 300, size=1500)
    with open(db, "r+b") as handle:
        handle.seek(4096 * 2)
        handle.write(b"\xde\xad\xbe\xef" * 256)
    result = cli("cache", "verify", "--path", str(db))
    assert result.returncode != 0, result.stdout + result.stderr
    asides = list(db.parent.glob("c.db.corrupt-*[0-9]"))
    assert len(asides) == 1 and str(asides[0]) in result.stdout, (asides, result.stdout)


def test_openers_of_a_damaged_file_at_once_lose_no_entry(tmp_path, monkeypatch):
    """Rule: never loses an entry (concurrent writers in several processes). Two processes
    open a damaged cache at once; both fail to read it; the first sets it aside, starts a
    fresh file and writes into it; the second then sets aside whatever is at the path now
    (its identity check passes because it never opened a file): the first's new entries go
    with it. Interleaved deterministically here; 8 processes started at once on a damaged
    file lost 3 to 20 of 160 entries in 2 of 18 runs."""
    db = private(tmp_path / "c") / "c.db"
    db.write_bytes(cache_files.SQLITE_HEADER + b"not a database " * 500)   # a cache of ours, damaged
    real_move, late_in, go, opened = cache_repair.move_aside, threading.Event(), threading.Event(), []

    def move_aside(real, still_ours):
        if threading.current_thread().name == "late":
            late_in.set()
            go.wait(10)
        return real_move(real, still_ours)

    monkeypatch.setattr(cache_repair, "move_aside", move_aside)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        late = threading.Thread(target=lambda: opened.append(KernelCache(db)), name="late")
        late.start()
        assert late_in.wait(10)           # the second process failed to read the damaged file
        first = KernelCache(db)           # the first sets it aside and starts afresh
        put(first, "compiled", b"c" * 100)
        go.set()
        late.join(10)
        assert KernelCache(db).get("compiled") is not None, sorted(os.listdir(db.parent))


def test_a_hot_journal_is_held_to_the_same_ownership_rule_as_the_wal(tmp_path, monkeypatch):
    """Rule: the cache file and everything SQLite reads beside it must be the user's (or
    root's): check_cache_location checks c.db, c.db-wal and c.db-shm, not c.db-journal.
    SQLite rolls a hot journal back into the database on open, so a journal another user
    owns puts their pages, a forged entry included, into ours and it is served."""
    db = private(tmp_path / "c") / "c.db"
    cache = KernelCache(db, journal="delete")          # rollback-journal file, as shipped
    put(cache, "k", b"G" * 3000)
    cache.close()
    forged = private(tmp_path / "theirs") / "f.db"
    shutil.copy(db, forged)
    meta = '{"who": "k"}'
    with sqlite3.connect(forged) as conn:
        conn.execute("UPDATE kernels SET cubin = ?, checksum = ? WHERE key = 'k'",
                     (b"E" * 3000, cache_files.checksum(b"E" * 3000, meta)))
    pid = os.fork()
    if pid == 0:                   # leave a hot journal holding the forged pages
        conn = sqlite3.connect(forged, isolation_level=None)
        conn.execute("PRAGMA cache_size=1")
        conn.execute("BEGIN")
        conn.execute("UPDATE kernels SET cubin = ? WHERE key = 'k'", (b"G" * 3000,))
        for i in range(50):
            conn.execute("INSERT INTO winners VALUES (?, '', '', '', 0)", (str(i) * 400,))
        os._exit(0)
    os.waitpid(pid, 0)
    journal = Path(f"{db}-journal")
    shutil.copy(f"{forged}-journal", journal)
    real = trust._owner_uid
    inode = journal.stat().st_ino
    monkeypatch.setattr(trust, "_owner_uid", lambda st: OTHER_UID if st.st_ino == inode else real(st))
    try:
        opened = KernelCache(db)
    except UnsafeCacheError:
        return
    served = opened.get("k").cubin[:4]
    pytest.fail(f"a -journal owned by uid {OTHER_UID} was accepted and rolled back; get('k') served {served!r}")


# -- 5. versions ---------------------------------------------------------------------------

def foreign_read_only_primary(tmp_path, monkeypatch) -> KernelCache:
    theirs = env.toolchain_identity().replace(f"cutlass_sparse {env.PACKAGE_VERSION}", "cutlass_sparse 0.0.9")
    old = KernelCache(private(tmp_path / "c") / "old.db")
    old.put("k", "n", "sm_80", b"foreign", {"toolchain": theirs})
    old.put_winner("sig", {"name": "their choice"}, [])
    old.close()
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "c" / "old.db"))
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE_READONLY", "1")
    return cache_mod.default_cache()


def test_foreign_read_only_cache_serves_no_profiler_record(tmp_path, monkeypatch):
    """Rule (README, Versions): a read-only file written only by other versions is not
    searched at all, its profiler records included. Listed after a writable cache it is not;
    as the only (first) entry, read-only, get() skips it but get_winner() and winners() still
    read its records."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache = foreign_read_only_primary(tmp_path, monkeypatch)
        assert cache.get("k") is None
        assert cache.get_winner("sig") is None and cache.winners() == []


def test_kernels_compiled_beside_a_foreign_read_only_cache_stay_found(tmp_path, monkeypatch):
    """Rule (KernelCache): kernels compiled while the file is read-only live in an in-memory
    overlay for the life of the process. When that file is foreign, get() skips the whole
    cache, overlay included, so a kernel put a moment ago is not found (kernels.cached()
    says False; the no-compile fallback and stand-ins never see it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cache = foreign_read_only_primary(tmp_path, monkeypatch)
        cache.put("new", "n", "sm_80", b"compiled here", {})
        assert cache.get("new") is not None


def test_a_foreign_files_records_are_still_listed_and_merged(tmp_path, monkeypatch):
    """Finding 10's fix keeps a foreign file's records out of what is served (winners(),
    get_winner()), not out of `cache ls` and `cache merge`, which say whose they are."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        foreign_read_only_primary(tmp_path, monkeypatch)
        old = tmp_path / "c" / "old.db"
        assert [sig for sig, _, _ in KernelCache(old, read_only=True).records()] == ["sig"]
        merged = KernelCache(tmp_path / "c" / "merged.db", read_only=False)
        merged.merge_from(old)
        assert [sig for sig, _, _ in merged.records()] == ["sig"]
    assert "winner  sig  ->  their choice" in cli("cache", "ls", "--path", str(old)).stdout


# -- 6. the command line -------------------------------------------------------------------

@pytest.mark.parametrize("case", ["arch-other-digits", "tune-undecodable", "merge-path-is-a-directory"])
def test_bad_command_line_is_one_line_and_status_2(tmp_path, case):
    """Rule: a bad command line gets one line and exit status 2. `--arch ٨٠` (Arabic-Indic
    digits: str.isdigit and \\d accept them) passes as target 'sm_٨٠' and fails later per
    kernel (or, with nothing to compile, exits 0); an undecodable --tune file is exit 1; a
    --path naming a directory is exit 1 with 'unable to open database file', naming neither."""
    work = private(tmp_path / "work")
    (work / "shapes.txt").write_bytes(b"\xff\xfe 64 64 64\n")
    private(work / "adir")
    source = filled(work / "s.db", "s", 1)
    args = {"arch-other-digits": ["warmup", "--arch", "\u0668\u0660", "--only", "no_such_kernel"],
            "tune-undecodable": ["warmup", "--tune", "shapes.txt"],
            "merge-path-is-a-directory": ["cache", "merge", "--path", str(work / "adir"), str(source)]}[case]
    result = cli(*args, cwd=work, CUTLASS_SPARSE_CACHE=str(private(tmp_path / "cache") / "c.db"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, \
        (result.returncode, lines)


# -- session 37's review: what the cache commands do with damaged, foreign and missing files --

def _cli(*args, capsys=None) -> tuple[int, str]:
    from cutlass_sparse.cli import main as cli_main

    try:
        status = cli_main.main(list(args))
    except SystemExit as stop:   # a usage error
        status = stop.code
    return status, capsys.readouterr() if capsys is not None else ""


@pytest.mark.parametrize("action", ["ls", "stats"])
def test_listing_a_damaged_cache_fails_and_says_to_verify(tmp_path, capsys, action):
    db = filled(private(tmp_path / "c") / "c.db", "k", 40, size=4000)
    with open(db, "r+b") as handle:
        handle.truncate(4096)                      # the reviewer's `truncate -s 4096`
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status, out = _cli("cache", action, "--path", str(db), capsys=capsys)
    assert status == 1 and "cache verify" in out.err, out


def test_a_merge_that_fails_leaves_no_new_file_and_makes_no_directory(tmp_path, capsys):
    out_dir = private(tmp_path / "out")
    junk = out_dir / "notdb.db"
    junk.write_text("not a database")
    status, said = _cli("cache", "merge", str(junk), "--path", str(out_dir / "out.db"), capsys=capsys)
    assert status == 1 and "not a cutlass-sparse kernel cache" in said.err
    assert sorted(p.name for p in out_dir.iterdir()) == ["notdb.db"] and junk.read_text() == "not a database"
    good = filled(private(tmp_path / "c") / "c.db", "k", 2)
    status, said = _cli("cache", "merge", str(good), "--path", str(tmp_path / "missing" / "dir" / "out.db"),
                        capsys=capsys)
    assert status == 2 and "--path" in said.err and not (tmp_path / "missing").exists()
