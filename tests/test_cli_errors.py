"""The command line as a careless or hostile user meets it (CPU only): every bad command line
is one line on stderr naming the argument and the rule, exit status 2, no traceback, and
nothing written anywhere (the working directory, HOME and the cache directory stay empty);
--help shows our options; --version; compile-only runs compile what the GPU run needs."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cutlass_sparse import reference

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = {"run": "run_gemm.py", "warmup": "warmup_cache.py", "bench": "bench.py"}
RUN = ["run", "--m", "64", "--n", "64", "--k", "64"]
LONG_NAME = "{cache_dir}/" + "x" * 300 + ".db"   # stat() fails (ENAMETOOLONG) even for root

# (id, command line, what the one error line must mention)
BAD = [
    ("m-zero", ["run", "--m", "0", "--n", "64", "--k", "64"], "--m"),
    ("m-negative", ["run", "--m", "-5", "--n", "64", "--k", "64"], "--m"),
    ("m-word", ["run", "--m", "abc", "--n", "64", "--k", "64"], "--m"),
    ("m-float", ["run", "--m", "1.5", "--n", "64", "--k", "64"], "--m"),
    ("m-missing", ["run", "--n", "64", "--k", "64"], "--m"),
    ("n-zero", ["run", "--m", "64", "--n", "0", "--k", "64"], "--n"),
    ("k-zero", ["run", "--m", "64", "--n", "64", "--k", "0"], "--k"),
    ("arch-word", [*RUN, "--arch", "foo"], "--arch"),
    ("arch-sm75", [*RUN, "--arch", "sm_75"], "sparse tensor cores"),
    ("arch-sm90-family-sm90", [*RUN, "--arch", "sm_90"], "sm_90a"),
    ("arch-sm90-explicit-family", [*RUN, "--family", "sm90", "--arch", "sm_90"], "sm_90a"),
    ("arch-sm80-for-sm90", [*RUN, "--family", "sm90", "--arch", "sm_80"], "sm_90a"),
    ("arch-sm90a-for-sm80", [*RUN, "--family", "sm80", "--arch", "sm_90a"], "--arch"),
    ("arch-suffix", [*RUN, "--arch", "sm_100a"], "--arch"),
    ("arch-unknown-to-nvrtc", [*RUN, "--arch", "sm_81"], "--arch"),
    ("activation", [*RUN, "--activation", "nope"], "--activation"),
    ("split-k-zero", [*RUN, "--split-k", "0"], "--split-k"),
    ("split-k-negative", [*RUN, "--split-k", "-2"], "--split-k"),
    ("split-k-mode", [*RUN, "--split-k-mode", "tree"], "--split-k-mode"),
    ("parallel-on-sm90", [*RUN, "--family", "sm90", "--split-k", "2", "--split-k-mode", "parallel"], "--split-k-mode"),
    ("split-k-over-k-tiles", [*RUN, "--split-k", "1000"], "split_k=1000"),
    ("dtype", [*RUN, "--dtype", "nope"], "--dtype"),
    ("out-dtype", [*RUN, "--out-dtype", "f64"], "--out-dtype"),
    ("layout-b", [*RUN, "--layout-b", "diagonal"], "--layout-b"),
    ("family", [*RUN, "--family", "sm70"], "--family"),
    ("config", [*RUN, "--config", "nope", "--emit-only"], "--config"),
    ("emit-path-alone", [*RUN, "--emit-path", "x.cu"], "--emit-path"),
    ("sm-count", [*RUN, "--sm-count", "0"], "--sm-count"),
    ("repeats", [*RUN, "--repeats", "0"], "--repeats"),
    ("run-unknown-option", [*RUN, "--bogus"], "--bogus"),
    ("shard-word", ["warmup", "--shard", "abc"], "--shard"),
    ("shard-past-end", ["warmup", "--shard", "3/2"], "--shard"),
    ("shard-of-zero", ["warmup", "--shard", "0/0"], "--shard"),
    ("shard-negative", ["warmup", "--shard", "-1/2"], "--shard"),
    ("warmup-arch-word", ["warmup", "--arch", "foo"], "--arch"),
    ("warmup-arch-sm75", ["warmup", "--arch", "sm_80,sm_75"], "sparse tensor cores"),
    ("warmup-arch-empty-item", ["warmup", "--arch", "sm_80,,sm_90a"], "--arch"),
    ("jobs-zero", ["warmup", "--jobs", "0"], "--jobs"),
    ("no-catalog-alone", ["warmup", "--no-catalog"], "--no-catalog"),
    ("tune-missing-file", ["warmup", "--tune", "missing-shapes.txt"], "--tune"),
    ("cache-action", ["cache", "frob"], "frob"),
    ("merge-missing-input", ["cache", "merge", "missing.db", "--path", "{cache_dir}/out.db"], "missing.db"),
    ("merge-no-input", ["cache", "merge"], "SOURCE"),
    ("cache-no-action", ["cache"], "ACTION"),
    ("verify-missing-file", ["cache", "verify", "--path", "{cache_dir}/absent.db"], "--path"),
    ("ls-missing-file", ["cache", "ls", "--path", "{cache_dir}/absent.db"], "--path"),
    ("clear-missing-file", ["cache", "clear", "--path", "{cache_dir}/absent.db"], "--path"),
    ("bench-shape-zero", ["bench", "--shapes", "4096x0x4096"], "--shapes"),
    ("bench-shape-form", ["bench", "--shapes", "4096x4096"], "--shapes"),
    ("bench-dtypes", ["bench", "--dtypes", "f16,nope"], "--dtypes"),
    ("bench-family", ["bench", "--family", "sm70"], "--family"),
    ("unknown-command", ["frob"], "frob"),
    ("no-command", [], "COMMAND"),
    # A path that cannot be examined (here a name too long; for a user, a directory they may not read)
    ("path-unexaminable", ["cache", "ls", "--path", LONG_NAME], "--path: cannot examine"),
    ("source-unexaminable", ["cache", "merge", "--path", "{cache_dir}/out.db", LONG_NAME], "SOURCE: cannot examine"),
    ("tune-unexaminable", ["warmup", "--tune", LONG_NAME], "--tune: cannot examine"),
    ("warmup-cache-directory", ["warmup", "--cache", "{cache_dir}"], "--cache: '{cache_dir}' is a directory"),
    ("warmup-cache-empty", ["warmup", "--cache", ""], "--cache: '' is empty"),
    ("warmup-cache-unexaminable", ["warmup", "--cache", LONG_NAME], "--cache: cannot examine"),
    ("emit-path-no-directory", [*RUN, "--emit-only", "--emit-path", "{cache_dir}/missing/x.cu"], "--emit-path"),
    ("emit-path-directory", [*RUN, "--emit-only", "--emit-path", "{cache_dir}"], "--emit-path: '{cache_dir}' is a"),
    ("emit-path-empty", [*RUN, "--emit-only", "--emit-path", ""], "--emit-path: '' is empty"),
    ("seed-negative", [*RUN, "--seed", "-1"], "--seed: must be an integer >= 0"),
    ("m-over-int", ["run", "--m", "2147483648", "--n", "64", "--k", "64"], "--m: must be <= 2147483647"),
    ("m-huge", ["run", "--m", "99999999999999999999999", "--n", "64", "--k", "64"], "--m: must be <= 2147483647"),
    ("k-over-int", ["run", "--m", "64", "--n", "64", "--k", "4294967296"], "--k: must be <= 2147483647"),
    ("m-arabic-indic-digit", ["run", "--m", "\u0663", "--n", "64", "--k", "64"], "--m: expected an integer"),
    ("bench-shape-over-int", ["bench", "--shapes", "4096x2147483648x4096"], "--shapes"),
    ("quiet-and-verbose", ["-q", *RUN, "-v"], "-q/--quiet: not allowed with argument -v/--verbose"),
    ("emit-only-profile", [*RUN, "--emit-only", "--profile"], "--profile: not with --emit-only"),
    ("warmup-only-matches-nothing", ["warmup", "--only", "ZZZ"], "--only: 'ZZZ' matches no kernel"),
    ("warmup-preset-only-matches-nothing", ["warmup", "--arch", "sm_90", "--preset", "llm", "--only", "ZZZ"],
     "--only: 'ZZZ' matches no kernel"),
]


@pytest.fixture
def places(tmp_path):
    """An empty working directory, HOME and cache directory, and the environment naming them."""
    dirs = {name: tmp_path / name for name in ("cwd", "home", "cache_dir", "tmp")}
    for path in dirs.values():
        path.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "CUTLASS_SPARSE_CACHE_READONLY",
                                                             "CUTLASS_SPARSE_NO_COMPILE")}
    env.update(HOME=str(dirs["home"]), TMPDIR=str(dirs["tmp"]), PYTHONPATH=str(ROOT),
               CUTLASS_SPARSE_CACHE=str(dirs["cache_dir"] / "cache.db"))
    dirs["env"] = env
    return dirs


def cli(places, args, script=None, **env):
    args = [a.format(cache_dir=places["cache_dir"]) for a in args]
    command = [sys.executable, str(ROOT / "scripts" / script)] if script else \
        [sys.executable, "-m", "cutlass_sparse.cli.main"]
    return subprocess.run([*command, *args], cwd=places["cwd"], env=dict(places["env"], **env),
                          capture_output=True, text=True, timeout=300)


def assert_usage_error(result, mention, places=None, prog="cutlass-sparse"):
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1, result.stderr
    mention = mention if places is None else mention.format(cache_dir=places["cache_dir"])
    assert lines[0].startswith(f"{prog}: error: ") and mention in lines[0], lines[0]


def written(path: Path) -> list[Path]:
    # Importing CuPy (to ask whether a GPU is visible) makes an empty ~/.cupy/kernel_cache: CuPy's own.
    return [p for p in path.rglob("*") if p.is_file() or p.is_symlink()] + \
        [p for p in path.iterdir() if p.name != ".cupy" and p.is_dir()]


def assert_nothing_written(places):
    for name in ("cwd", "home", "cache_dir"):
        assert not written(places[name]), f"{name}: {written(places[name])}"


@pytest.mark.parametrize("args, mention", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_command_line_is_one_clear_line(places, args, mention):
    assert_usage_error(cli(places, args), mention, places)
    assert_nothing_written(places)


def test_fuzz_counts_at_least_thirty_distinct_bad_command_lines():
    assert len({tuple(args) for _, args, _ in BAD}) == len(BAD) >= 30


# Through the scripts/ wrappers (they hand their arguments to the same parser).
SCRIPT_BAD = [
    ("run", ["--m", "0", "--n", "64", "--k", "64"], "--m"),
    ("run", ["--m", "64", "--n", "64", "--k", "64", "--arch", "sm_90"], "sm_90a"),
    ("run", ["--m", "64", "--n", "64", "--k", "64", "--activation", "nope"], "--activation"),
    ("warmup", ["--shard", "abc"], "--shard"),
    ("warmup", ["--arch", "foo"], "--arch"),
    ("warmup", ["merge", "{cache_dir}/out.db", "missing.db"], "missing.db"),
    ("bench", ["--shapes", "0x1x1"], "--shapes"),
]


@pytest.mark.parametrize("command, args, mention", SCRIPT_BAD, ids=[f"{c}-{m}" for c, _, m in SCRIPT_BAD])
def test_script_wrappers_give_the_same_errors(places, command, args, mention):
    assert_usage_error(cli(places, args, script=SCRIPTS[command]), mention)
    assert_nothing_written(places)


OURS = {"run": "--split-k-mode", "warmup": "--shard", "bench": "--dtypes", "cache": "--path"}


@pytest.mark.parametrize("command", sorted(OURS))
@pytest.mark.parametrize("via", ["module", "script"])
def test_help_shows_our_options_not_cutlass_librarys(places, command, via):
    if via == "script" and command not in SCRIPTS:
        pytest.skip("no script for this command")
    result = cli(places, ["--help"], script=SCRIPTS[command]) if via == "script" else \
        cli(places, [command, "--help"])
    assert result.returncode == 0, result.stderr
    assert OURS[command] in result.stdout and "--disable-cutlass-package-imports" not in result.stdout
    assert_nothing_written(places)


def test_top_level_help_and_version(places):
    result = cli(places, ["--help"])
    assert result.returncode == 0 and all(c in result.stdout for c in OURS)
    version = cli(places, ["--version"])
    from cutlass_sparse import __version__
    assert version.returncode == 0 and version.stdout.strip() == f"cutlass-sparse {__version__}"


def test_cache_verify_of_a_missing_file_creates_nothing(places):
    target = places["cache_dir"] / "absent.db"
    assert_usage_error(cli(places, ["cache", "verify", "--path", str(target)]), "--path")
    assert not target.exists() and not list(places["cache_dir"].iterdir())


def test_cache_command_through_the_cli_package_has_no_runtime_warning(places):
    result = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "stats"], cwd=places["cwd"],
                            env=places["env"], capture_output=True, text=True)
    assert result.returncode == 0 and "RuntimeWarning" not in result.stderr, result.stderr


def test_python_m_cli_cache_has_no_runtime_warning(places):
    result = subprocess.run([sys.executable, "-m", "cutlass_sparse.cli", "cache", "stats"], cwd=places["cwd"],
                            env=places["env"], capture_output=True, text=True)
    assert "RuntimeWarning" not in result.stderr, result.stderr


def test_installed_entry_point_help(places):
    code = "import sys; from cutlass_sparse.cli.main import main; sys.exit(main())"
    result = subprocess.run([sys.executable, "-c", code, "--help"], cwd=places["cwd"], env=places["env"],
                            capture_output=True, text=True)
    assert result.returncode == 0 and "--disable-cutlass-package-imports" not in result.stdout


@pytest.mark.skipif(reference.gpu_available(), reason="exercises the no-GPU path")
def test_gpu_only_commands_fail_in_one_line_without_a_gpu(places):
    for args in (["bench"], [*RUN, "--profile"]):
        result = cli(places, args)
        lines = result.stderr.splitlines()
        assert result.returncode == 1 and len(lines) == 1 and "GPU" in lines[0], result.stderr
        assert "Traceback" not in result.stderr
    assert not list(places["cwd"].iterdir())


@pytest.mark.skipif(reference.gpu_available(), reason="exercises the no-GPU path")
def test_compile_failure_is_one_line_and_the_log_is_under_verbose(places):
    args = ["run", "--m", "64", "--n", "64", "--k", "64"]
    quiet = cli(places, args, CUTLASS_SPARSE_NO_COMPILE="1")
    lines = quiet.stderr.splitlines()
    assert quiet.returncode == 1 and len(lines) == 1 and "Traceback" not in quiet.stderr, quiet.stderr
    # NVRTC never ran: the line says compiling is forbidden and which kernel the cache lacks
    assert lines[0].startswith("cutlass-sparse: compilation disabled by CUTLASS_SPARSE_NO_COMPILE and the kernel "
                               "cache") and " lacks cutlass_tensorop_" in lines[0] and "--verbose" in lines[0]
    assert "NVRTC failed" not in quiet.stderr
    verbose = cli(places, [*args, "--verbose"], CUTLASS_SPARSE_NO_COMPILE="1")
    assert verbose.returncode == 1 and "compilation disabled by CUTLASS_SPARSE_NO_COMPILE" in verbose.stderr
    assert "Traceback" in verbose.stderr
    assert not list(places["cwd"].iterdir())


@pytest.mark.skipif(reference.gpu_available(), reason="exercises the no-GPU path")
def test_compile_only_parallel_split_k_compiles_the_reduction_too(places):
    args = ["run", "--m", "256", "--n", "64", "--k", "512", "--split-k", "2", "--split-k-mode", "parallel",
            "--activation", "relu"]
    first = cli(places, args)
    assert first.returncode == 0, first.stderr
    kernels = [line for line in first.stdout.splitlines() if line.startswith("kernel ")]
    assert len(kernels) == 2 and all("compiled in" in line for line in kernels), first.stdout
    assert "cutlass_sparse_reduce_splitk_f32_f16_align8_relu" in kernels[1]
    assert "split-K       2 parallel, activation relu" in first.stdout
    second = cli(places, args, script=None)
    assert [line.split()[1] for line in second.stdout.splitlines() if line.startswith("kernel ")] == ["cache"] * 2
    assert not list(places["cwd"].iterdir()) and not written(places["home"])
    listed = cli(places, ["cache", "ls"])
    assert "cutlass_sparse_reduce_splitk_f32_f16_align8_relu" in listed.stdout


@pytest.mark.skipif(reference.gpu_available(), reason="exercises the no-GPU path")
def test_compile_only_activation_reaches_the_gemm(places):
    plain = cli(places, ["run", "--m", "128", "--n", "64", "--k", "128"])
    relu = cli(places, ["run", "--m", "128", "--n", "64", "--k", "128", "--activation", "relu", "--split-k", "2"])
    assert plain.returncode == 0 and relu.returncode == 0, relu.stderr
    assert "compiled in" in relu.stdout   # a different kernel from the identity one: not a cache hit
    listed = cli(places, ["cache", "ls"]).stdout.splitlines()
    assert len(listed) == 2, listed


def test_bad_command_lines_lose_no_cache_entry(places):
    """The whole fuzz again, against a cache holding entries and a profiler record: every
    line is still one clear error, and afterwards every entry is there, checksum intact."""
    from cutlass_sparse.build.cache import KernelCache

    db = places["cache_dir"] / "cache.db"
    cache = KernelCache(db)
    for i in range(5):
        cache.put(f"key{i}", f"kernel{i}", "sm_90a", bytes([i]) * 1000, {"constants": {}, "compile_seconds": 0.0})
    cache.put_winner("signature", {"name": "tile"}, [])
    before = sorted(cache.keys())
    cache.close()
    for _, args, mention in BAD:
        assert_usage_error(cli(places, args), mention, places)
    after = KernelCache(db)
    assert sorted(after.keys()) == before and after.verify() == [] and len(after.winners()) == 1
    assert not list(places["cwd"].iterdir())


def test_slurm_step_of_zero_is_a_usage_error(places):
    """env.shard_from_environment would read a step of 0 as 1 (shard 1/4 of ids 0, 1, 2, 3).
    Compiling forbidden: were the step let through, the warm-up fails fast instead of compiling."""
    result = cli(places, ["warmup", "--arch", "sm_80"], SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_TASK_COUNT="4",
                 SLURM_ARRAY_TASK_STEP="0", CUTLASS_SPARSE_NO_COMPILE="1")
    assert_usage_error(result, "SLURM_ARRAY_TASK_STEP=0: must be >= 1")
    assert_nothing_written(places)


@pytest.mark.skipif(reference.gpu_available(), reason="exercises the no-GPU path")
def test_plan_refusal_comes_before_the_compile_only_banner(places):
    result = cli(places, [*RUN, "--split-k", "1000"])
    assert_usage_error(result, "split_k=1000")
    assert result.stdout == ""   # no "no GPU found: compiling only" line before the error
    assert_nothing_written(places)


# Developer scripts with their own options: the package's parser, so one line too.
OWN_PARSER_SCRIPTS = [("compile_profile.py", ["default", "--bogus"]), ("host_overhead.py", ["--bogus"]),
                      ("bench_eager.py", ["--bogus"]), ("host_overhead.py", ["--calls", "0"])]


@pytest.mark.parametrize("script, args", OWN_PARSER_SCRIPTS, ids=[f"{s}-{a[-1]}" for s, a in OWN_PARSER_SCRIPTS])
def test_scripts_with_their_own_options_give_one_line(places, script, args):
    result = cli(places, args, script=script)
    assert_usage_error(result, "--calls" if "--calls" in args else "unrecognized arguments: --bogus", prog=script)
    assert result.stdout == ""


@pytest.mark.parametrize("args, option", [(["cache", "ls", "--path", "/locked/x.db"], "--path"),
                                          (["warmup", "--tune", "/locked/shapes.txt"], "--tune"),
                                          (["warmup", "--cache", "/locked/x.db"], "--cache"),
                                          ([*RUN, "--emit-only", "--emit-path", "/locked/x.cu"], "--emit-path")])
def test_path_in_an_unreadable_directory_is_a_usage_error(monkeypatch, capsys, args, option):
    """What an unprivileged user meets (stat() raising PermissionError), in process: root
    passes any permission check."""
    from cutlass_sparse.cli.main import main

    def refused(path):
        raise PermissionError(13, "Permission denied", str(path))

    for test in ("is_dir", "is_file"):
        monkeypatch.setattr(Path, test, refused)
    with pytest.raises(SystemExit) as exited:
        main(args)
    lines = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"cutlass-sparse: error: argument {option}: cannot examine") and \
        "(Permission denied)" in lines[0], lines[0]


def test_emit_path_that_cannot_be_written_is_a_usage_error(places, monkeypatch, capsys):
    """The argument check passes (the directory exists) but the write is refused: still one
    line naming --emit-path, exit 2."""
    from cutlass_sparse.cli.main import main

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refused)
    target = places["cwd"] / "x.cu"
    with pytest.raises(SystemExit) as exited:
        main([*RUN, "--emit-only", "--emit-path", str(target)])
    lines = capsys.readouterr().err.splitlines()
    assert exited.value.code == 2 and len(lines) == 1, lines
    assert lines[0] == f"cutlass-sparse: error: argument --emit-path: cannot write '{target}' (Permission denied)"
