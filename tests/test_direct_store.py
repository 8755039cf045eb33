"""sm90 kernels whose epilogue stores D from registers straight to global memory
(SparseGemmConfig.direct_store: CUTLASS's NoSmemWarpSpecialized), without a GPU: their
identity, what they are emitted as, and the rules. Their results and speed beside the TMA
epilogue's are measured on the GPU (scripts/device/sweep_8bit_picks.py --round 12)."""
import dataclasses

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.emit.registry import emit


def _pick(**fields):
    chosen = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 132, "sm90").as_compiled()
    return dataclasses.replace(chosen, **fields)


def test_a_direct_store_kernel_is_its_own_kernel():
    tma, direct = _pick(), _pick(direct_store=True)
    assert "_epi_tma_" in tma.name and direct.name == tma.name.replace("_epi_tma_", "_epi_nosmem_")
    assert direct.key != tma.key
    assert catalog.find(direct.name) == direct and catalog.find(tma.name) == tma   # by name, as calls take it
    assert kernels.cache_key(emit(direct), "sm_90a", []) != kernels.cache_key(emit(tma), "sm_90a", [])
    # descriptions and keys made before the field existed stay as they were
    stored = tma.to_json()
    del stored["direct_store"]
    assert type(tma).from_json(stored) == tma


def test_it_is_emitted_with_cutlass_register_to_global_epilogue():
    tma, direct = emit(_pick()).source, emit(_pick(direct_store=True)).source
    assert "cutlass::epilogue::NoSmemWarpSpecialized" in direct
    assert "cutlass::epilogue::TmaWarpSpecializedCooperative," not in direct
    assert "cutlass::epilogue::TmaWarpSpecializedCooperative," in tma
    # CUTLASS builds this epilogue only for a LinearCombination naming C's type; a kernel
    # without C still skips C at run time (beta = 0)
    assert "    ElementC, cutlass::layout::RowMajor, 8,\n    ElementC, cutlass::layout::RowMajor, 8," in direct
    assert "    void, cutlass::layout::RowMajor, 8," in tma


@pytest.mark.parametrize("fields,rule", [
    ({"activation": "relu"}, "identity activation"),
    ({"epilogue_tile": (128, 64)}, "no epilogue_tile"),
    ({"element_out": "f32", "scales": "row_col"}, "no scales"),
])
def test_what_it_cannot_do_is_refused_by_name(fields, rule):
    with pytest.raises(ValueError, match=f"direct_store: sm90 only, with the .*{rule[:8]}"):
        _pick(direct_store=True, **fields)


def test_an_sm80_kernel_cannot_take_it():
    sm80 = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 108, "sm80")
    with pytest.raises(ValueError, match="direct_store: sm90 only"):
        dataclasses.replace(sm80, direct_store=True)
