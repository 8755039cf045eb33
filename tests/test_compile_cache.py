"""Real NVRTC compiles (no GPU needed), the compiled_cache.db life cycle, and the
argument-block layout check."""
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cutlass_sparse.emit import arguments

from cutlass_sparse.build import compiler, cubin, kernels
from cutlass_sparse.build.cache import KernelCache, UnsafeCacheError
from cutlass_sparse.describe.description import SparseGemmConfig

ROOT = Path(__file__).resolve().parent.parent
SMALL = SparseGemmConfig(family="sm80", element="f16", element_out="f16", layout_b="col",
                         threadblock=(64, 64, 64), warps=(2, 2, 1), stages=4, instruction=(16, 8, 32),
                         alignment_a=8, alignment_b=8, alignment_c=8, swizzle=8)


@pytest.fixture(autouse=True)
def fresh_memo():
    kernels._memo.clear()
    yield
    kernels._memo.clear()


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_emitted_source_compiles_to_a_cubin(arch, shared_cache_path):
    compiled = kernels.get(SMALL, arch, KernelCache(shared_cache_path))
    assert compiled.cubin[:4] == b"\x7fELF"
    # What the launcher relies on, read back from the compiler's own output.
    assert cubin.kernel_param_bytes(compiled.cubin, SMALL.name) == arguments.SM80_GEMM.dtype.itemsize
    assert compiled.shared_bytes == cubin.read_int32(compiled.cubin, f"{SMALL.name}_shared_bytes")
    # 64x64x64, 4 stages: A 64x32 + B 64x64 halves + metadata per stage, epilogue reuses it.
    assert 40_000 < compiled.shared_bytes < 64_000
    assert compiled.threads == 128


def test_cache_miss_then_hit_and_new_key_for_changed_option(tmp_path, shared_cache_path):
    cache = KernelCache(tmp_path / "c.db")
    first = kernels.get(SMALL, "sm_80", cache)
    assert not first.from_cache
    kernels._memo.clear()
    second = kernels.get(SMALL, "sm_80", cache)
    assert second.from_cache and second.cubin == first.cubin and second.key == first.key
    source = kernels.emit(SMALL).source
    base = kernels.cache_key(source, "sm_80", compiler.options_for("sm_80"))
    assert base == first.key
    assert kernels.cache_key(source, "sm_80", compiler.options_for("sm_80", ("-lineinfo",))) != base
    assert kernels.cache_key(source, "sm_86", compiler.options_for("sm_86")) != base
    assert kernels.cache_key(source + "\n", "sm_80", compiler.options_for("sm_80")) != base


def test_corrupted_entry_is_dropped_and_recompiled(tmp_path):
    path = tmp_path / "c.db"
    first = kernels.get(SMALL, "sm_80", KernelCache(path))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE kernels SET cubin = ? WHERE key = ?", (b"\x7fELF garbage", first.key))
    kernels._memo.clear()
    with pytest.warns(UserWarning, match="failed its checksum"):
        again = kernels.get(SMALL, "sm_80", KernelCache(path))
    assert not again.from_cache and again.cubin == first.cubin


def test_second_process_loads_from_cache_without_compiling(tmp_path, shared_cache_path):
    kernels.get(SMALL, "sm_80", KernelCache(shared_cache_path))
    script = ("import json, sys, time; from cutlass_sparse.build import kernels; "
              "from cutlass_sparse.describe.description import SparseGemmConfig; "
              "cfg = SparseGemmConfig.from_json(json.loads(sys.argv[1])); t = time.perf_counter(); "
              "k = kernels.get(cfg, 'sm_80'); print(k.from_cache, round((time.perf_counter() - t) * 1e3, 1))")
    env = dict(os.environ, CUTLASS_SPARSE_CACHE=str(shared_cache_path), CUTLASS_SPARSE_NO_COMPILE="1",
               PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", script, json.dumps(SMALL.to_json())], env=env, capture_output=True, text=True, check=True)
    from_cache, millis = result.stdout.split()
    assert from_cache == "True"
    assert float(millis) < 2000


def test_no_compile_switch_makes_a_cold_cache_fail(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_SPARSE_NO_COMPILE", "1")
    with pytest.raises(compiler.CompileError, match="disabled"):
        kernels.get(SMALL, "sm_80", KernelCache(tmp_path / "cold.db"))


def test_compile_error_carries_log_and_source():
    with pytest.raises(compiler.CompileError) as info:
        compiler.compile_to_cubin("this is not C++", "broken", compiler.options_for("sm_80"))
    assert "error" in info.value.log and info.value.source_path.exists()


def test_argument_layout_check_fails_on_drift():
    """The emitted static_asserts really bind the C++ struct to the Python layout."""
    def probe(layout):
        src = "#include <cuda/std/type_traits>\n" + layout.cpp() + \
              f'extern "C" __global__ void probe({layout.name} a) {{}}\n'
        return compiler.compile_to_cubin(src, "probe", compiler.options_for("sm_80"))

    good = probe(arguments.SM80_GEMM)
    assert cubin.kernel_param_bytes(good.cubin, "probe") == arguments.SM80_GEMM.dtype.itemsize
    fields = list(arguments.SM80_GEMM.fields)
    fields[6] = ("lda", "int", np.int64)   # C++ int is 4 bytes, Python says 8
    with pytest.raises(compiler.CompileError, match="field lda has a different size"):
        probe(arguments.StructLayout("Drifted", tuple(fields)))


def test_padded_layouts_are_refused():
    with pytest.raises(AssertionError, match="padded"):
        arguments.StructLayout("Bad", (("a", "int", np.int32), ("b", "long long", np.int64)))


def test_cache_refuses_world_writable_location(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeCacheError, match="writable by other users"):
        KernelCache(shared / "c.db")


def test_default_cache_location_is_not_the_working_directory(monkeypatch, tmp_path):
    from cutlass_sparse import env

    monkeypatch.delenv("CUTLASS_SPARSE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert env.cache_path() == tmp_path / "cutlass_sparse" / "compiled_cache.db"
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(tmp_path / "x.db"))
    assert env.cache_path() == tmp_path / "x.db"
