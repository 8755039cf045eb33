"""Compression: round trip, the not-2:4 error, and the metadata layout against an
independent derivation (a literal port of CUTLASS's reorder_meta loop and the
ColumnMajorInterleaved<2> offset function, with the nibble code written out as a table)."""
import ml_dtypes
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.formats.matrices import SparseMatrix

DTYPES = [np.float16, ml_dtypes.bfloat16]

# mma.sp 2:4 metadata nibble for the kept pair of indices: low 2 bits = first index,
# high 2 bits = second (PTX ISA, sparse mma metadata; also PyTorch's CUTLASS path).
NIBBLE = {(0, 1): 0b0100, (0, 2): 0b1000, (1, 2): 0b1001, (0, 3): 0b1100, (1, 3): 0b1101, (2, 3): 0b1110}


def random_2to4(rng, m, k, dtype, exact_two=True):
    """A 2:4 matrix built by choosing positions directly (not with prune_2to4)."""
    dense = np.zeros((m, k), dtype=np.float32)
    for r in range(m):
        for g in range(0, k - k % 4, 4):
            keep = rng.choice(4, size=2 if exact_two else rng.integers(0, 3), replace=False)
            dense[r, g + keep] = rng.uniform(0.5, 2.0, size=len(keep)) * rng.choice([-1, 1], size=len(keep))
    return dense.astype(dtype)


def reference_reorder(words: np.ndarray, m_pad: int) -> np.ndarray:
    """CUTLASS tools/util/include/cutlass/util/host_reorder.h reorder_meta, 16-bit words,
    written into ColumnMajorInterleaved<2> (layout/matrix.h) with ldm = 2 * rows."""
    rows, cols = words.shape
    out = np.zeros(rows * cols, dtype=np.uint16)
    for m in range(rows):
        for k in range(cols):
            group, interweave = 32, 4
            dest_row = m // group * group + (m % 8) * interweave + (m % group) // 8
            dest_col = k
            if dest_row % 2 == 0 and dest_col % 2 == 1:
                dest_row += 1
                dest_col -= 1
            elif dest_row % 2 == 1 and dest_col % 2 == 0:
                dest_row -= 1
                dest_col += 1
            offset = (dest_col // 2) * (2 * m_pad) + dest_row * 2 + dest_col % 2
            out[offset] = words[m, k]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(32, 128), (64, 256), (50, 70), (1, 16), (96, 384)])
def test_metadata_matches_cutlass_reorder(dtype, shape):
    rng = np.random.default_rng(1)
    dense = random_2to4(rng, *shape, dtype)
    sw = cs.compress(dense)
    m_pad, k_pad = sw.padded_shape
    padded = np.zeros((m_pad, k_pad), dtype=np.float32)
    padded[:shape[0], :shape[1]] = dense.astype(np.float32)
    # Plain metadata words from the table, then the independent reorder.
    words = np.zeros((m_pad, k_pad // 16), dtype=np.uint16)
    values = np.zeros((m_pad, k_pad // 2), dtype=np.float32)
    for r in range(m_pad):
        for g in range(k_pad // 4):
            nz = tuple(int(i) for i in np.flatnonzero(padded[r, 4 * g:4 * g + 4]))
            pair = nz if len(nz) == 2 else (0, 1)   # all-zero groups (padding) in this test
            words[r, g // 4] |= NIBBLE[pair] << (4 * (g % 4))
            values[r, 2 * g:2 * g + 2] = padded[r, 4 * g + np.array(pair)]
    np.testing.assert_array_equal(sw.metadata.reshape(-1), reference_reorder(words, m_pad))
    np.testing.assert_array_equal(sw.values.astype(np.float32), values)
    assert sw.metadata_ld == 2 * m_pad


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_and_partial_groups(dtype):
    rng = np.random.default_rng(2)
    dense = random_2to4(rng, 45, 100, dtype, exact_two=False)   # groups with 0, 1 or 2 non-zeros
    sw = cs.compress(dense)
    back = sw.to_dense()
    assert back.dtype == dense.dtype and back.shape == dense.shape
    np.testing.assert_array_equal(back.view(np.uint16), dense.view(np.uint16))
    # Every stored nibble is a valid ascending pair, padding included.
    words = sw.plain_metadata()
    nibbles = (words[..., None] >> (4 * np.arange(4))) & 0xF
    assert set(np.unique(nibbles).tolist()) <= set(NIBBLE.values())


def test_not_2to4_names_row_and_group():
    dense = np.zeros((8, 16), dtype=np.float16)
    dense[5, 8:11] = 1.0
    with pytest.raises(ValueError, match=r"row 5, columns 8\.\.11 hold 3 non-zeros"):
        cs.compress(dense)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prune_keeps_two_largest_magnitudes(dtype):
    w = np.array([[1, -5, 3, 0.5, 0, 0, 0, 2, 4, 4, 4, 4]], dtype=np.float32).astype(dtype)
    pruned = cs.prune_2to4(w).astype(np.float32)
    np.testing.assert_array_equal(pruned, [[0, -5, 3, 0, 0, 0, 0, 2, 4, 4, 0, 0]])
    rng = np.random.default_rng(3)
    big = rng.standard_normal((33, 70)).astype(dtype)
    pruned = cs.prune_2to4(big)
    cs.compress(pruned)  # is 2:4
    groups = np.abs(np.pad(big.astype(np.float32), ((0, 0), (0, 2))).reshape(33, -1, 4))
    kept = np.pad(pruned.astype(np.float32), ((0, 0), (0, 2))).reshape(33, -1, 4) != 0
    smallest_kept = np.where(kept, groups, np.inf).min(-1)
    largest_dropped = np.where(~kept, groups, -np.inf).max(-1)
    assert (smallest_kept >= largest_dropped).all()


def test_bad_inputs_to_compress():
    with pytest.raises(TypeError, match="float16, bfloat16"):
        cs.compress(np.zeros((4, 8), dtype=np.float64))
    with pytest.raises(ValueError, match="2-D"):
        cs.compress(np.zeros(8, dtype=np.float16))
    with pytest.raises(TypeError, match="numpy or cupy array"):
        cs.compress([[1.0, 0.0]])
    with pytest.raises(ValueError, match="K = 8: the sm90 layout needs K a multiple of 16"):
        cs.compress(np.zeros((4, 8), dtype=np.float16), layout="sm90")
    with pytest.raises(ValueError, match="layout 'sm70' must be one of"):
        cs.compress(np.zeros((4, 8), dtype=np.float16), layout="sm70")


def test_sparse_matrix_records_its_layout():
    sw = cs.compress(np.zeros((4, 8), dtype=np.float16))
    assert isinstance(sw, SparseMatrix) and sw.layout == "sm80" and not sw.is_device
    assert sw.shape == (4, 8) and sw.padded_shape == (32, 128)


def test_from_float32_rounds_like_ml_dtypes():
    from cutlass_sparse.describe import dtypes

    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 1e3,
                        np.array([0.0, -0.0, 1.0, 65504.0, 1e-8, np.inf, -np.inf], np.float32)])
    got = dtypes.from_float32(x, dtypes.bfloat16)
    np.testing.assert_array_equal(got.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(dtypes.from_float32(x, np.float16), x.astype(np.float16))


def reference_reorder_any(words: np.ndarray, m_pad: int) -> np.ndarray:
    """reorder_meta for any word size (group 32 / interweave 4 for 16-bit words, 16 / 2
    otherwise), into ColumnMajorInterleaved<2> with ldm = 2 * rows."""
    rows, cols = words.shape
    group, interweave = (32, 4) if words.dtype.itemsize == 2 else (16, 2)
    out = np.zeros(rows * cols, dtype=words.dtype)
    for m in range(rows):
        for k in range(cols):
            dest_row = m // group * group + (m % 8) * interweave + (m % group) // 8
            dest_col = k
            if dest_row % 2 == 0 and dest_col % 2 == 1:
                dest_row, dest_col = dest_row + 1, dest_col - 1
            elif dest_row % 2 == 1 and dest_col % 2 == 0:
                dest_row, dest_col = dest_row - 1, dest_col + 1
            out[(dest_col // 2) * (2 * m_pad) + dest_row * 2 + dest_col % 2] = words[m, k]
    return out


def cutlass_uncompress(values: np.ndarray, words: np.ndarray, bits: int) -> np.ndarray:
    """A literal port of CUTLASS tools/util/include/cutlass/util/host_uncompress.h
    `uncompress` for 8- and 16-bit elements (2:4: step 4, a 2, b 4)."""
    rows = values.shape[0]
    per_word = 256 // bits
    cols = words.shape[1] * per_word
    out = np.zeros((rows, cols), dtype=values.dtype)
    step, a, b = 4, 2, 4
    for r in range(rows):
        for c in range(cols // per_word):
            meta = int(words[r, c])
            for i in range(0, per_word, step):
                e = (meta >> (i // step * 4)) & 0xF
                idx0, idx1 = e & 0x3, e >> 2
                for ii in range(step):
                    real_col = c * per_word + i + ii
                    compressed_col = (real_col // b) * a
                    if ii == idx0:
                        out[r, real_col] = values[r, compressed_col]
                    elif ii == idx1:
                        out[r, real_col] = values[r, compressed_col + 1]
    return out


@pytest.mark.parametrize("dtype,shape", [(np.int8, (32, 128)), (np.int8, (50, 200)), (np.float16, (40, 96))])
def test_layout_against_cutlass_uncompress_and_reorder(dtype, shape):
    rng = np.random.default_rng(7)
    if dtype == np.int8:
        dense = random_2to4(rng, *shape, np.float32, exact_two=False)
        dense = (np.sign(dense) * rng.integers(1, 128, size=dense.shape) * (dense != 0)).astype(np.int8)
    else:
        dense = random_2to4(rng, *shape, dtype, exact_two=False)
    sw = cs.compress(dense, layout="sm80")
    m_pad, k_pad = sw.padded_shape
    plain = sw.plain_metadata().reshape(m_pad, -1)
    assert plain.dtype == (np.uint32 if dtype == np.int8 else np.uint16)
    np.testing.assert_array_equal(sw.metadata.reshape(-1), reference_reorder_any(plain, m_pad))
    bits = np.dtype(dtype).itemsize * 8
    back = cutlass_uncompress(sw.values, plain, bits)
    expected = np.zeros((m_pad, k_pad), dtype=dtype)
    expected[:shape[0], :shape[1]] = dense
    np.testing.assert_array_equal(back, expected)
    np.testing.assert_array_equal(sw.to_dense(), dense)


def test_int8_prune_and_not_2to4_error():
    dense = np.array([[-128, 5, -7, 3, 0, 0, 0, 1]], dtype=np.int8)
    pruned = cs.prune_2to4(dense)
    np.testing.assert_array_equal(pruned, [[-128, 0, -7, 0, 0, 0, 0, 1]])
    with pytest.raises(ValueError, match="row 0, columns 0..3 hold 4 non-zeros"):
        cs.compress(dense, layout="sm80")
    with pytest.raises(TypeError, match="layout 'sm90' takes fp16/bf16"):
        cs.compress(pruned, layout="sm90")


def test_tf32_is_one_of_two_with_half_pair_nibbles():
    rng = np.random.default_rng(9)
    dense = rng.standard_normal((40, 72)).astype(np.float32)
    pruned = cs.prune_2to4(dense)
    pairs = pruned.reshape(40, 36, 2)
    assert ((pairs != 0).sum(axis=-1) <= 1).all()
    np.testing.assert_array_equal(np.abs(pairs).max(axis=-1), np.abs(dense.reshape(40, 36, 2)).max(axis=-1))
    pruned[3, 10] = 0.0                  # an empty pair compresses too
    pruned[3, 11] = 0.0
    sw = cs.compress(pruned, layout="sm80")
    assert sw.element == "tf32" and sw.metadata.dtype == np.uint16 and sw.values.dtype == np.float32
    plain = sw.plain_metadata().reshape(sw.padded_shape[0], -1)
    nibbles = (plain[..., None].astype(np.int64) >> (4 * np.arange(4))) & 0xF
    assert set(np.unique(nibbles).tolist()) <= {0x4, 0xE}
    # The tf32 nibble names 16-bit halves: CUTLASS's uncompress, run on the uint16 view
    # (each float is two halves), must give back the matrix.
    m_pad, k_pad = sw.padded_shape
    back = cutlass_uncompress(sw.values.view(np.uint16), plain, 16).view(np.float32)
    expected = np.zeros((m_pad, k_pad), dtype=np.float32)
    expected[:40, :72] = pruned
    np.testing.assert_array_equal(back, expected)
    np.testing.assert_array_equal(sw.to_dense(), pruned)
    np.testing.assert_array_equal(sw.metadata.reshape(-1), reference_reorder_any(plain, m_pad))
    with pytest.raises(ValueError, match="not 1:2 sparse: row 0, columns 0..1 hold 2 non-zeros"):
        cs.compress(dense, layout="sm80")


def test_a_batch_compresses_matrix_by_matrix_into_stacked_arrays():
    rng = np.random.default_rng(11)
    dense = cs.prune_2to4(rng.standard_normal((3, 40, 72)).astype(np.float16))
    batch = cs.compress(dense)
    assert batch.batch == 3 and batch.shape == (40, 72) and batch.layout == "sm80"
    for i in range(3):
        one = cs.compress(dense[i])
        np.testing.assert_array_equal(batch.values[i], one.values)
        np.testing.assert_array_equal(batch.metadata[i], one.metadata)
    np.testing.assert_array_equal(batch.to_dense(), dense)
    assert batch.padded_shape == (64, 128) and batch.metadata_ld == 128
    bad = dense.copy()
    bad[2, 5, :4] = 1
    with pytest.raises(ValueError, match="matrix 2 of the batch: dense is not 2:4 sparse: row 5"):
        cs.compress(bad)
    with pytest.raises(ValueError, match="compresses for layout 'sm80'"):
        cs.compress(dense, layout="sm90")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, "bf16"])
@pytest.mark.parametrize("m, k", [(1, 1), (33, 70), (100, 300), (256, 1024)])
def test_sm80_encode_on_the_gpu_matches_the_host(m, k, dtype):
    # 16-bit cupy matrices encode in one CuPy kernel; the host form is the reference.
    import cupy

    from cutlass_sparse.describe import dtypes as dt
    from cutlass_sparse.formats import sm80_layout

    np_dtype = dt.numpy_dtype(dtype) if isinstance(dtype, str) else dtype
    dense = np.random.default_rng(m * k).standard_normal((m, k)).astype(np.float32)
    dense[np.random.default_rng(k).random((m, k)) < 0.4] = 0.0
    dense = cs.prune_2to4(dense.astype(np_dtype))
    bits = dense.view(np.uint16)       # some zeros negative: -0.0 counts as zero in both forms
    bits[(bits == 0) & (np.random.default_rng(m).random((m, k)) < 0.5)] = 0x8000
    element = dt.operand_name(np_dtype)
    host_values, host_metadata = sm80_layout.encode(dense, element)
    values, metadata = sm80_layout.encode(cupy.asarray(dense), element)
    assert values.dtype == host_values.dtype and metadata.shape == host_metadata.shape
    np.testing.assert_array_equal(values.get().view(np.uint16), host_values.view(np.uint16))
    np.testing.assert_array_equal(metadata.get(), host_metadata)
    if k >= 3:
        bad = dense.copy()
        bad[m - 1, :4] = np.array([1, 1, 1, 0], dtype=np.float32).astype(np_dtype)
        with pytest.raises(ValueError, match=f"row {m - 1}, columns 0..3 hold 3 non-zeros"):
            cs.compress(cupy.asarray(bad), layout="sm80")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, "bf16"])
@pytest.mark.parametrize("m, k", [(1, 1), (7, 13), (64, 256), (300, 1001)])
def test_prune_on_the_gpu_matches_the_host(m, k, dtype):
    # fp16/bf16 cupy matrices prune in one CuPy kernel: the same bits as the host form,
    # NaNs, infinities, -0.0 and ties included
    import cupy

    from cutlass_sparse.describe import dtypes as dt

    np_dtype = dt.numpy_dtype(dtype) if isinstance(dtype, str) else dtype
    rng = np.random.default_rng(m * 7 + k)
    dense = np.round(rng.standard_normal((m, k)) * 2).astype(np.float32)     # many ties
    specials = rng.random((m, k))
    dense[specials < 0.05] = np.nan
    dense[(specials >= 0.05) & (specials < 0.1)] = -np.inf
    dense[(specials >= 0.1) & (specials < 0.2)] = -0.0
    dense = dense.astype(np_dtype)
    host = cs.prune_2to4(dense)
    gpu = cs.prune_2to4(cupy.asarray(dense)).get()
    np.testing.assert_array_equal(gpu.view(np.uint16), host.view(np.uint16))
