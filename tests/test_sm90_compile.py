"""The Hopper family without a GPU: its emission compiles for sm_90a with NVRTC, the
header patches apply, and the compiled kernel reports what the launcher relies on."""
import pytest

from cutlass_sparse.describe import catalog

from cutlass_sparse.build import cubin, kernels

from cutlass_sparse.emit import nvrtc_headers

from cutlass_sparse.launch import tma
from cutlass_sparse.build.cache import KernelCache
from cutlass_sparse.describe.helper_kernels import CompressorConfig
from cutlass_sparse.emit.registry import emit
from cutlass_sparse.emit.sm90 import SETUP
from cutlass_sparse.emit.sm90_compressor import COMPRESS
from cutlass_sparse.formats import sm90_layout


def test_header_patches_apply_once_each():
    headers = dict(nvrtc_headers.patched_headers())
    assert set(headers) == {nvrtc_headers.TMA_HEADER, nvrtc_headers.HW_INFO_HEADER, nvrtc_headers.UINT128_HEADER,
                            nvrtc_headers.SCHEDULER_PARAMS_HEADER, nvrtc_headers.PINGPONG_HEADER,
                            nvrtc_headers.STREAM_K_HEADER}
    # PDL: the ping-pong kernel's only launch_dependents is the working warp group's
    pingpong = headers[nvrtc_headers.PINGPONG_HEADER]
    assert pingpong.count("launch_dependent_grids();") == 1
    assert "uint32_t unit_iter_start = unit_iter_start_;" in headers[nvrtc_headers.STREAM_K_HEADER]
    assert headers[nvrtc_headers.SCHEDULER_PARAMS_HEADER].count("cutlass_sparse: also under NVRTC") == 2
    assert "#if defined(__CUDACC_RTC__)\n#define CUTLASS_UINT128_NATIVE" in headers[nvrtc_headers.UINT128_HEADER]
    assert "cutlass_sparse_tma::record(&tma_desc" in headers[nvrtc_headers.TMA_HEADER]
    assert "kMagic = 0x50435241544D5343ull" in headers[nvrtc_headers.TMA_HEADER]
    assert f"{tma.MAGIC:#x}".upper().endswith("50435241544D5343")
    assert tma.RECIPE.itemsize == 128


def test_sm90_catalog_tiles_read_the_two_metadata_atoms():
    fam = catalog.load("sm90")
    assert {min(tile[0][2], 128) for tile in fam.tiles} == set(sm90_layout.ATOMS_K)
    names = [c.name for c in fam.enumerate()]
    assert len(names) == len(set(names))
    assert all(n.startswith("cutlass3x_sm90_sptensorop_spgemm_") for n in names)


@pytest.mark.parametrize("atom_k", sm90_layout.ATOMS_K)
def test_compressor_compiles_for_sm90a(shared_cache_path, atom_k):
    compiled = kernels.get(CompressorConfig("f16", atom_k=atom_k), "sm_90a", KernelCache(shared_cache_path))
    c = compiled.constants
    assert c["atom_k"] == atom_k and c["atom_m"] == sm90_layout.ATOM_M
    assert cubin.kernel_param_bytes(compiled.cubin, compiled.symbol) == COMPRESS.dtype.itemsize
    # 2:4 keeps half of K; metadata is one byte per 8 logical K; alignments as CUTLASS sets them.
    assert c["a_sparsity"] == 2 and c["e_sparsity"] == 8 and c["chunk_k"] == 4
    assert c["threads"] > 0 and 0 < c["shared_bytes"] <= 48 * 1024


def _tile(scheduler):
    return next(t for t in catalog.load("sm90").tiles if t[5] == scheduler and t[4] == "cooperative")


@pytest.mark.slow_compile
@pytest.mark.parametrize("scheduler", ["persistent", "streamk"])
def test_gemm_compiles_for_sm90a(shared_cache_path, scheduler):
    fam = catalog.load("sm90")
    config = fam.config(_tile(scheduler), "f16", "f16", "row", 8, 8)
    # the catalog's stream-K tiles split the registers their own way (load_registers)
    assert ("_streamk" in config.name) == config.name.endswith("_ld72_lean") == (scheduler == "streamk")
    compiled = kernels.get(config, "sm_90a", KernelCache(shared_cache_path))
    # Params by value, then the setup's buffer (or null)
    assert cubin.kernel_param_sizes(compiled.cubin, config.name) == (compiled.constants["params_bytes"], 8)
    assert cubin.kernel_param_bytes(compiled.cubin, f"{config.name}_setup") == SETUP.dtype.itemsize
    c = compiled.constants
    assert c["threads"] == 384                    # producer + 2 consumer warpgroups
    assert 100_000 < c["shared_bytes"] <= 227 * 1024
    assert c["params_bytes"] % 64 == 0 and c["params_bytes"] >= 4 * 128   # holds >= 4 TMA descriptors


def test_e4m3_compressor_compiles_and_8_bit_x_must_be_k_major(shared_cache_path):
    # Issue 15's first step: the sm90 kernels take e4m3 (scripts/device/sweep_8bit.py runs
    # them on the GPU; the library's calls do not take fp8 yet). wgmma reads 8-bit
    # operands K-major only: a row-major x is refused at the configuration.
    import dataclasses

    compiled = kernels.get(CompressorConfig("e4m3"), "sm_90a", KernelCache(shared_cache_path))
    assert compiled.constants["a_sparsity"] == 2 and compiled.constants["e_sparsity"] == 8
    fp8 = catalog.load("sm90_fp8")
    config = fp8.config(fp8.tiles[0], "e4m3", "bf16", "col", 16, 8)   # 128x256x128, 2x1 cluster
    assert "cutlass::float_e4m3_t" in emit(config).source and config.atom_k == 128
    # e5m2 activations: B's type in the emitted kernel (compiled and checked on the GPU)
    mixed = emit(fp8.config(fp8.tiles[0], "e4m3", "bf16", "col", 16, 8, "e5m2")).source
    assert "using ElementA = cutlass::float_e4m3_t;" in mixed and "using ElementB = cutlass::float_e5m2_t;" in mixed
    with pytest.raises(ValueError, match="K-major only"):
        dataclasses.replace(config, layout_b="row")


def test_scaled_fp8_gemm_compiles_with_its_own_setup_struct(shared_cache_path):
    # D = silu(alpha * s_row[m] * s_col[n] * acc), bf16 out: the epilogue visitor tree of
    # quantized weights. Its setup entry takes two more pointers; other kernels keep theirs.
    import dataclasses

    from cutlass_sparse.emit.sm90 import SETUP_SCALED, setup_layout

    fp8 = catalog.load("sm90_fp8")
    # as the library runs it: no C in the epilogue (the scaled tree reads none), stages searched
    config = dataclasses.replace(fp8.config(fp8.tiles[0], "e4m3", "bf16", "col", 16, 8, reads_c=False),
                                 scales="row_col", activation="silu")
    assert config.name.endswith("_silu_scaled_noc") and setup_layout(config) is SETUP_SCALED
    assert setup_layout(dataclasses.replace(config, scales="none")) is SETUP
    assert SETUP_SCALED.offsets["row_scales"] == SETUP.dtype.itemsize   # SETUP's fields, then the scales
    compiled = kernels.get(config, "sm_90a", KernelCache(shared_cache_path))
    assert cubin.kernel_param_bytes(compiled.cubin, f"{compiled.symbol}_setup") == SETUP_SCALED.dtype.itemsize
    assert compiled.shared_bytes <= 232448                  # within the 227 KB of an H100 block
    with pytest.raises(ValueError, match="leaky_relu"):
        dataclasses.replace(config, activation="leaky_relu")


def test_a_kernel_without_c_takes_the_stage_cutlass_leaves_unused(shared_cache_path):
    # fp8 128x256x128 without C: CUTLASS's automatic count gives 4 stages of 42 KB (185 KB in
    # all); the emitted stage search finds that a fifth fits, in exactly the 232448 bytes
    # an H100 block may have (cuSPARSELt's fp8 kernels use as much).
    fp8 = catalog.load("sm90_fp8")
    config = fp8.config(fp8.tiles[0], "e4m3", "bf16", "col", 16, 8, reads_c=False)
    assert config.threadblock == (128, 256, 128) and config.stages == 0
    compiled = kernels.get(config, "sm_90a", KernelCache(shared_cache_path))
    assert compiled.shared_bytes == 232448


def test_int8_gemm_compiles_with_int32_accumulation(shared_cache_path):
    # catalog sm90_s8 (issue 15): int32 accumulation and, for an int32 D, int32 epilogue
    # arithmetic; run on the H100 through cs.linear_int8 (tests/test_gpu_int8.py).
    fam = catalog.load("sm90_s8")
    tile = next(t for t in fam.tiles if t[0] == (64, 32, 256))   # the decode tile: the quickest compile
    config = fam.config(tile, "s8", "s32", "col", 16, 4)
    assert "int32_t, TileShape, ClusterShape" in emit(config).source
    compiled = kernels.get(config, "sm_90a", KernelCache(shared_cache_path))
    assert cubin.kernel_param_bytes(compiled.cubin, f"{compiled.symbol}_setup") == SETUP.dtype.itemsize
    assert compiled.constants["threads"] == 384 and compiled.constants["params_bytes"] % 64 == 0
