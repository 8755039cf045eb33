"""fp8 (e4m3) quantization with scales, on the host: the round trip is within e4m3's
precision (3 mantissa bits: a relative rounding error of at most 2^-4, normal range),
scales follow the slice's largest magnitude, and bad input is refused by name."""
import ml_dtypes
import numpy as np
import pytest

from cutlass_sparse.formats.quantize import E4M3_MAX, decode_e4m3, quantize_e4m3


@pytest.mark.parametrize("axis, scale_shape", [(1, (64, 1)), (0, (1, 96)), (None, ())])
def test_round_trip_is_within_e4m3_precision(axis, scale_shape):
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((64, 96)) * rng.uniform(0.01, 100, (64, 1))).astype(np.float32)
    quantized, scales = quantize_e4m3(values, axis)
    assert quantized.dtype == np.uint8 and scales.shape == scale_shape and scales.dtype == np.float32
    back = decode_e4m3(quantized, scales)
    # normal e4m3 values (>= 2^-6 after scaling) round to within 2^-4 of themselves
    normal = np.abs(values / scales) >= 2.0 ** -6
    assert normal.mean() > 0.9
    np.testing.assert_array_less(np.abs(back - values)[normal], (2.0 ** -4) * np.abs(values)[normal] + 1e-30)
    # the largest magnitude of each slice maps onto e4m3's largest finite value exactly
    assert np.abs(decode_e4m3(quantized)).max() == E4M3_MAX == 448.0


def test_zero_rows_get_scale_one_and_stay_zero():
    values = np.zeros((3, 16), dtype=np.float32)
    values[1] = np.linspace(-1, 1, 16)
    quantized, scales = quantize_e4m3(values, axis=1)
    assert scales[0, 0] == scales[2, 0] == 1.0
    assert not decode_e4m3(quantized[[0, 2]]).any()


def test_bytes_are_ml_dtypes_e4m3():
    quantized, _ = quantize_e4m3(np.array([[448.0, -1.0, 0.5]], dtype=np.float32), axis=None)
    np.testing.assert_array_equal(quantized.view(ml_dtypes.float8_e4m3fn).astype(np.float32), [[448, -1, 0.5]])


@pytest.mark.parametrize("values, axis, match", [
    (np.ones(4, dtype=np.float32), 1, "2-D"),
    (np.ones((2, 2), dtype=np.float32), 2, "axis must be"),
    (np.array([[1.0, np.nan]], dtype=np.float32), 1, "finite"),
])
def test_bad_input_is_refused(values, axis, match):
    with pytest.raises(ValueError, match=match):
        quantize_e4m3(values, axis)


def test_int8_round_trip_is_within_half_a_step():
    """Symmetric int8: each slice's largest magnitude maps onto 127, the rest round to the
    nearest step, so the round trip is within half a step (scale / 2) of every value."""
    from cutlass_sparse.formats.quantize import decode, quantize

    rng = np.random.default_rng(1)
    values = (rng.standard_normal((32, 80)) * rng.uniform(0.01, 100, (32, 1))).astype(np.float32)
    quantized, scales = quantize(values, "s8", axis=1)
    assert quantized.dtype == np.int8 and scales.shape == (32, 1)
    assert np.abs(quantized.astype(np.int32)).max(axis=1).tolist() == [127] * 32
    assert quantized.min() >= -127   # symmetric: -128 is never used
    back = decode(quantized, "s8", scales)
    assert (np.abs(back - values) <= scales * (0.5 + 1e-5)).all()


def test_unknown_element_is_refused():
    from cutlass_sparse.formats.quantize import quantize

    with pytest.raises(ValueError, match="element 'e3m4' must be one of"):
        quantize(np.ones((2, 2), dtype=np.float32), "e3m4")


def test_e5m2_round_trip_is_within_its_precision():
    """e5m2 (activations beside an e4m3 weight): 2 mantissa bits, a relative rounding error
    of at most 2^-3 in the normal range; the largest magnitude maps onto 57344."""
    from cutlass_sparse.formats.quantize import E5M2_MAX, decode, quantize

    rng = np.random.default_rng(2)
    values = (rng.standard_normal((16, 64)) * rng.uniform(0.01, 100, (16, 1))).astype(np.float32)
    quantized, scales = quantize(values, "e5m2", axis=1)
    assert quantized.dtype == np.uint8 and scales.shape == (16, 1)
    back = decode(quantized, "e5m2", scales)
    normal = np.abs(values / scales) >= 2.0 ** -14
    np.testing.assert_array_less(np.abs(back - values)[normal], (2.0 ** -3) * np.abs(values)[normal] + 1e-30)
    assert np.abs(decode(quantized, "e5m2")).max() == E5M2_MAX == 57344.0
    np.testing.assert_array_equal(quantized.view(ml_dtypes.float8_e5m2).astype(np.float32),
                                  decode(quantized, "e5m2"))
