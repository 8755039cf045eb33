"""fp8 (e4m3) quantization with scales, for quantized 2:4 weights and activations (issue 15).

`quantize_e4m3(values, axis)` returns the e4m3 bytes and the float32 scales such that
values ~= decode(bytes) * scales, one scale per row (axis=1: a weight's output features),
per column (axis=0) or for the whole tensor (axis=None). Each scale maps the largest
magnitude of its slice onto e4m3's largest finite value (448), so nothing saturates; an
all-zero slice gets scale 1. Rounding is ml_dtypes' (to nearest even) on the host: a
weight is quantized once, so CuPy input is copied there and back.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..describe import dtypes

E4M3_MAX = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max)   # 448


def quantize_e4m3(values, axis: int | None = 1):
    """(e4m3 values as uint8 bytes, float32 scales) of a float array [M, K] (numpy or cupy,
    returned in kind). scales: [M, 1] for axis=1, [1, K] for axis=0, [] for axis=None."""
    xp = dtypes.array_module(values)
    host = np.asarray(values.get() if xp is not np else values, dtype=np.float32)
    if host.ndim != 2:
        raise ValueError(f"values must be a 2-D [M, K] array, got shape {host.shape}")
    if axis not in (0, 1, None):
        raise ValueError(f"axis must be 0 (per column), 1 (per row) or None (per tensor), got {axis!r}")
    if not np.isfinite(host).all():
        raise ValueError("values must be finite to quantize (NaN or inf found)")
    amax = np.abs(host).max(axis=axis, keepdims=axis is not None)
    scales = np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)
    quantized = (host / scales).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    return (xp.asarray(quantized), xp.asarray(scales)) if xp is not np else (quantized, scales)


def decode_e4m3(quantized, scales=1.0):
    """float32 values of e4m3 bytes (uint8, numpy or cupy) times their scales: the
    dequantized operand a reference multiplies."""
    xp = dtypes.array_module(quantized)
    table = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return xp.asarray(table)[quantized] * scales
