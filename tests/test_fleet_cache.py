"""A cache a fleet shares (issue 14, items 3 and 4): presets built by job arrays, merged
into one read-only file that serves with no compiles; shipped files searched after the
writable cache; foreign versions detected; with compiling forbidden, the best cached
kernel stands in. CPU only: NVRTC is replaced by a stand-in except in the one sm80 test."""
import dataclasses
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import warnings
from collections import OrderedDict
from pathlib import Path

import pytest

import forked

from cutlass_sparse import env
from cutlass_sparse.build import cache as cache_mod
from cutlass_sparse.build import cache_files, cache_ship, compiler, kernels, warmup
from cutlass_sparse.build.cache import KernelCache
from cutlass_sparse.cli import main as cli_main
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.describe.problem import Problem, x_layout
from cutlass_sparse.plan import plans, present, presets

ROOT = Path(__file__).resolve().parent.parent
SHARD_VARS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP",
              "JOB_COMPLETION_INDEX", "CUTLASS_SPARSE_SHARD_COUNT", "CUTLASS_SPARSE_NO_COMPILE",
              "CUTLASS_SPARSE_CACHE_READONLY")


@pytest.fixture(autouse=True)
def clean_state(monkeypatch, tmp_path):
    for name in SHARD_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "default.db"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(mode=0o700)
    monkeypatch.setattr(cache_mod, "_default", None)
    monkeypatch.setattr(plans, "_plans", OrderedDict())
    monkeypatch.setattr(present, "_said", present.threading.Event())
    # No GPU here to name in a profiler signature; no records either.
    monkeypatch.setattr(plans, "recorded_choice", lambda problem, config: None)


class _Matches:
    """Equal to anything (and within any range): the stand-in cubin's entry takes whatever
    the launcher passes."""

    def __eq__(self, other):
        return True

    def __ge__(self, other):
        return True

    def __lt__(self, other):
        return True

    def __ne__(self, other):
        return False


@pytest.fixture
def fake_nvrtc(monkeypatch):
    """NVRTC replaced by a stand-in whose cubin names its kernel; returns the names it compiled."""
    compiled = []

    def compile_to_cubin(source, name, options, headers=()):
        if env.compile_disabled():
            raise compiler.CompileError(name, "compilation disabled by CUTLASS_SPARSE_NO_COMPILE", options,
                                        Path("/dev/null"))
        compiled.append(name)
        return compiler.Compiled(f"cubin of {name}".encode(), "", 0.0)

    monkeypatch.setattr(compiler, "compile_to_cubin", compile_to_cubin)
    monkeypatch.setattr(kernels.cubin, "kernel_param_bytes", lambda data, symbol: _Matches())
    monkeypatch.setattr(kernels.cubin, "kernel_param_sizes", lambda data, symbol: _Matches())
    monkeypatch.setattr(kernels.cubin, "read_int32", lambda data, symbol: 128)
    monkeypatch.setattr(kernels.cubin_trim, "without_unused_variables", lambda data: data)   # no ELF to trim
    return compiled


def private(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def run_cli(*args) -> int:
    return cli_main.main(list(args))


# -- item 4: presets and job arrays ---------------------------------------------------------

def test_token_counts_stand_for_every_n():
    # The preset plans for 512 N (sm80) and 44 (sm90), not 8192: every kernel selection
    # picks for any N must be among those it picks for the representatives.
    def kernels_for(ns, family, arch, sm_count):
        found = set()
        for n in ns:
            for dtype in ("f16", "bf16"):
                for layout in ("row", "col"):
                    for m, k in ((4096, 4096), (14336, 4096), (4096, 14336)):
                        problem = Problem.contiguous(family, m, n, k, element=dtype, layout_b=layout, arch=arch,
                                                     sm_count=sm_count)
                        found.add(kernels.first_asked(lambda: plans.make(problem))[0])
        return found

    for family, arch, sm_count in (("sm80", "sm_80", 108), ("sm90", "sm_90", 132)):
        every = kernels_for(range(1, 385), family, arch, sm_count)
        assert kernels_for(presets.token_counts(384, family), family, arch, sm_count) == every
        assert len(every) > 4      # several tiles and alignments: the claim is not vacuous


def test_preset_lists_what_default_selection_picks():
    items = presets.items("llm-5120", ["sm_80", "sm_90a"])
    assert len(items) == len(set(items))
    names = {c.name for c, _ in items}
    assert {a for _, a in items} == {"sm_80", "sm_90a"}
    assert not any("compressor" in c.family for c, _ in items)   # cs.compress encodes in Python
    # no kernel for a call that cannot happen: x [K, 1] is always read as a column
    for arch in ("sm_80", "sm_90a"):
        assert not any(p.n == 1 and p.layout_b == "row" for p in presets.problems("llm-5120", arch, 132, n_max=64))
    for n in (1, 7, 16, 100, 4096, 8192):        # any N, not only the representatives
        for dtype in presets.DTYPES:
            for m, k in presets.projections(5120):
                for family, arch, gpu, sm_count in (("sm80", "sm_80", "sm_80", 108), ("sm90", "sm_90a", "sm_90", 132)):
                    for layout in ("col", "row"):   # cs.matmul's x either way; [K, 1] reads as a column
                        problem = Problem.contiguous(family, m, n, k, element=dtype, layout_b=x_layout(layout, k, n),
                                                     arch=gpu, sm_count=sm_count)
                        config, asked_arch = kernels.first_asked(lambda: plans.make(problem))
                        assert config.name in names and kernels.normalize_arch(asked_arch) == arch
                    if family == "sm90":   # cs.linear: D column-major where a row-major one would be staged
                        out = selection.linear_out_layout(n, 2)
                        linear = Problem.contiguous(family, m, n, k, element=dtype, layout_b="col", arch=gpu,
                                                    sm_count=sm_count, out_layout=out)
                        for asked in (linear, linear.with_bias()):
                            config = kernels.first_asked(lambda: plans.make(asked))[0]
                            assert config.name in names, (n, out, config.name)


@pytest.mark.parametrize("variables, expected", [
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, (3, 4)),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_ARRAY_TASK_MIN": "1"}, (0, 8)),
    ({"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
      "SLURM_ARRAY_TASK_STEP": "2"}, (3, 4)),
    ({"JOB_COMPLETION_INDEX": "5", "CUTLASS_SPARSE_SHARD_COUNT": "6"}, (5, 6)),
    ({}, None),
])
def test_shard_from_environment(monkeypatch, variables, expected):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    found = env.shard_from_environment()
    assert (found and found[:2]) == expected


@pytest.mark.parametrize("variables, message", [
    ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_COUNT": "4"}, "SLURM_ARRAY_TASK_ID='x' is not an integer"),
    ({"SLURM_ARRAY_TASK_ID": "9", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0"}, "not one of 4"),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "0"}, "SLURM_ARRAY_TASK_COUNT=0: must be >= 1"),
    ({"JOB_COMPLETION_INDEX": "3"}, "set CUTLASS_SPARSE_SHARD_COUNT"),
    ({"JOB_COMPLETION_INDEX": "3", "CUTLASS_SPARSE_SHARD_COUNT": "3"}, "not below CUTLASS_SPARSE_SHARD_COUNT=3"),
])
def test_bad_shard_environment_is_a_one_line_usage_error(tmp_path, variables, message):
    run_env = dict(os.environ, PYTHONPATH=str(ROOT), CUTLASS_SPARSE_CACHE=str(tmp_path / "w.db"), **variables)
    result = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "warmup", "--preset", "llm-4096"],
                            capture_output=True, text=True, env=run_env, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cutlass-sparse: error: shard from the environment: "), lines
    assert message in lines[0] and not (tmp_path / "w.db").exists()


@pytest.mark.parametrize("args, message", [
    (["--preset", "gpt"], "argument --preset: invalid choice: 'gpt'"),
    (["--sm-count", "100"], "argument --sm-count: only with --preset"),
    (["--preset", "llm", "--all-alignments"], "argument --preset: not with --all-alignments"),
    (["--preset", "llm", "--arch", "sm_86"], "no default SM count for sm_86"),
])
def test_preset_usage_errors(tmp_path, args, message):
    result = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "warmup", *args], capture_output=True,
                            text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.splitlines()) == 1, \
        result.stderr


def read_as_nobody(db: Path, items, problems) -> dict:
    """In a forked child, as nobody when we are root (root writes through any mode bits):
    with CUTLASS_SPARSE_CACHE=db and compiling forbidden, load every kernel and make every
    plan; report what came from the cache, what compiled, the warnings and db's directory."""
    def probe():
        os.environ.update(CUTLASS_SPARSE_CACHE=str(db), CUTLASS_SPARSE_NO_COMPILE="1")
        compiled = []
        real = compiler.compile_to_cubin
        compiler.compile_to_cubin = lambda source, name, *rest: compiled.append(name) or real(source, name, *rest)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cache = cache_mod.default_cache()
            served = [kernels.get(config, arch).from_cache for config, arch in items]
            planned = [plans.get(problem).info()["from_cache"] for problem in problems]
        return {"served": served, "planned": planned, "compiled": compiled,
                "immutable": cache._immutable, "read_only": cache.read_only,
                "warnings": [str(w.message) for w in caught], "dir": sorted(os.listdir(db.parent))}
    return forked.in_child_as(forked.honest_uid(), probe)


def test_read_only_merged_preset_cache_serves_every_kernel_with_no_compiles(tmp_path, monkeypatch, fake_nvrtc):
    # A two-task Slurm array builds its shares of the preset, a merge ships them as one
    # file (0444, in a read-only directory); a node loads every kernel and makes plans
    # from it with compiling forbidden: nothing compiles, nothing is written beside it.
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "0")
    shards = []
    for task in range(2):
        monkeypatch.setenv("SLURM_ARRAY_TASK_ID", str(task))
        shards.append(private(tmp_path / "shards") / f"shard{task}.db")
        assert run_cli("warmup", "--preset", "llm-4096", "--jobs", "1", "--cache", str(shards[-1])) == 0
    items = presets.items("llm-4096", ["sm_80", "sm_90a"])
    assert sorted(fake_nvrtc) == sorted(c.name for c, _ in items)          # each kernel compiled once
    top = Path(tempfile.mkdtemp(dir="/tmp" if os.geteuid() == 0 else None))
    try:
        top.chmod(0o755)
        fleet = private(top / "ro") / "fleet.db"
        assert run_cli("cache", "merge", "--ship", "--path", str(fleet), *map(str, shards)) == 0
        fleet.parent.chmod(0o555)
        assert fleet.stat().st_mode & 0o777 == 0o444
        sample = [p for arch in ("sm_80", "sm_90a") for p in presets.problems("llm-4096", arch, 132)[::97]]
        report = read_as_nobody(fleet, items, sample)
    finally:
        (top / "ro").chmod(0o755)
        shutil.rmtree(top)
    assert report["read_only"] and report["immutable"]
    assert report["compiled"] == [] and report["warnings"] == [], report["warnings"]
    assert len(report["served"]) == len(items) > 80 and all(report["served"])
    assert len(report["planned"]) > 50 and all(report["planned"])
    assert report["dir"] == ["fleet.db"]                                   # no -wal, -shm or -journal


def test_preset_shards_built_with_nvrtc_then_shipped(tmp_path):
    # The real thing for two sm80 kernels of the preset: a Slurm array of two, a merge, a run
    # with compiling forbidden that finds both cached.
    items = presets.items("llm-4096", ["sm_80"])
    tails = {}
    for config, _ in items:
        tails.setdefault(config.name.split("spgemm_", 1)[1].split("_", 1)[1], []).append(config.name)
    only = next(tail for tail, names in tails.items() if len(names) == 2)   # the f16 and the bf16 kernel
    shards = private(tmp_path / "shards")

    def warm(cache, **variables):
        run_env = dict(os.environ, PYTHONPATH=str(ROOT), CUTLASS_SPARSE_CACHE=str(cache), **variables)
        return subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "warmup", "--preset", "llm-4096",
                               "--arch", "sm_80", "--only", only, "--jobs", "1"],
                              capture_output=True, text=True, env=run_env, cwd=tmp_path)

    for task in (1, 2):     # --array=1-2: ids need not start at 0
        result = warm(shards / f"s{task}.db", SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_COUNT="2",
                      SLURM_ARRAY_TASK_MIN="1")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "summary: 1 compiled, 0 already cached, 0 failed" in result.stdout
        assert f"shard {task - 1}/2 (from SLURM_ARRAY_TASK_ID={task}" in result.stderr
    fleet = private(tmp_path / "fleet") / "fleet.db"
    merged = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "merge", "--ship", "--path",
                             str(fleet), str(shards / "s1.db"), str(shards / "s2.db")],
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert merged.returncode == 0, merged.stderr
    assert "2 kernels" in merged.stdout and "(this version)" in merged.stdout
    again = warm(f"{tmp_path / 'own.db'}{os.pathsep}{fleet}", CUTLASS_SPARSE_NO_COMPILE="1")
    assert "summary: 0 compiled, 2 already cached, 0 failed" in again.stdout, again.stdout + again.stderr
    assert len(KernelCache(tmp_path / "own.db").rows()) == 0          # served from the shipped file


# -- item 3: shipped caches, search order, foreign versions --------------------------------

def put(cache: KernelCache, key: str, cubin: bytes, toolchain: str | None = None) -> None:
    cache.put(key, f"kernel-{key}", "sm_80", cubin, {} if toolchain is None else {"toolchain": toolchain})


def test_search_path_from_the_environment(monkeypatch, tmp_path):
    sep = os.pathsep
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{tmp_path}/own.db{sep}{tmp_path}/a.db{sep}{sep}{tmp_path}/b.db")
    assert env.cache_search_path() == (tmp_path / "own.db", tmp_path / "a.db", tmp_path / "b.db")
    assert env.cache_path() == tmp_path / "own.db"
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{sep}{tmp_path}/a.db")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert env.cache_search_path() == (tmp_path / "xdg" / "cutlass_sparse" / "compiled_cache.db", tmp_path / "a.db")


def test_writable_cache_then_shipped_ones_in_order(monkeypatch, tmp_path):
    d = private(tmp_path / "c")
    first, second = KernelCache(d / "first.db"), KernelCache(d / "second.db")
    put(first, "both", b"from first")
    put(second, "both", b"from second")
    put(second, "only-second", b"second's")
    first.close()
    second.close()
    sep = os.pathsep
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{d}/own.db{sep}{d}/missing.db{sep}{d}/first.db{sep}{d}/second.db")
    with pytest.warns(UserWarning, match="missing.db .* does not exist; not searched"):
        cache = cache_mod.default_cache()
    assert cache_mod.default_cache() is cache                     # not reopened per call
    assert [c.read_only for c in cache.shipped] == [True, True]
    assert cache.get("both").cubin == b"from first" and cache.get("only-second").cubin == b"second's"
    put(cache, "both", b"own")                                    # the writable one is searched first
    assert cache.get("both").cubin == b"own"
    assert KernelCache(d / "second.db").rows()[0][0] == "both"    # shipped files untouched
    assert len(KernelCache(d / "first.db").rows()) == 1


def test_cache_of_another_version_is_detected_and_not_searched(monkeypatch, tmp_path):
    ours = env.toolchain_identity()
    theirs = ours.replace(f"cutlass_sparse {env.PACKAGE_VERSION}", "cutlass_sparse 0.0.9")
    theirs = "\n".join(line if not line.startswith("nvidia-cutlass") else "nvidia-cutlass 3.9.0"
                       for line in theirs.splitlines())
    d = private(tmp_path / "c")
    old = KernelCache(d / "old.db")
    put(old, "k", b"a binary another version built", theirs)   # even under a key we would ask for
    old.put_winner("sig", {"name": "old"}, [])
    old.close()
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{d}/own.db{os.pathsep}{d}/old.db")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cache = cache_mod.default_cache()
        assert cache.get("k") is None and cache.get("k") is None and cache.get_winner("sig") is None
    said = [str(w.message) for w in caught if "another version" in str(w.message)]
    assert len(said) == 1, said
    assert "cutlass_sparse 0.0.9" in said[0] and "nvidia-cutlass 3.9.0" in said[0] and str(d / "old.db") in said[0]
    stats = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "stats", "--path", str(d / "old.db")],
                           capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    built_by = f"built by: cutlass_sparse 0.0.9 / cache format {env.CACHE_FORMAT} / nvidia-cutlass 3.9.0"
    assert built_by in stats.stdout and "this version" not in stats.stdout
    # A file our version also wrote to is searched (every entry is still keyed by version).
    mixed = KernelCache(d / "mixed.db")
    put(mixed, "k", b"ours", ours)
    with pytest.warns(UserWarning, match="another version .*copied, but this version will not serve them"):
        mixed.merge_from(d / "old.db")
    mixed.close()
    assert KernelCache(d / "mixed.db", read_only=True).get("k").cubin == b"ours"


def test_ship_writes_one_read_only_file_and_loses_nothing(tmp_path, monkeypatch):
    d = private(tmp_path / "c")
    a, b = KernelCache(d / "a.db"), KernelCache(d / "b.db")
    put(a, "a", b"A", env.toolchain_identity())
    put(b, "b", b"B")
    a.put_winner("sig", {"name": "w"}, [])
    a.close()
    b.close()
    out = private(tmp_path / "out")
    junk = out / "junk.db"
    junk.write_bytes(b"not a database")
    with pytest.raises(cache_files.NotACacheError, match="is not a cutlass-sparse kernel cache"):
        cache_ship.ship(junk, [d / "a.db"])
    assert junk.read_bytes() == b"not a database"
    junk.unlink()
    victim = KernelCache(out / "victim.db")
    put(victim, "v", b"V")
    victim.close()
    before = (out / "victim.db").read_bytes()
    (out / "fleet.db").symlink_to(out / "victim.db")    # a link at the target: read, replaced, not written through
    cache_ship.ship(out / "fleet.db", [d / "a.db"])
    assert (out / "victim.db").read_bytes() == before and not (out / "fleet.db").is_symlink()
    cache_ship.ship(out / "fleet.db", [d / "b.db"])      # the target's own entries are kept
    fleet = out / "fleet.db"
    beside = lambda: [name for name in os.listdir(out) if name.startswith("fleet.db")]  # noqa: E731
    assert fleet.stat().st_mode & 0o777 == 0o444 and beside() == ["fleet.db"]
    with sqlite3.connect(f"{fleet.as_uri()}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    monkeypatch.setattr(cache_mod, "_writable", lambda path: path != fleet)  # as a non-root reader sees 0444
    shipped = KernelCache(fleet)
    assert shipped.read_only and shipped._immutable                    # writable directory, shipped file
    assert [shipped.get(key).cubin for key in "abv"] == [b"A", b"B", b"V"]
    assert shipped.get_winner("sig")[0] == {"name": "w"} and shipped.toolchains() == [env.toolchain_identity()]
    assert beside() == ["fleet.db"]                                   # no -journal, -wal or -shm


# -- item 3: compiling forbidden, the best kernel present ----------------------------------

def test_no_compile_serves_the_best_cached_kernel_and_says_so_once(tmp_path, monkeypatch, fake_nvrtc):
    from cutlass_sparse.describe import selection

    small = selection.config_for_shape(4096, 16, 4096, "f16", "f16", "row", 108)
    chosen = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 108)
    assert small != chosen
    kernels.get(small, "sm_80")                       # the only f16 kernel in the cache
    monkeypatch.setattr(kernels, "_memo", {})          # a fresh process from here on
    monkeypatch.setenv("CUTLASS_SPARSE_NO_COMPILE", "1")

    def problem(n, element="f16"):
        return Problem.contiguous("sm80", 4096, n, 4096, element=element, arch="sm_80", sm_count=108)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = plans.get(problem(4096)).info()
        second = plans.get(problem(2048)).info()
    assert first["config"] == second["config"] == small.name and first["from_cache"]
    said = [str(w.message) for w in caught if "CUTLASS_SPARSE_NO_COMPILE" in str(w.message)]
    assert len(said) == 1 and chosen.name in said[0] and small.name in said[0], said
    with pytest.raises(compiler.CompileError):        # nothing cached for bf16: the usual error
        plans.get(problem(4096, "bf16"))
    with pytest.raises(compiler.CompileError):        # a kernel the caller names is never replaced
        plans.get(problem(4096), chosen)
    assert fake_nvrtc == [small.name]


def test_without_no_compile_a_missing_kernel_compiles(tmp_path, fake_nvrtc):
    from cutlass_sparse.describe import selection

    kernels.get(selection.config_for_shape(4096, 16, 4096, "f16", "f16", "row", 108), "sm_80")
    info = plans.get(Problem.contiguous("sm80", 4096, 4096, 4096, arch="sm_80", sm_count=108)).info()
    assert info["config"] == selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 108).name
    assert len(fake_nvrtc) == 2


def test_warmup_shards_of_a_preset_cover_it_once():
    items = presets.items("llm-8192", ["sm_90a"])
    parts = [warmup.shard(items, i, 3) for i in range(3)]
    assert sorted(c.name for part in parts for c, _ in part) == sorted(c.name for c, _ in items)


def test_a_serving_node_finds_its_fleets_profiler_records(monkeypatch, tmp_path):
    """A profiler record in a shipped file after the writable one, and one kept in memory by
    a read-only cache, are both found by records.recorded (which lists signatures once per
    file through winners(), not only the first file's)."""
    from cutlass_sparse.plan import records

    d = private(tmp_path / "c")
    fleet_sig = records.Signature("sm90", 4096, 512, 4096, "f16", "f16", "row", "identity", "H100", "9.0")
    mine_sig = dataclasses.replace(fleet_sig, n=768)
    choice = records.Choice("sm90", catalog.load("sm90").tiles[1])
    fleet = KernelCache(d / "fleet.db")
    fleet.put_winner(fleet_sig.key(), choice.to_json(), [])
    fleet.close()
    os.chmod(d / "fleet.db", 0o444)
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{d}/own.db{os.pathsep}{d}/fleet.db")
    records._recorded.cache_clear()
    records._signatures.cache_clear()
    assert records.recorded(fleet_sig) == choice
    assert records.recorded(mine_sig) is None
    monkeypatch.setattr(cache_mod, "_default", None)
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{d}/fleet.db")   # the 0444 file alone: read-only
    records._signatures.cache_clear()
    records._recorded.cache_clear()
    records.put_record(mine_sig, choice, [])            # kept in memory: the file cannot take it
    assert records.recorded(mine_sig) == choice and records.recorded(fleet_sig) == choice
    records._signatures.cache_clear()
    records._recorded.cache_clear()


def test_a_stand_in_keeps_to_the_wave_bound_of_its_tile():
    # 128x128x128 c1x2 is for up to three waves of its tiles (catalog max_waves): a stand-in
    # ranks it after the tiles the catalog offers where the problem has more
    fam = catalog.load("sm90")
    square = next(t for t in fam.tiles if t[0] == (128, 128, 128) and t[3] == (1, 2, 1))
    config = fam.config(square, "f16", "f16", "row", 8, 8, reads_c=False)
    wanted = fam.config(fam.tiles[0], "f16", "f16", "row", 8, 8, reads_c=False)
    assert present._rank(config, wanted, Problem.contiguous("sm90", 5120, 2048, 4096))[0] is True
    assert present._rank(config, wanted, Problem.contiguous("sm90", 1024, 2048, 4096))[0] is False
    assert present._rank(config, wanted, Problem.contiguous("sm90", 5120, 2048, 4096, sm_count=264))[0] is False


def test_a_stand_in_keeps_to_the_catalog_bounds_of_its_tile():
    # With compiling forbidden, a cached tile the catalog keeps to other problems (min_n /
    # max_n, min_m / min_k) ranks after every tile the catalog offers for this one.
    fam = catalog.load("sm90")
    tall = next(t for t, _ in fam.mk_bounds)
    wide = fam.tiles[0]
    as_config = {t: fam.config(t, "f16", "f16", "row", 8, 8, reads_c=False) for t in (tall, wide)}
    large = Problem.contiguous("sm90", 16384, 16384, 24576)
    small = Problem.contiguous("sm90", 8192, 8192, 8192)
    wanted = as_config[wide]
    assert present._rank(as_config[tall], wanted, large)[0] is False
    for m, n, k in ((16384, 4096, 32768), (4096, 16384, 32768), (16384, 16384, 8192)):   # N, M, K below its bounds
        assert present._rank(as_config[tall], wanted, Problem.contiguous("sm90", m, n, k))[0] is True, (m, n, k)
    assert present._rank(as_config[wide], wanted, small)[0] is False
    ranked = sorted(as_config.values(), key=lambda c: present._rank(c, wanted, small))
    assert ranked[0] == as_config[wide]


def test_a_stand_in_runs_at_the_problems_own_swizzle_and_raster(monkeypatch):
    # A cached kernel's configuration carries the swizzle and raster order of the call it was
    # compiled for; as a stand-in it takes the ones selection gives this problem.
    from cutlass_sparse.launch.sm90_choice import run_order

    problem = Problem.contiguous("sm90", 8448, 16384, 4096)   # selection: swizzle 1, along M
    wanted = selection.config_for_shape(8448, 16384, 4096, "f16", "f16", "row", 132, "sm90")
    cached = dataclasses.replace(wanted, swizzle=8, raster=2)
    monkeypatch.setattr(kernels, "present", lambda arch: [cached])
    monkeypatch.setattr(kernels, "cached", lambda config, arch: True)
    monkeypatch.setattr(kernels, "first_asked", lambda make: (make() or wanted, "sm_90a"))
    made = []

    def make(p, config=None):
        made.append(config)
        return None

    monkeypatch.setattr(present, "_said", threading.Event())   # its own "said once"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        present.substitute(problem, make, compiler.CompileError("missing", "", [], ""))
    taken = made[-1]
    assert taken.as_compiled() == cached.as_compiled()
    assert (taken.swizzle, taken.raster) == (run_order(problem, cached).swizzle, selection.ALONG_M)


def _import_in(home: Path, tmp: Path, code: str, **extra) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("CUPY_CACHE_DIR", "XDG_CACHE_HOME")}
    environ.update(HOME=str(home), TMPDIR=str(tmp), PYTHONPATH=str(ROOT), **extra)
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120)


def test_a_home_where_cupy_cannot_make_its_kernel_cache_still_imports(tmp_path):
    """A serving container's read-only HOME: CuPy fails at import making ~/.cupy/kernel_cache,
    and we import CuPy even for torch callers. cutlass_sparse gives it a private directory."""
    home, tmp = tmp_path / "home", tmp_path / "temp"
    home.mkdir()
    tmp.mkdir()
    (home / ".cupy").write_text("")   # a file where CuPy's directory goes: root cannot make it either
    report = "import os, cupy.cuda.compiler as c; print(os.environ.get('CUPY_CACHE_DIR'), c._kernel_cache_backend._cache_dir)"
    bare = _import_in(home, tmp, report)
    assert bare.returncode != 0 and ".cupy" in bare.stderr   # what happens without us
    ours = _import_in(home, tmp, "import cutlass_sparse; " + report)
    assert ours.returncode == 0, ours.stderr
    private = tmp / f"cutlass_sparse-{os.geteuid()}" / "cupy"
    assert ours.stdout.split() == [str(private), str(private)]
    assert "CuPy cannot create its kernel cache" in ours.stderr and "CUPY_CACHE_DIR" in ours.stderr
    assert oct(os.stat(private.parent).st_mode & 0o777) == "0o700"


def test_cupy_keeps_its_own_cache_where_it_can_or_where_it_was_told(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "temp"
    home.mkdir()
    tmp.mkdir()
    report = "import cutlass_sparse, os; print(os.environ.get('CUPY_CACHE_DIR'))"
    assert _import_in(home, tmp, report).stdout.split() == ["None"]   # a writable HOME: CuPy's default
    (home / ".cupy").write_text("")
    chosen = _import_in(home, tmp, report, CUPY_CACHE_DIR=str(tmp_path / "mine"))
    assert chosen.stdout.split() == [str(tmp_path / "mine")] and "UserWarning" not in chosen.stderr


def test_an_entry_that_describes_another_kernel_is_not_served(tmp_path, fake_nvrtc, monkeypatch):
    """Session 37's review: another kernel's cubin and meta stored under a kernel's key and
    name (checksum recomputed) were served. The lookup now compares the stored description."""
    from cutlass_sparse.describe import selection

    monkeypatch.setattr(kernels, "_memo", {})
    small = selection.config_for_shape(64, 64, 64, "f16", "f16", "row", 108)
    large = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 108)
    assert small.name != large.name
    for config in (small, large):
        kernels.get(config, "sm_80")
    db = Path(os.environ["CUTLASS_SPARSE_CACHE"])
    with sqlite3.connect(db) as conn:   # what a hand-edited file (or a broken merge) could hold
        cubin, meta, checksum = conn.execute("SELECT cubin, meta, checksum FROM kernels WHERE name = ?",
                                             (large.name,)).fetchone()
        conn.execute("UPDATE kernels SET cubin = ?, meta = ?, checksum = ? WHERE name = ?",
                     (cubin, meta, checksum, small.name))
    monkeypatch.setattr(kernels, "_memo", {})
    monkeypatch.setattr(cache_mod, "_default", None)
    with pytest.warns(UserWarning, match=f"filed under {small.name} for sm_80 but .* describes {large.name}"):
        got = kernels.get(small, "sm_80")
    assert got.cubin == f"cubin of {small.name}".encode() and not got.from_cache   # compiled again
    assert fake_nvrtc == [small.name, large.name, small.name]


def test_a_shipped_file_that_is_not_a_cache_is_skipped_with_a_warning(monkeypatch, tmp_path):
    """A failed download in the search path: nothing to serve and nothing to protect, so the
    node runs on (session 37's second review: it made every call fail)."""
    d = private(tmp_path / "c")
    (d / "fleet.db").write_text("<html>404</html>")
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", f"{d}/own.db{os.pathsep}{d}/fleet.db")
    with pytest.warns(UserWarning, match="fleet.db .* is not searched: .*not a cutlass-sparse kernel cache"):
        cache = cache_mod.default_cache()
    assert cache.shipped == () and (d / "fleet.db").read_text() == "<html>404</html>"


def test_merge_into_the_default_cache_of_a_fresh_machine(monkeypatch, tmp_path, capsys):
    """`cache merge SHARDS...` without --path makes the default cache's directory, as before."""
    shard = private(tmp_path / "s") / "shard.db"
    put(KernelCache(shard), "k", b"K")
    home = private(tmp_path / "home")
    monkeypatch.delenv("CUTLASS_SPARSE_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    env._cache_path.cache_clear()
    try:
        assert run_cli("cache", "merge", str(shard)) == 0
    finally:
        env._cache_path.cache_clear()
    assert KernelCache(home / ".cache" / "cutlass_sparse" / "compiled_cache.db").get("k").cubin == b"K"


def test_an_import_without_any_private_temporary_directory_still_imports(tmp_path):
    """Where CuPy cannot make its cache and our private temporary directory is refused (a link
    planted in its place), import cutlass_sparse warns and leaves CuPy as it is: no exception."""
    home = private(tmp_path / "home")
    (home / ".cupy").write_text("")
    temp = private(tmp_path / "temp")
    (temp / f"cutlass_sparse-{os.geteuid()}").symlink_to(private(tmp_path / "elsewhere"))
    done = _import_in(home, temp, "import cutlass_sparse, os; print(os.environ.get('CUPY_CACHE_DIR'))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None"] and "no private temporary directory" in done.stderr
