"""8-bit quantization with scales, for quantized 2:4 weights and activations (issue 15).

`quantize(values, element, axis)` returns the 8-bit values and the float32 scales such
that values ~= decode(quantized) * scales, one scale per row (axis=1: a weight's output
features), per column (axis=0) or for the whole tensor (axis=None). Each scale maps the
largest magnitude of its slice onto the type's largest value (e4m3: 448; e5m2: 57344;
int8: 127, symmetric, so -128 is never used), so nothing saturates; an all-zero slice
gets scale 1. Rounding is to nearest even on the host (ml_dtypes' for the fp8 types): a
weight is quantized once, so CuPy input is copied there and back. fp8 travels as uint8
bytes. e5m2 (two mantissa bits, a wider range) is for activations beside an e4m3 weight.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..describe import dtypes

E4M3_MAX = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)   # 448
E5M2_MAX = float(ml_dtypes.finfo(ml_dtypes.float8_e5m2).max)     # 57344
INT8_MAX = 127.0
LARGEST = {"e4m3": E4M3_MAX, "e5m2": E5M2_MAX, "s8": INT8_MAX}
_FP8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def quantize(values, element: str = "e4m3", axis: int | None = 1):
    """(8-bit values, float32 scales) of a float array [M, K] (numpy or cupy, returned in
    kind): fp8 (e4m3, e5m2) as uint8 bytes, s8 as int8. scales: [M, 1] for axis=1, [1, K] for axis=0,
    [] for axis=None."""
    if element not in LARGEST:
        raise ValueError(f"element {element!r} must be one of {tuple(LARGEST)}")
    xp = dtypes.array_module(values)
    host = np.asarray(values.get() if xp is not np else values, dtype=np.float32)
    if host.ndim != 2:
        raise ValueError(f"values must be a 2-D [M, K] array, got shape {host.shape}")
    if axis not in (0, 1, None):
        raise ValueError(f"axis must be 0 (per column), 1 (per row) or None (per tensor), got {axis!r}")
    if not np.isfinite(host).all():
        raise ValueError("values must be finite to quantize (NaN or inf found)")
    amax = np.abs(host).max(axis=axis, keepdims=axis is not None)
    scales = np.where(amax > 0, amax / LARGEST[element], 1.0).astype(np.float32)
    scaled = host / scales
    if element == "s8":
        quantized = np.clip(np.rint(scaled), -INT8_MAX, INT8_MAX).astype(np.int8)
    else:
        quantized = scaled.astype(_FP8[element]).view(np.uint8)
    return (xp.asarray(quantized), xp.asarray(scales)) if xp is not np else (quantized, scales)


def decode(quantized, element: str = "e4m3", scales=1.0):
    """float32 values of 8-bit data (fp8 uint8 bytes or int8, numpy or cupy) times their
    scales: the dequantized operand a reference multiplies."""
    xp = dtypes.array_module(quantized)
    if element == "s8":
        return quantized.astype(xp.float32) * scales
    table = np.arange(256, dtype=np.uint8).view(_FP8[element]).astype(np.float32)
    return xp.asarray(table)[quantized] * scales


def quantize_e4m3(values, axis: int | None = 1):
    """quantize(values, "e4m3", axis)."""
    return quantize(values, "e4m3", axis)


def decode_e4m3(quantized, scales=1.0):
    """decode(quantized, "e4m3", scales)."""
    return decode(quantized, "e4m3", scales)
