"""sm90 kernels whose epilogue stores D from registers straight to global memory
(SparseGemmConfig.direct_store: CUTLASS's NoSmemWarpSpecialized), without a GPU: their
identity, what they are emitted as, where the wish applies, and the catalog tile that asks
for it. Results and speed beside the TMA epilogue's were measured on the GPU
(scripts/device/sweep_8bit_picks.py --round 12 and 13)."""
import dataclasses

import pytest

from cutlass_sparse.build import kernels, warmup
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.describe.problem import Epilogue, Problem, folded_c
from cutlass_sparse.emit.registry import emit
from cutlass_sparse.plan import plans


def _pick(m=4096, n=4096, k=4096, **fields):
    """The pick, with CUTLASS's TMA epilogue where the catalog asks for our staged one (the
    store these tests set the direct store beside)."""
    chosen = selection.config_for_shape(m, n, k, "f16", "f16", "row", 132, "sm90").as_compiled()
    return dataclasses.replace(chosen, **{"staged_store": False, **fields})


def test_a_direct_store_kernel_is_its_own_kernel():
    tma, direct = _pick(direct_store=False), _pick(direct_store=True)
    assert direct.stores_directly and not tma.stores_directly
    assert "_epi_tma_" in tma.name and direct.name == tma.name.replace("_epi_tma_", "_epi_nosmem_")
    assert direct.key != tma.key
    assert kernels.cache_key(emit(direct), "sm_90a", []) != kernels.cache_key(emit(tma), "sm_90a", [])
    # by name, as calls take it (the wish for the staged store the direct store overrides aside)
    assert catalog.find(direct.name).as_compiled() == direct.as_compiled() and catalog.find(tma.name) == tma
    # descriptions and keys made before the field existed stay as they were
    stored = tma.to_json()
    del stored["direct_store"]
    assert type(tma).from_json(stored) == tma


def test_it_is_emitted_with_cutlass_register_to_global_epilogue():
    tma, direct = emit(_pick(direct_store=False)).source, emit(_pick(direct_store=True)).source
    assert "cutlass::epilogue::NoSmemWarpSpecialized" in direct
    assert "cutlass::epilogue::TmaWarpSpecializedCooperative," not in direct
    assert "cutlass::epilogue::TmaWarpSpecializedCooperative," in tma
    # CUTLASS builds this epilogue only for a LinearCombination naming C's type; a kernel
    # without C still skips C at run time (beta = 0)
    assert "    ElementC, cutlass::layout::RowMajor, 8,\n    ElementC, cutlass::layout::RowMajor, 8," in direct
    assert "    void, cutlass::layout::RowMajor, 8," in tma


@pytest.mark.parametrize("fields", [
    {"activation": "relu"}, {"epilogue_tile": (128, 64)}, {"reads_c": True}, {"element_out": "f32"},
    {"element_out": "f32", "scales": "row_col"}, {"layout_c": "col"}, {"tile_scheduler": "streamk"},
])
def test_an_epilogue_it_was_not_measured_with_keeps_the_tma_store(fields):
    wished, plain = _pick(direct_store=True, **fields), _pick(direct_store=False, **fields)
    assert not wished.stores_directly and "_epi_tma_" in wished.name
    assert wished.key == plain.key and emit(wished).source == emit(plain).source   # one kernel, one entry
    assert wished.as_compiled() == plain.as_compiled()


def test_an_sm80_kernel_cannot_take_it():
    sm80 = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 108, "sm80")
    with pytest.raises(ValueError, match="direct_store: family sm90 only"):
        dataclasses.replace(sm80, direct_store=True)


def test_the_catalog_asks_for_it_on_the_decode_tile_it_was_measured_ahead_on():
    decode = _pick(4096, 16, 4096)
    assert decode.threadblock == (64, 16, 256) and decode.cluster == (4, 1, 1)
    assert decode.stores_directly and decode.name.endswith("_pingpong_epi_nosmem_inflight_lean_noc")
    assert not _pick(8192, 16, 28672).stores_directly   # the 1x1-cluster decode tile lost with it
    assert not _pick().stores_directly and not _pick(4096, 64, 14336).stores_directly
    # a call with C (or another epilogue) runs the same tile with the TMA store
    assert not dataclasses.replace(decode, reads_c=True).stores_directly
    # warm-up compiles what calls run: the tile's kernel without C stores directly, with C not
    items = [c for c, _ in warmup.catalog_items(["sm_90a"]) if getattr(c, "threadblock", None) == (64, 16, 256)
             and c.cluster == (4, 1, 1) and c.element == "f16" and c.element_out == "f16" and c.layout_b == "row"]
    row = [c for c in items if c.layout_c == "row"]
    assert len(row) == 2 and {c.reads_c: c.stores_directly for c in row} == {True: False, False: True}
    # and a single column's column-major D (Problem.layout_d), no C, with the TMA store
    assert [(c.reads_c, c.stores_directly) for c in items if c.layout_c == "col"] == [(False, False)]


def _runs(problem):
    """The kernel a call of this problem runs (the plan's, found without a GPU or a compile)."""
    return kernels.first_asked(lambda: plans.make(problem))[0].as_compiled()


@pytest.mark.parametrize("element", ["f16", "bf16"])
@pytest.mark.parametrize("n", [1, 8, 16])
def test_a_call_runs_the_kernel_warm_up_compiles(element, n):
    warmed = {c.as_compiled() for c, _ in warmup.catalog_items(["sm_90a"], widest_only=False)
              if hasattr(c, "as_compiled")}
    decode = Problem.contiguous("sm90", 4096, n, 4096, element=element, sm_count=132)
    ran = _runs(decode)
    # what cs.matmul runs at decode; one column: D the library allocates is column-major
    # (Problem.layout_d), which keeps the TMA store (the direct store was measured on row-major D)
    assert ran in warmed and ran.stores_directly == (n > 1) and ran.layout_c == ("col" if n == 1 else "row")
    # C with beta or a float32 D: the same tile with the TMA store, as warm-up compiles it
    for other in (decode.with_(c=folded_c("row", 4096, n), epilogue=Epilogue(beta=1.0)),
                  dataclasses.replace(decode, element_out="f32")):
        kernel = _runs(other)
        assert not kernel.stores_directly and kernel.threadblock == ran.threadblock and kernel in warmed
    # an activation, or a bias riding as the scaled epilogue's vector: the TMA store too
    # (kernels the catalog warm-up does not hold; they compile on first use or by preset)
    relu = _runs(dataclasses.replace(decode, epilogue=Epilogue(activation="relu")))
    biased = _runs(decode.with_bias())
    assert relu.activation == "relu" and biased.scales == "row_col"
    assert not relu.stores_directly and not biased.stores_directly
