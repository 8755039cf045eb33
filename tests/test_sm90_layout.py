"""The sm90 metadata layouts (formats.sm90_layout) on the host: each atom's byte index is
a bijection onto the compressor's buffer, and the two atoms differ (so a conversion is
needed). The GPU test (test_gpu_sm90.py) checks the conversion against CUTLASS's own
compressor byte for byte."""
import numpy as np
import pytest

from cutlass_sparse.describe.description import SparseGemmConfig
from cutlass_sparse.formats import sm90_layout


@pytest.mark.parametrize("m, k", [(64, 128), (192, 384), (100, 48), (4096, 4096)])
@pytest.mark.parametrize("atom_k", sm90_layout.ATOMS_K)
def test_byte_index_fills_the_buffer_once(m, k, atom_k):
    rows = np.arange(-(-m // 64) * 64)[:, None]
    groups = np.arange(-(-k // atom_k) * atom_k // 8)[None, :]
    index = sm90_layout.byte_index(rows, groups, m, atom_k)
    size = sm90_layout.metadata_bytes(m, k, atom_k)
    assert index.min() == 0 and index.max() == size - 1
    assert len(np.unique(index)) == index.size == size


def test_atoms_differ_but_agree_on_the_first_block():
    rows, groups = np.arange(64)[:, None], np.arange(16)[None, :]
    a64, a128 = (sm90_layout.byte_index(rows, groups, 64, a) for a in (64, 128))
    assert not np.array_equal(a64, a128)
    # Row 0's first 16 logical columns are the first two bytes in both.
    assert list(a64[0, :2]) == list(a128[0, :2]) == [0, 1]


def test_unknown_atom_is_refused():
    with pytest.raises(ValueError, match="atom_k"):
        sm90_layout.byte_index(np.arange(1)[:, None], np.arange(1)[None, :], 64, 96)


@pytest.mark.parametrize("tile_k, atom_k", [(64, 64), (128, 128), (256, 128)])
def test_config_atom_follows_cutlass_builder(tile_k, atom_k):
    config = SparseGemmConfig(family="sm90", element="f16", element_out="f16", layout_b="row",
                              threadblock=(128, 128, tile_k), warps=(4, 1, 1), stages=0, instruction=(64, 128, 32),
                              alignment_a=8, alignment_b=8, alignment_c=8, swizzle=1, min_compute=90,
                              schedule="cooperative", cluster=(1, 2, 1))
    assert config.atom_k == atom_k
