"""fp8 (e4m3) 2:4 weights on Hopper (issue 15): quantize a weight with one scale per
output feature and compress it; quantize activations with one scale per token; a Linear
layer whose kernel applies both scales in its epilogue:

    sw = cs.quantize_fp8(w)                        # w [features, K], 2:4; sw.scales [features]
    xq, x_scales = cs.quantize_activations_fp8(x)  # x [tokens, K] -> e4m3 bytes, scales [tokens]
    y = cs.linear_fp8(xq, x_scales, sw)            # [tokens, features] bf16 = act(x @ w.T)

Checked on the H100 against the dequantized operands' product (tests/test_gpu_fp8.py,
scripts/device/sweep_fp8.py). The kernels accumulate with CUTLASS's fp8 fast-accumulation
schedules (catalog sm90_fp8). e4m3 data travels as uint8 bytes (or torch.float8_e4m3fn tensors); CuPy input
is quantized on the host (ml_dtypes' rounding), torch input on the GPU with torch's cast.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..describe import dtypes
from ..describe.problem import Epilogue, Problem
from ..formats.matrices import SparseMatrix
from ..formats.patterns import LAYOUT_SM90
from ..formats.quantize import E4M3_MAX, quantize_e4m3
from ..launch import device, sm90_compress
from ..plan import plans
from . import operands
from .interop import is_torch, to_array, torch_stream

OUT_DTYPES = ("bf16", "f16", "f32")


def _bytes(x, what: str):
    """A CuPy uint8 view of e4m3 data: uint8 arrays, or torch float8_e4m3fn / uint8 tensors."""
    if is_torch(x):
        import torch

        if x.dtype not in (torch.float8_e4m3fn, torch.uint8):
            raise TypeError(f"{what} must be torch.float8_e4m3fn (or its uint8 bytes), got {x.dtype}")
        return to_array(x.view(torch.uint8))
    array = operands.as_device_array(x, what)
    if array.dtype not in (np.uint8, dtypes.float8_e4m3):
        raise TypeError(f"{what} must hold e4m3 bytes (uint8 or ml_dtypes.float8_e4m3fn), got {array.dtype}")
    return array.view(np.uint8)


def quantize_fp8(w) -> SparseMatrix:
    """A 2:4 weight [features, K] (fp16, bf16 or fp32; CuPy or torch, on the GPU) quantized
    to e4m3 with one float32 scale per row (sw.scales, [features]) and compressed for the
    sm90 kernels."""
    import cupy

    array = to_array(w) if is_torch(w) else operands.as_device_array(w, "w")
    if array.ndim != 2 or array.dtype.kind not in "fV":
        raise ValueError(f"w must be a 2-D floating-point [features, K] array, got {array.dtype} {tuple(array.shape)}")
    m, k = array.shape
    if k % 16:
        raise ValueError(f"w has K = {k}: the sm90 layout needs K a multiple of 16")
    values = dtypes.to_float32(array)
    if int((values.reshape(m, k // 4, 4) != 0).sum(axis=-1).max()) > 2:
        raise ValueError("w is not 2:4 sparse (more than two nonzeros in a group of four along K): "
                         "prune it first (cs.prune_2to4)")
    quantized, scales = quantize_e4m3(values, axis=1)
    kept, metadata = sm90_compress.compress(cupy.ascontiguousarray(quantized), "e4m3", 128)
    return SparseMatrix((m, k), dtypes.float8_e4m3, kept, metadata, LAYOUT_SM90, 128,
                        scales=cupy.ascontiguousarray(scales.ravel()))


def quantize_activations_fp8(x):
    """(e4m3 bytes [tokens, K], float32 scales [tokens]) of activations x [tokens, K]: one
    scale per token, its largest magnitude onto e4m3's largest value. torch tensors stay
    on the GPU (torch's cast) and come back as (float8_e4m3fn, float32) tensors."""
    if is_torch(x):
        import torch

        if x.dim() != 2:
            raise ValueError(f"x must be 2-D [tokens, K], got shape {tuple(x.shape)}")
        amax = x.abs().amax(dim=1, keepdim=True).float()
        scales = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        return (x.float() / scales).to(torch.float8_e4m3fn).contiguous(), scales.reshape(-1).contiguous()
    array = operands.as_device_array(x, "x")
    if array.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, K], got shape {tuple(array.shape)}")
    values = dtypes.to_float32(array)
    quantized, scales = quantize_e4m3(values, axis=1)
    return quantized, scales.ravel()


def linear_fp8(xq, x_scales, sw: SparseMatrix, *, activation: str = "identity", out_dtype: str = "bf16", out=None,
               info: dict | None = None):
    """activation(dequant(xq) @ dequant(sw).T): [tokens, features] of out_dtype, one launch.

    xq: e4m3 bytes [tokens, K], row-major (cs.quantize_activations_fp8); x_scales: float32
    [tokens]; sw: from cs.quantize_fp8. The kernel computes D = act(s_w[f] * s_x[t] * acc)
    as [features, tokens] column-major, which is the [tokens, features] result in place.
    out: a contiguous [tokens, features] array of out_dtype to write (else one is made).
    Runs on torch's current stream for torch input (torch out), else CuPy's. `info`, if a
    dict, receives the kernel's name."""
    import cupy

    if not isinstance(sw, SparseMatrix) or sw.element != "e4m3" or sw.scales is None:
        raise TypeError("sw must be an fp8 SparseMatrix from cs.quantize_fp8")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype {out_dtype!r} must be one of {OUT_DTYPES}")
    torch_in = is_torch(xq)
    x = _bytes(xq, "xq")
    scales = to_array(x_scales) if is_torch(x_scales) else operands.as_device_array(x_scales, "x_scales")
    m, k = sw.shape
    if x.ndim != 2 or x.shape[1] != k or x.strides != (k, 1):
        raise ValueError(f"xq must be a contiguous [tokens, {k}] array, got shape {tuple(x.shape)}, "
                         f"strides {x.strides}")
    n = x.shape[0]
    if scales.shape != (n,) or scales.dtype != np.float32 or scales.strides != (4,):
        raise ValueError(f"x_scales must be a contiguous float32 [{n}] array (one per token), "
                         f"got {scales.dtype} {tuple(scales.shape)}")
    device_id = x.device.id
    arch, sm_count = device.facts(device_id)
    problem = Problem.contiguous("sm90", m, n, k, element="e4m3", element_out=out_dtype, layout_b="col",
                                 arch=arch, sm_count=sm_count, device_id=device_id, out_layout="col")
    problem = dataclasses.replace(problem, epilogue=Epilogue(activation=activation, scales="row_col"))
    plan = plans.get(problem)
    if not plan.direct:
        raise ValueError(f"linear_fp8 runs in place only for now: K ({k}) a multiple of 16 and features ({m}) "
                         f"a multiple of {16 // dtypes.numpy_dtype(out_dtype).itemsize}")
    if info is not None:
        info["config"] = plan.config.name
    if out is not None:
        y, d = out, (to_array(out) if is_torch(out) else operands.as_device_array(out, "out"))
        item = dtypes.numpy_dtype(out_dtype).itemsize
        if d.shape != (n, m) or d.dtype != dtypes.numpy_dtype(out_dtype) or d.strides != (m * item, item):
            raise ValueError(f"out must be a contiguous [{n}, {m}] {out_dtype} array, got {d.dtype} "
                             f"{tuple(d.shape)} with strides {d.strides}")
        d_ptr = d.data.ptr
    elif torch_in:
        import torch

        y = torch.empty((n, m), dtype={"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[out_dtype],
                        device=xq.device)
        d_ptr = y.data_ptr()
    else:
        y = cupy.empty((n, m), dtype=dtypes.numpy_dtype(out_dtype))
        d_ptr = y.data.ptr
    stream = torch_stream(device_id) if torch_in else None
    plan.launch_direct(sw, x.data.ptr, d_ptr, stream, scales=(sw.scales.data.ptr, scales.data.ptr))
    return y
