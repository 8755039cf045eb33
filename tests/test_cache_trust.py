"""The kernel cache trusts nothing it should not (issue 12): foreign or shared-writable
files, directories and symbolic links are refused; failed sources go to a private
directory without following planted links; a damaged page is set aside once; a
read-only cache serves; an unwritable HOME falls back to a private temporary cache.
CPU only."""
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

import forked

from cutlass_sparse import env, trust
from cutlass_sparse.build import cache as cache_mod
from cutlass_sparse.build import cache_files, compiler
from cutlass_sparse.build.cache import KernelCache, UnsafeCacheError

ROOT = Path(__file__).resolve().parent.parent
OTHER_UID = 12345


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    """Private temp dir per test, no memoized cache path or process-wide cache left over."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o700)
    env._cache_path.cache_clear()
    monkeypatch.setattr(cache_mod, "_default", None)
    yield
    env._cache_path.cache_clear()


def fake_owner(monkeypatch, *paths, uid=OTHER_UID):
    """Make the owner check see these files as another user's (works as root or not)."""
    inodes = {os.stat(p).st_ino for p in paths}
    real = trust._owner_uid
    monkeypatch.setattr(trust, "_owner_uid", lambda st: uid if st.st_ino in inodes else real(st))


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def filled(path: Path, count: int = 1, winner: bool = True) -> Path:
    cache = KernelCache(path)
    for i in range(count):
        cache.put(f"k{i}", f"kernel{i}", "sm_80", bytes([i % 256]) * 1500, {"i": i})
    if winner:
        cache.put_winner("sig", {"name": "w"}, [])
    cache.close()
    return path


# -- 1. ownership, permissions, symbolic links -------------------------------------------

def test_file_owned_by_another_user_is_refused_even_with_a_valid_checksum(tmp_path, monkeypatch):
    db = filled(private(tmp_path / "c") / "c.db")
    with sqlite3.connect(db) as conn:       # a forged entry whose sha256 was recomputed
        conn.execute("UPDATE kernels SET cubin = ?, checksum = ? WHERE key = 'k0'",
                     (b"forged", cache_files.checksum(b"forged", '{"i": 0}')))
    fake_owner(monkeypatch, db)
    with pytest.raises(trust.UntrustedPathError) as info:
        KernelCache(db)
    message = str(info.value)
    assert isinstance(info.value, UnsafeCacheError)
    assert str(db) in message and f"owned by uid {OTHER_UID}" in message
    assert "chown" in message and "CUTLASS_SPARSE_CACHE" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_file_chowned_to_another_user_is_refused(tmp_path):
    db = filled(private(tmp_path / "c") / "c.db")
    os.chown(db, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeCacheError, match="owned by uid 12345"):
        KernelCache(db, read_only=True)
    os.chown(db.parent, OTHER_UID, OTHER_UID)
    os.chown(db, 0, 0)
    with pytest.raises(UnsafeCacheError, match="directory"):
        KernelCache(db)


@pytest.mark.parametrize("what", ["file", "directory"])
def test_group_writable_file_or_directory_is_refused(tmp_path, what):
    db = filled(private(tmp_path / "c") / "c.db")
    (db if what == "file" else db.parent).chmod(0o664 if what == "file" else 0o775)
    with pytest.raises(UnsafeCacheError) as info:
        KernelCache(db)
    target = db if what == "file" else db.parent
    assert f"{target} is writable by other users" in str(info.value)
    assert f"chmod go-w {target}" in str(info.value) and "CUTLASS_SPARSE_CACHE" in str(info.value)


def test_shared_sticky_directory_gets_no_chmod_advice(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)                     # like /tmp: the fix is a private path, not chmod
    with pytest.raises(UnsafeCacheError) as info:
        KernelCache(shared / "c.db")
    assert "chmod" not in str(info.value) and "CUTLASS_SPARSE_CACHE" in str(info.value)
    assert not (shared / "c.db").exists()


def test_symbolic_links_are_judged_by_where_they_lead(tmp_path, monkeypatch):
    mine = private(tmp_path / "mine")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "c.db").write_bytes(b"")
    link = mine / "c.db"
    link.symlink_to(shared / "c.db")         # file link into a world-writable directory
    with pytest.raises(UnsafeCacheError, match=f"{shared} is writable by other users"):
        KernelCache(link)
    link.unlink()
    theirs = filled(private(tmp_path / "theirs") / "c.db")
    link.symlink_to(theirs)                  # file link to another user's file
    fake_owner(monkeypatch, theirs)
    with pytest.raises(UnsafeCacheError, match=f"{theirs} is owned by uid"):
        KernelCache(link)
    (tmp_path / "dirlink").symlink_to(shared)    # directory link into a shared directory
    with pytest.raises(UnsafeCacheError, match="writable by other users"):
        KernelCache(tmp_path / "dirlink" / "c.db")
    link.unlink()
    good = filled(private(tmp_path / "elsewhere") / "c.db")
    link.symlink_to(good)                    # a link to a private file of ours is fine
    assert KernelCache(link).get("k0").cubin == bytes(1500)


def fake_link_owner(monkeypatch, link: Path, uid=OTHER_UID):
    """As fake_owner, for a symbolic link itself (its own inode, not its target's)."""
    inode = os.lstat(link).st_ino
    real = trust._owner_uid
    monkeypatch.setattr(trust, "_owner_uid", lambda st: uid if st.st_ino == inode else real(st))


def untouched(victim: Path, before: bytes) -> bool:
    return victim.read_bytes() == before and [p.name for p in victim.parent.iterdir()] == [victim.name]


def test_an_ancestor_another_user_owns_is_refused_and_nothing_is_touched(tmp_path, monkeypatch):
    """Session 37's review: the owner of an ancestor swapped the cache's directory for a link
    to a directory of root's; the cache opened through it and set root's file aside. The
    walk from / now refuses the ancestor before anything is opened or made."""
    ancestor = private(tmp_path / "shared")
    private(ancestor / "cache")
    victim = filled(private(tmp_path / "victim") / "c.db")
    before = victim.read_bytes()
    (ancestor / "cache").rename(ancestor / "cache.old")
    (ancestor / "cache").symlink_to(victim.parent)   # what the ancestor's owner may do at any time
    fake_owner(monkeypatch, ancestor)
    for call in (lambda: KernelCache(ancestor / "cache" / "c.db"),
                 lambda: KernelCache(ancestor / "cache" / "new" / "c.db")):   # nothing made below it either
        with pytest.raises(trust.UntrustedPathError, match=f"{ancestor} is owned by uid {OTHER_UID}"):
            call()
    assert untouched(victim, before)


def test_links_on_the_way_must_be_ours_or_roots(tmp_path, monkeypatch):
    mine = private(tmp_path / "mine")
    victim = filled(private(tmp_path / "victim") / "c.db")
    before = victim.read_bytes()
    link = mine / "c.db"
    link.symlink_to(victim)
    assert KernelCache(link).get("k0").cubin == bytes(1500)   # our own link: followed
    fake_link_owner(monkeypatch, link)
    with pytest.raises(trust.UntrustedPathError, match=f"{link} is a symbolic link owned by uid {OTHER_UID}"):
        KernelCache(link)
    sticky = tmp_path / "tmp_like"
    sticky.mkdir()
    sticky.chmod(0o1777)                                     # as /tmp: anyone may add an entry
    planted = sticky / "cache"
    planted.symlink_to(victim.parent)
    fake_link_owner(monkeypatch, planted)
    with pytest.raises(trust.UntrustedPathError, match=f"{planted} is owned by uid {OTHER_UID}.*shared directory"):
        KernelCache(planted / "c.db")
    monkeypatch.setattr(trust, "_owner_uid", lambda st: st.st_uid)
    assert KernelCache(planted / "c.db").get("k0").cubin == bytes(1500)   # ours in /tmp: fine
    assert victim.read_bytes() == before


def test_a_link_loop_on_the_way_is_refused_by_name(tmp_path):
    loop = private(tmp_path / "mine") / "loop"
    loop.symlink_to(loop)
    with pytest.raises(trust.UntrustedPathError, match="too many symbolic links"):
        KernelCache(loop / "c.db")


def test_a_journal_that_cannot_be_examined_is_refused_by_name(tmp_path):
    """A link loop planted as the cache's -journal is neither skipped (SQLite would meet
    it) nor a bare OSError: the refusal names it and says what to do."""
    mine = private(tmp_path / "mine")
    journal = mine / "c.db-journal"
    journal.symlink_to(journal)
    with pytest.raises(UnsafeCacheError, match=r"c\.db-journal cannot be examined.*remove it"):
        trust.check_cache_location(mine / "c.db")


def test_profiler_records_are_guarded_by_the_same_check(tmp_path, monkeypatch):
    from cutlass_sparse.plan import records

    db = filled(private(tmp_path / "c") / "c.db")
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(db))
    fake_owner(monkeypatch, db)
    signature = records.Signature("sm80", 16, 16, 16, "f16", "f16", "col", "identity", "GPU", "8.0")
    records._recorded.cache_clear()
    with pytest.raises(UnsafeCacheError):
        records.record_of(signature)
    with pytest.raises(UnsafeCacheError):
        records.recorded(signature)
    with pytest.raises(UnsafeCacheError):
        KernelCache(private(tmp_path / "d") / "d.db").merge_from(db)   # nor merged into ours


# -- 2. failed-compile sources -------------------------------------------------------------

def test_failed_source_never_follows_planted_links(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    old = Path(tempfile.gettempdir()) / "cutlass_sparse_failed"     # the old fixed place
    old.mkdir()
    (old / "broken.cu").symlink_to(victim)
    first = compiler.dump_source("int x;", "broken")
    failed = Path(tempfile.gettempdir()) / f"cutlass_sparse-{os.geteuid()}" / "failed"
    assert first == failed / "broken.cu" and first.read_text() == "int x;"
    first.unlink()
    first.symlink_to(victim)                 # a link at the new place is replaced, not followed
    again = compiler.dump_source("int y;", "broken")
    assert victim.read_text() == "precious"
    assert not again.is_symlink() and again.read_text() == "int y;"
    assert stat.S_IMODE(again.stat().st_mode) == 0o600
    assert stat.S_IMODE(failed.stat().st_mode) == stat.S_IMODE(failed.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("plant", ["symlink", "shared"])
def test_planted_per_user_directory_is_refused(tmp_path, plant):
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    attacker.chmod(0o777)
    mine = Path(tempfile.gettempdir()) / f"cutlass_sparse-{os.geteuid()}"
    if plant == "symlink":
        mine.symlink_to(attacker)
    else:
        mine.mkdir()
        mine.chmod(0o777)
    with pytest.warns(UserWarning, match=str(mine)):
        path = compiler.dump_source("int z;", "k")
    assert path.read_text() == "int z;" and not path.is_relative_to(mine)
    assert list(attacker.iterdir()) == [] and stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# -- 3. a damaged page, and the command line ---------------------------------------------

def damage(db: Path, where: str = "middle") -> None:
    # Page 3 (the key index) is caught when the file is opened; a data page in the middle
    # only when a query reaches it (on the code before issue 12: a DatabaseError every time).
    offset = 4096 * 2 if where == "page 3" else (db.stat().st_size // 8192) * 4096
    with open(db, "r+b") as handle:
        handle.seek(offset)
        handle.write(b"\xde\xad\xbe\xef" * 256)


@pytest.mark.parametrize("where", ["page 3", "middle"])
def test_corrupt_page_is_set_aside_once_and_a_fresh_cache_started(tmp_path, where):
    db = filled(private(tmp_path / "c") / "c.db", count=300, winner=False)
    damage(db, where)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = KernelCache(db)
        before = KernelCache(db)               # a second connection, opened before anyone noticed
        for i in range(300):
            cache.get(f"k{i}")
        cache.put("new", "n", "sm_80", b"x", {})
        assert cache.get("new").cubin == b"x"
        assert cache.rows()[-1][0] == "new" and cache.winners() == []
        before.put("other", "n", "sm_80", b"y", {})     # lands in the fresh cache
        assert cache.clear() == 2
        assert len(KernelCache(db).rows()) == 0
    damaged = [w for w in caught if "damaged" in str(w.message)]
    assert len(damaged) == 1, [str(w.message) for w in caught]
    assert str(db) in str(damaged[0].message)
    assert len(list(db.parent.glob("c.db.corrupt-*[0-9]"))) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert KernelCache(db).rows() == []


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", *args], capture_output=True,
                          text=True, cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_cache_clear_works_on_a_corrupt_file(tmp_path):
    db = filled(private(tmp_path / "c") / "c.db", count=300, winner=False)
    damage(db)
    result = cli("clear", "--path", str(db))
    assert result.returncode == 0, result.stderr
    assert "removed" in result.stdout and list(db.parent.glob("c.db.corrupt-*"))
    assert cli("verify", "--path", str(db)).returncode == 0


def test_command_line_missing_files_are_one_line_errors(tmp_path):
    work = private(tmp_path / "work")
    missing = tmp_path / "nope.db"
    for args in (["verify", "--path", str(missing)], ["ls", "--path", str(missing)],
                 ["merge", str(missing), "--path", str(work / "out.db")]):
        result = cli(*args, cwd=work)
        assert result.returncode == 2, (args, result)
        assert result.stderr.count("\n") == 1 and str(missing) in result.stderr and "Traceback" not in result.stderr
    assert not missing.exists() and not (work / "out.db").exists() and list(work.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="nope.db"):
        KernelCache(work / "lib.db").merge_from(missing)


def test_command_line_refusal_is_one_line(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "c.db").write_bytes(b"")
    result = cli("clear", "--path", str(shared / "c.db"))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "refusing" in result.stderr and result.stderr.count("\n") == 1, result.stderr


# -- 4. read-only caches -----------------------------------------------------------------

def read_as(uid: int, db: Path, key: str):
    """KernelCache(db).get(key) in a forked child running as uid; returns (cubin, warnings)."""
    def probe():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            entry = KernelCache(db).get(key)
        return {"cubin": None if entry is None else entry.cubin.hex(),
                "warnings": [str(w.message) for w in caught], "dir": sorted(os.listdir(db.parent))}
    return forked.in_child_as(uid, probe)


def test_read_only_file_in_read_only_directory_serves_kernels():
    # Honest permissions: as root, read as nobody (root writes through any mode bits).
    uid = 65534 if os.geteuid() == 0 else os.geteuid()
    top = Path(tempfile.mkdtemp(dir="/tmp" if os.geteuid() == 0 else None))
    try:
        top.chmod(0o755)
        db = filled(top / "ro" / "c.db")
        db.chmod(0o444)
        db.parent.chmod(0o555)
        report = read_as(uid, db, "k0")
        assert report["cubin"] == bytes(1500).hex(), report
        assert report["warnings"] == [] and report["dir"] == ["c.db"]    # no -wal or -shm needed
    finally:
        (top / "ro").chmod(0o755)
        shutil.rmtree(top)


def test_unwritable_cache_is_opened_immutable(tmp_path, monkeypatch):
    # immutable only for a file nobody rewrites in place: no write bit (a file its owner may
    # rewrite is opened plain read-only: tests/test_cache_adversarial_review.py, finding 1)
    db = filled(private(tmp_path / "ro") / "c.db")
    db.chmod(0o444)
    monkeypatch.setattr(cache_mod, "_writable", lambda path: False)
    cache = KernelCache(db)
    assert cache.read_only and cache.get("k0").cubin == bytes(1500)
    cache.put("new", "n", "sm_80", b"n", {})                  # compiled meanwhile: memory only
    assert cache._immutable and cache.get("new").cubin == b"n" and sorted(os.listdir(db.parent)) == ["c.db"]


# -- 5. an unwritable HOME ---------------------------------------------------------------

def test_unusable_home_falls_back_to_a_private_temporary_cache(tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("")
    home = tmp_path / "afile" / "home"       # cannot be created, even by root
    monkeypatch.delenv("CUTLASS_SPARSE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    with pytest.warns(UserWarning) as caught:
        path = env.cache_path()
    message = str(caught[0].message)
    assert len(caught) == 1 and str(home) in message and "CUTLASS_SPARSE_CACHE" in message
    assert path == Path(tempfile.gettempdir()) / f"cutlass_sparse-{os.geteuid()}" / "compiled_cache.db"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # once only
        cache = cache_mod.default_cache()
    cache.put("k", "n", "sm_80", b"x", {})
    assert cache.path == path and cache.get("k").cubin == b"x"


def test_read_only_xdg_cache_home_falls_back(tmp_path, monkeypatch):
    xdg = private(tmp_path / "xdg")
    monkeypatch.delenv("CUTLASS_SPARSE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.setattr(env, "_dir_writable", lambda path: Path(path) != xdg)
    with pytest.warns(UserWarning, match=str(xdg)):
        assert env.cache_path().parent.name == f"cutlass_sparse-{os.geteuid()}"
    env._cache_path.cache_clear()
    monkeypatch.setattr(env, "_dir_writable", lambda path: True)
    assert env.cache_path() == xdg / "cutlass_sparse" / "compiled_cache.db"


def test_unwritable_explicit_cache_names_path_and_variable(tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "afile" / "sub" / "c.db"))
    with pytest.raises(PermissionError) as info:
        KernelCache()
    assert str(tmp_path / "afile" / "sub") in str(info.value) and "CUTLASS_SPARSE_CACHE" in str(info.value)


def test_unwritable_home_in_a_fresh_process(tmp_path):
    (tmp_path / "afile").write_text("")
    environ = {k: v for k, v in os.environ.items() if k not in ("CUTLASS_SPARSE_CACHE", "XDG_CACHE_HOME")}
    environ.update(HOME=str(tmp_path / "afile" / "home"), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(ROOT))
    script = ("from cutlass_sparse.build.cache import default_cache; c = default_cache(); "
              "c.put('k', 'n', 'sm_80', b'x', {}); default_cache(); print(c.path)")
    result = subprocess.run([sys.executable, "-c", script], env=environ, capture_output=True, text=True,
                            cwd=private(tmp_path / "cwd"))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("CUTLASS_SPARSE_CACHE") == 1
    assert result.stdout.strip().startswith(str(tmp_path / "tmp")) and list((tmp_path / "cwd").iterdir()) == []


# -- session 37's second review ------------------------------------------------------------

def test_the_default_cache_under_a_umask_002_home_is_made_private_level_by_level(tmp_path, monkeypatch):
    """mkdir -p gave ~/.cache the umask's 0775, which the walk from / then refused on every
    call; each level we make is 0700 now."""
    home = private(tmp_path / "home")
    monkeypatch.delenv("CUTLASS_SPARSE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    old = os.umask(0o002)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cache = KernelCache()
    finally:
        os.umask(old)
    assert cache.path == home / ".cache" / "cutlass_sparse" / "compiled_cache.db"
    assert stat.S_IMODE(os.stat(home / ".cache").st_mode) == 0o700


def test_a_default_cache_behind_a_directory_others_may_write_falls_back_to_the_private_one(tmp_path, monkeypatch):
    home = private(tmp_path / "home")
    (home / ".cache").mkdir(mode=0o700)
    (home / ".cache").chmod(0o775)   # made by another tool under umask 002
    monkeypatch.delenv("CUTLASS_SPARSE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    with pytest.warns(UserWarning, match="writable by other users.*private temporary cache"):
        cache = KernelCache()
    assert cache.path == trust.user_temp_dir() / "compiled_cache.db"


def test_dot_dot_after_a_link_is_walked_as_the_kernel_walks_it(tmp_path):
    """a/l/.. is the parent of l's target, not a: a walk that collapsed it first skipped the
    world-writable directory the kernel really passes through."""
    shared = tmp_path / "shared"
    (shared / "sub" / "deep").mkdir(parents=True)
    shared.chmod(0o777)
    mine = private(tmp_path / "mine")
    (mine / "l").symlink_to(shared / "sub" / "deep")
    with pytest.raises(trust.UntrustedPathError, match=f"{shared} is writable by other users"):
        trust.check_cache_location(mine / "l" / ".." / "c.db")
