"""The sm90 layout encoded and decoded without a GPU (formats.sm90_layout.encode/decode):
byte for byte what CUTLASS's own sm90 compressor wrote on an H100
(tests/data/sm90_layout.npz, scripts/device/dump_sm90_layout.py: pruned random values,
groups with one or no non-zero, M and K off the atoms, both 16-bit types), and the
conversions that need no compiled kernel (cs.compress(layout="sm90") of a host matrix,
sw.to_dense(), sw.to_layout("sm80")). The GPU test (test_gpu_sm90.py) checks the same
against the compressor kernel on fresh matrices."""
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.formats import sm90_layout

DATA = np.load(Path(__file__).parent / "data" / "sm90_layout.npz")
CASES = sorted({name.rsplit("_", 1)[0] for name in DATA.files})


def _case(tag):
    dtype, element = (np.float16, "f16") if tag.startswith("float16") else (ml_dtypes.bfloat16, "bf16")
    return (DATA[f"{tag}_dense"].view(dtype), DATA[f"{tag}_values"], DATA[f"{tag}_metadata"], element)


@pytest.mark.parametrize("tag", CASES)
def test_encode_matches_cutlass_compressor_byte_for_byte(tag):
    dense, values, metadata, element = _case(tag)
    ours_values, ours_metadata = sm90_layout.encode(dense, element)
    assert ours_values.dtype == dense.dtype and ours_values.shape == values.shape
    np.testing.assert_array_equal(ours_values.view(np.uint16), values)
    np.testing.assert_array_equal(ours_metadata, metadata)


@pytest.mark.parametrize("tag", CASES)
def test_decode_reads_cutlass_compressor_output(tag):
    dense, values, metadata, _ = _case(tag)
    back = sm90_layout.decode(values.view(dense.dtype), metadata, dense.shape, sm90_layout.STORED_ATOM_K,
                              dense.dtype)
    np.testing.assert_array_equal(back.view(np.uint16), dense.view(np.uint16))


@pytest.mark.parametrize("atom_k", sm90_layout.ATOMS_K)
def test_decode_of_the_other_atom(atom_k):
    dense, values, metadata, _ = _case(CASES[0])
    m, k = dense.shape
    relaid = np.zeros(sm90_layout.metadata_bytes(m, k, atom_k), dtype=np.uint8)
    rows, groups = np.arange(-(-m // 64) * 64)[:, None], np.arange(-(-k // 16) * 2)[None, :]
    relaid[sm90_layout.byte_index(rows, groups, m, atom_k)] = \
        metadata[sm90_layout.byte_index(rows, groups, m, sm90_layout.STORED_ATOM_K)]
    back = sm90_layout.decode(values.view(dense.dtype), relaid, dense.shape, atom_k, dense.dtype)
    np.testing.assert_array_equal(back.view(np.uint16), dense.view(np.uint16))


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_host_matrix_compresses_for_sm90_and_converts(dtype):
    rng = np.random.default_rng(5)
    dense = cs.prune_2to4(rng.standard_normal((150, 208)).astype(dtype))
    sw = cs.compress(dense, layout="sm90")
    assert sw.layout == "sm90" and not sw.is_device and sw.atom_k == sm90_layout.STORED_ATOM_K
    np.testing.assert_array_equal(sw.to_dense().view(np.uint16), dense.view(np.uint16))
    sw80 = sw.to_layout("sm80")
    direct = cs.compress(dense, layout="sm80")
    np.testing.assert_array_equal(sw80.values.view(np.uint16), direct.values.view(np.uint16))
    np.testing.assert_array_equal(sw80.metadata, direct.metadata)
    again = sw80.to_layout("sm90")
    np.testing.assert_array_equal(again.values.view(np.uint16), sw.values.view(np.uint16))
    np.testing.assert_array_equal(again.metadata, sw.metadata)


def test_sm90_encode_refuses_what_the_layout_cannot_hold():
    with pytest.raises(ValueError, match="row 3, columns 4..7 hold 3 non-zeros"):
        bad = np.zeros((8, 16), dtype=np.float16)
        bad[3, 4:7] = 1
        cs.compress(bad, layout="sm90")
    with pytest.raises(ValueError, match="K = 40: the sm90 layout needs K a multiple of 16"):
        cs.compress(np.zeros((8, 40), dtype=np.float16), layout="sm90")
    with pytest.raises(TypeError, match="16-bit"):
        sm90_layout.encode(np.zeros((8, 16), dtype=np.int8), "s8")


@pytest.mark.gpu
@pytest.mark.parametrize("tag", CASES)
def test_cupy_kernels_match_the_recorded_layout(tag):
    # On a GPU, encode and decode run as one CuPy kernel each: the same bytes.
    import cupy

    dense, values, metadata, element = _case(tag)
    ours_values, ours_metadata = sm90_layout.encode(cupy.asarray(dense), element)
    np.testing.assert_array_equal(ours_values.get().view(np.uint16), values)
    np.testing.assert_array_equal(ours_metadata.get(), metadata)
    for atom_k in sm90_layout.ATOMS_K:   # the other atom via the conversion the kernels of tile K 64 use
        relaid = sm90_layout.convert(ours_metadata, *dense.shape, sm90_layout.STORED_ATOM_K, atom_k)
        back = sm90_layout.decode(ours_values, relaid, dense.shape, atom_k, dense.dtype)
        np.testing.assert_array_equal(back.get().view(np.uint16), dense.view(np.uint16))


@pytest.mark.gpu
def test_cupy_encode_names_the_group_that_breaks_2_to_4():
    import cupy

    bad = np.zeros((70, 32), dtype=np.float16)
    bad[65, 20:23] = 1
    with pytest.raises(ValueError, match="row 65, columns 20..23 hold 3 non-zeros"):
        cs.compress(cupy.asarray(bad), layout="sm90")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("m, k", [(1, 16), (65, 48), (300, 1040)])
def test_cupy_kernels_match_the_host_form(m, k, dtype):
    # fresh matrices with -0.0, one and no non-zero per group: the GPU form equals the host's
    import cupy

    rng = np.random.default_rng(m + k)
    dense = rng.standard_normal((m, k)).astype(np.float32)
    dense[rng.random((m, k)) < 0.4] = 0.0
    dense = cs.prune_2to4(dense.astype(dtype))
    bits = dense.view(np.uint16)
    bits[(bits == 0) & (rng.random((m, k)) < 0.5)] = 0x8000
    element = "f16" if dtype is np.float16 else "bf16"
    host_values, host_metadata = sm90_layout.encode(dense, element)
    values, metadata = sm90_layout.encode(cupy.asarray(dense), element)
    np.testing.assert_array_equal(values.get().view(np.uint16), host_values.view(np.uint16))
    np.testing.assert_array_equal(metadata.get(), host_metadata)
    back = sm90_layout.decode(values, metadata, (m, k), sm90_layout.STORED_ATOM_K, dense.dtype).get()
    host_back = sm90_layout.decode(host_values, host_metadata, (m, k), sm90_layout.STORED_ATOM_K, dense.dtype)
    np.testing.assert_array_equal(back.view(np.uint16), host_back.view(np.uint16))
