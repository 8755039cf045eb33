"""sm90 kernels whose epilogue is our staged store (SparseGemmConfig.staged_store: D =
alpha * acc through a shared-memory chunk, emit.sm90_staged_epilogue), without a GPU:
their identity, where the wish is taken, what they are emitted as, and one NVRTC compile.
Results are checked on the GPU (tests/test_gpu_staged_epilogue.py) and timed beside the TMA
epilogue by scripts/device/sweep_8bit_picks.py --round 21."""
import dataclasses

import pytest

from cutlass_sparse.build import cubin, kernels
from cutlass_sparse.build.cache import KernelCache
from cutlass_sparse.build.warmup import SM90_LEAN_BYTES, SM90_WITHOUT_TMA_EPILOGUE_BYTES, compile_bytes
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.describe.description import SparseGemmConfig
from cutlass_sparse.emit import sm90_staged_epilogue
from cutlass_sparse.emit.registry import emit


def _pick(m=4096, n=4096, k=4096, element="f16", **fields):
    chosen = selection.config_for_shape(m, n, k, element, element, "row", 132, "sm90").as_compiled()
    return dataclasses.replace(chosen, **fields)


def test_a_staged_kernel_is_its_own_kernel():
    tma, staged = _pick(staged_store=False), _pick(staged_store=True)
    assert staged.stores_staged and not tma.stores_staged
    assert "_epi_tma_" in tma.name and staged.name == tma.name.replace("_epi_tma_", "_epi_staged_")
    assert staged.key != tma.key and staged.as_compiled() == staged
    assert kernels.cache_key(emit(staged), "sm_90a", []) != kernels.cache_key(emit(tma), "sm_90a", [])
    assert catalog.find(staged.name) == staged and catalog.find(tma.name) == tma   # by name, as calls take it
    # descriptions and keys made before the field existed stay as they were
    stored = tma.to_json()
    del stored["staged_store"]
    assert SparseGemmConfig.from_json(stored) == tma
    # both take our own mainloop (every 16-bit tile does): 3 GiB without CUTLASS's TMA epilogue
    assert compile_bytes(staged) == SM90_LEAN_BYTES < compile_bytes(tma) == SM90_WITHOUT_TMA_EPILOGUE_BYTES
    assert tma.builds_cutlass_tma_epilogue and not staged.builds_cutlass_tma_epilogue


@pytest.mark.parametrize("fields", [
    {"reads_c": True}, {"activation": "relu"}, {"scales": "row_col"},
    {"tile_scheduler": "streamk"}, {"epilogue_tile": (128, 32)}, {"direct_store": True},
    {"alignment_c": 4},   # TMA stores whole 16-byte vectors
    {"element_out": "f32", "alignment_c": 4},   # stmatrix writes 16-bit D
    {"threadblock": (128, 40, 64)},             # chunks of two 8-column blocks
], ids=lambda f: next(iter(f)))
def test_the_wish_is_taken_only_by_kernels_it_computes(fields):
    # alpha * acc only: no C, no activation, no scales; cooperative and persistent
    base = _pick(**fields)
    wished = dataclasses.replace(base, staged_store=True)
    assert not wished.stores_staged and "_epi_staged" not in wished.name
    assert wished.key == base.key and wished.as_compiled() == base.as_compiled()


def test_ping_pong_int32_and_sm80_kernels_do_not_take_it():
    decode = _pick(4096, 16, 4096, staged_store=True)
    assert decode.schedule == "pingpong" and not decode.stores_staged
    s8 = selection.config_for_shape(4096, 4096, 4096, "s8", "s32", "col", 132, "sm90")
    assert not dataclasses.replace(s8, reads_c=False, staged_store=True).stores_staged
    sm80 = selection.config_for_shape(256, 64, 256, "f16", "f16", "row", 132, "sm80")
    with pytest.raises(ValueError, match="staged_store: family sm90 only"):
        dataclasses.replace(sm80, staged_store=True)


@pytest.mark.parametrize("tile, out, columns", [
    ((128, 256, 64), "f16", 32), ((128, 128, 128), "bf16", 32), ((256, 192, 64), "f16", 16)])
def test_the_chunk_fits_the_tma_epilogues_share_of_shared_memory(tile, out, columns):
    config = dataclasses.replace(_pick(element=out), threadblock=tile, staged_store=True)
    assert config.stores_staged and sm90_staged_epilogue.chunk_columns(config) == columns
    assert 2 * tile[0] * columns * 2 <= sm90_staged_epilogue.CHUNK_BYTES   # two buffers of 16-bit D


def test_it_is_emitted_in_place_of_cutlass_epilogue():
    tma, staged = emit(_pick(staged_store=False)).source, emit(_pick(staged_store=True)).source
    assert "cutlass::epilogue::TmaWarpSpecializedCooperative," in tma and "StagedEpilogue" not in tma
    assert "cutlass::epilogue::collective::CollectiveBuilder" not in staged
    assert ("using CollectiveEpilogue = cutlass_sparse::StagedAdapter<\n    cutlass_sparse::StagedEpilogue<"
            "cutlass::half_t, cutlass::layout::RowMajor, TileShape, 8, 32>>;") in staged
    col = emit(_pick(staged_store=True, layout_c="col")).source
    assert "StagedEpilogue<cutlass::half_t, cutlass::layout::ColumnMajor, TileShape, 8, 32>" in col


def test_the_catalog_asks_for_it_on_the_tiles_it_was_measured_level_on():
    # round 21 (docs/sweep_staged_round21_h200_session38.log): the 128-row cooperative tiles
    # and 256x192x64; the ping-pong tiles cannot take it, the stream-K twins do not
    fam = catalog.load("sm90")
    assert {t[0] + t[3] for t in fam.staged_store} == {
        (128, 256, 64, 2, 1, 1), (128, 256, 64, 4, 1, 1), (128, 128, 128, 1, 2, 1), (256, 192, 64, 2, 1, 1)}
    assert _pick().stores_staged and _pick(4096, 512, 4096).stores_staged   # cs.matmul's kernels without C
    assert _pick(16384, 16384, 16384).stores_staged and _pick(16384, 16384, 16384).threadblock == (256, 192, 64)
    assert not _pick(4096, 16, 4096).stores_staged   # the decode tile: ping-pong, stores directly
    assert not _pick(reads_c=True).stores_staged     # a call with C keeps CUTLASS's epilogue
    for other in ("sm90_fp8", "sm90_s8"):
        assert catalog.load(other).staged_store == ()


@pytest.mark.slow_compile
def test_a_staged_kernel_compiles_for_sm90a(shared_cache_path):
    config = _pick(staged_store=True)
    compiled = kernels.get(config, "sm_90a", KernelCache(shared_cache_path))
    assert cubin.kernel_param_sizes(compiled.cubin, config.name) == (compiled.constants["params_bytes"], 8)
    c = compiled.constants
    assert c["threads"] == 384 and 100_000 < c["shared_bytes"] <= 227 * 1024
