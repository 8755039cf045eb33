"""The CUDA 12 install ([cu12]) beside the default CUDA 13 one ([cu13]).

Header discovery is checked on fake site-packages trees of both wheel layouts (any
machine); the compiles run only where the loaded NVRTC is CUDA 12's (.ci/run's second
venv, or `pip install -e '.[cu12,test]'`), and there they must pass.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cutlass_sparse import env
from cutlass_sparse.build import cubin, kernels
from cutlass_sparse.build.cache import KernelCache
from cutlass_sparse.describe import catalog
from cutlass_sparse.describe.description import SparseGemmConfig
from cutlass_sparse.emit import arguments

ROOT = Path(__file__).resolve().parent.parent

# The CUDA 12.9 wheels pinned in pyproject.toml's cu12 extra (each piece, with the probe
# file header_sources looks for) and the CUDA 13.0 ones of cu13.
CU12 = {"cuda_cccl/include/cuda/std/type_traits": ("nvidia-cuda-cccl-cu12", "12.9.27"),
        "cuda_runtime/include/cuda_runtime.h": ("nvidia-cuda-runtime-cu12", "12.9.79"),
        "cuda_nvcc/include/crt/host_defines.h": ("nvidia-cuda-nvcc-cu12", "12.9.86")}
CU13 = {"cu13/include/cccl/cuda/std/type_traits": ("nvidia-cuda-cccl", "13.0.85"),
        "cu13/include/cuda_runtime.h": ("nvidia-cuda-runtime", "13.0.96"),
        "cu13/include/crt/host_defines.h": ("nvidia-cuda-crt", "13.0.88")}


# The memoized discovery functions, taken before any test replaces one of them.
_MEMOIZED = (env.nvrtc_major, env.header_sources, env.include_dirs, env.nvrtc_version, env.toolchain_identity)


def _clear():
    for f in _MEMOIZED:
        f.cache_clear()


@pytest.fixture
def fake_site(tmp_path, monkeypatch):
    """A site-packages/nvidia tree holding the wheels given, and an NVRTC of the major given."""
    def make(major, *stacks, missing=()):
        root = tmp_path / "site" / "nvidia"
        versions = {}
        for stack in stacks:
            for rel, (dist, version) in stack.items():
                if rel in missing:
                    continue
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text("")
                versions[dist] = version
        monkeypatch.setattr(env, "nvrtc_major", lambda: major)
        monkeypatch.setattr(env, "_nvidia_roots", lambda: [root])
        monkeypatch.setattr(env, "_version", lambda dist: versions.get(dist, "4.2.0.0" if dist == "nvidia-cutlass"
                                                                         else None))
        monkeypatch.setattr(env, "_cuda_home", lambda: None)
        _clear()
        return root

    yield make
    monkeypatch.undo()
    _clear()


def _cuda_pieces():
    return [(path, ident) for path, ident in env.header_sources() if not ident.startswith("nvidia-cutlass")]


def test_cuda12_wheel_layout_is_found(fake_site):
    root = fake_site(12, CU12)
    assert _cuda_pieces() == [(root / "cuda_cccl/include", "nvidia-cuda-cccl-cu12 12.9.27"),
                              (root / "cuda_runtime/include", "nvidia-cuda-runtime-cu12 12.9.79"),
                              (root / "cuda_nvcc/include", "nvidia-cuda-nvcc-cu12 12.9.86")]


def test_cuda13_wheel_layout_is_still_found(fake_site):
    root = fake_site(13, CU13)
    assert _cuda_pieces() == [(root / "cu13/include/cccl", "nvidia-cuda-cccl 13.0.85"),
                              (root / "cu13/include", "nvidia-cuda-runtime 13.0.96"),
                              (root / "cu13/include", "nvidia-cuda-crt 13.0.88")]
    assert env.include_dirs()[-2:] == [root / "cu13/include/cccl", root / "cu13/include"]


@pytest.mark.parametrize("major", [12, 13])
def test_both_stacks_installed_headers_follow_the_loaded_nvrtc(fake_site, major):
    # Both extras in one environment: the headers must be the loaded NVRTC's, never a mix.
    fake_site(major, CU12, CU13)
    idents = [ident for _, ident in _cuda_pieces()]
    assert all(("-cu12 12.9." in i) == (major == 12) and ("13.0." in i) == (major == 13) for i in idents), idents
    assert len(idents) == 3


def test_missing_cuda12_crt_names_the_wheel_and_the_extras(fake_site):
    fake_site(12, CU12, CU13, missing=("cuda_nvcc/include/crt/host_defines.h",))
    with pytest.raises(env.CudaStackMissing) as err:
        env.header_sources()
    message = str(err.value)
    assert "crt/host_defines.h" in message and "nvidia-cuda-nvcc-cu12" in message
    assert "cutlass-sparse[cu13]" in message and "cutlass-sparse[cu12]" in message


def test_unknown_cuda_major_is_refused(fake_site):
    fake_site(11, CU12, CU13)
    with pytest.raises(env.CudaStackMissing, match=r"NVRTC 11 .*\(12, 13\)"):
        env.header_sources()


def test_cache_keys_of_the_two_stacks_differ(fake_site, monkeypatch):
    monkeypatch.setattr(env, "nvrtc_version", lambda: "fixed")
    fake_site(12, CU12, CU13)
    cu12 = env.toolchain_identity()
    fake_site(13, CU12, CU13)
    assert env.toolchain_identity() != cu12


def test_no_nvrtc_loadable_names_the_extras(monkeypatch):
    import cuda.bindings

    class NoLibrary:
        @staticmethod
        def nvrtcVersion():
            # What cuda.pathfinder raises (a RuntimeError) when no libnvrtc.so.12/.13 is installed.
            raise RuntimeError('Failure finding "libnvrtc.so.13 or libnvrtc.so.12"')

    monkeypatch.setattr(cuda.bindings, "nvrtc", NoLibrary, raising=False)
    _clear()
    try:
        with pytest.raises(env.CudaStackMissing, match=r"cannot load NVRTC .*cutlass-sparse\[cu13\].*\[cu12\]"):
            env.nvrtc_major()
    finally:
        monkeypatch.undo()
        _clear()


def test_bare_install_fails_at_first_compile_with_the_extras(tmp_path):
    # A bare `pip install cutlass-sparse` has no NVRTC: its first use (here a compile-only run)
    # must end in one line naming the extras, not a traceback.
    code = ("import sys; sys.modules['cuda.bindings'] = None; sys.modules['cupy'] = None\n"
            "from cutlass_sparse.cli.main import main\n"
            "sys.exit(main(['run', '--m', '64', '--n', '64', '--k', '64', '--family', 'sm80']))")
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "CUTLASS_SPARSE_CACHE": str(cache / "c.db")})
    assert run.returncode == 1, run.stderr
    assert "cutlass-sparse[cu13]" in run.stderr and "cutlass-sparse[cu12]" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def _loaded_nvrtc_major():
    try:
        return env.nvrtc_major()
    except env.CudaStackMissing:
        return None


needs_cuda12 = pytest.mark.skipif(_loaded_nvrtc_major() != 12,
                                  reason="NVRTC 12 not loaded (install '.[cu12,test]'; .ci/run does, in .venv12)")

SMALL = SparseGemmConfig(family="sm80", element="f16", element_out="f16", layout_b="col",
                         threadblock=(64, 64, 64), warps=(2, 2, 1), stages=4, instruction=(16, 8, 32),
                         alignment_a=8, alignment_b=8, alignment_c=8, swizzle=8)


@needs_cuda12
def test_cuda12_stack_is_the_pinned_one():
    identity = env.toolchain_identity()
    for dist, version in CU12.values():
        assert f"{dist} {version}" in identity, identity
    assert "nvrtc 12.9 (12.9.86)" in identity    # NVRTC's minor and its wheel's exact version
    # Nothing of CUDA 13 on the include path beside NVRTC 12.
    assert not any("cu13" in str(path) for path in env.include_dirs())


@needs_cuda12
def test_sm80_kernel_compiles_with_nvrtc12(tmp_path):
    kernels._memo.clear()
    compiled = kernels.get(SMALL, "sm_80", KernelCache(tmp_path / "c.db"))
    assert not compiled.from_cache and compiled.cubin[:4] == b"\x7fELF"
    assert cubin.kernel_param_bytes(compiled.cubin, SMALL.name) == arguments.SM80_GEMM.dtype.itemsize
    assert 40_000 < compiled.shared_bytes < 64_000 and compiled.threads == 128


@needs_cuda12
@pytest.mark.slow_compile
def test_sm90_kernel_compiles_with_nvrtc12(tmp_path):
    # The family whose CuTe headers gate features on the CUDA minor (TMA, wgmma.sp): the one
    # where headers and NVRTC of CUDA 12 could disagree with CUTLASS 4.2.
    from cutlass_sparse.emit.sm90 import SETUP

    fam = catalog.load("sm90")
    tile = next(t for t in fam.tiles if t[5] == "persistent" and t[4] == "cooperative")
    config = fam.config(tile, "f16", "f16", "row", 8, 8)
    kernels._memo.clear()
    compiled = kernels.get(config, "sm_90a", KernelCache(tmp_path / "c.db"))
    c = compiled.constants
    # Params by value, then the setup's buffer (or null)
    assert cubin.kernel_param_sizes(compiled.cubin, config.name) == (c["params_bytes"], 8)
    assert cubin.kernel_param_bytes(compiled.cubin, f"{config.name}_setup") == SETUP.dtype.itemsize
    assert c["threads"] == 384 and 100_000 < c["shared_bytes"] <= 227 * 1024
    assert c["params_bytes"] % 64 == 0 and c["params_bytes"] >= 4 * 128
