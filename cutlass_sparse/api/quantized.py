"""8-bit 2:4 weights on Hopper (issue 15), fp8 (e4m3) or int8: quantize a weight with one
scale per output feature and compress it; quantize activations with one scale per token;
a Linear layer whose kernel applies both scales in its epilogue:

    sw = cs.quantize_fp8(w)                        # w [features, K], 2:4; sw.scales [features]
    xq, x_scales = cs.quantize_activations_fp8(x)  # x [tokens, K] -> e4m3 bytes, scales [tokens]
    y = cs.linear_fp8(xq, x_scales, sw)            # [tokens, features] bf16 = act(x @ w.T)

and the same with quantize_int8 / quantize_activations_int8 / linear_int8. fp8
activations may also be e5m2 (cs.quantize_activations_fp8(x, "e5m2"): a wider range, two
mantissa bits) beside the e4m3 weight; CUTLASS's sparse wgmma takes the pair. The output
may also be 8-bit for a following quantized layer (e4m3 from fp8, int8 from int8:
requantized, y / out_scale, rounded and saturated), or for int8 int32 (the raw
accumulator xq @ wq.T, exact, no scales).

Checked on the H100 against the dequantized operands' product (tests/test_gpu_fp8.py,
tests/test_gpu_int8.py, scripts/device/sweep_8bit.py). fp8 kernels accumulate with
CUTLASS's fast-accumulation schedules (catalog sm90_fp8); int8 in int32 (sm90_s8). fp8
data travels as uint8 bytes (or torch.float8_e4m3fn / float8_e5m2 tensors, ml_dtypes
arrays; bytes are e4m3 unless x_element="e5m2" says otherwise). CuPy input is quantized on
the host (round to nearest even), torch input on the GPU with torch's own rounding.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..describe import dtypes
from ..describe.arith import round_up
from ..describe.problem import Epilogue, Operand, Problem, alignment_class
from ..formats.matrices import SparseMatrix
from ..formats.patterns import LAYOUT_SM90
from ..formats.quantize import LARGEST, quantize
from ..launch import device, graphs, sm90_compress, torch_memory
from ..plan import plans
from . import operands, tokens
from .interop import is_torch, to_array, torch_dtype, torch_stream

# What each 8-bit type may write; the first is the default.
OUT_DTYPES = {"e4m3": ("bf16", "f16", "f32", "e4m3"), "s8": ("bf16", "f16", "f32", "s8", "s32")}
_NAMES = {"e4m3": "fp8", "s8": "int8"}


def _torch_dtype(element: str):
    """The torch dtype of an element: interop's map, and fp8 here (interop leaves fp8
    out, so cs.matmul's torch path does not take it)."""
    import torch

    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    return fp8[element] if element in fp8 else torch_dtype(dtypes.numpy_dtype(element))


def _data(x, element: str, what: str, x_element: str | None = None):
    """(a CuPy view of 8-bit data, its element) for a weight of `element`: fp8 as uint8
    bytes (uint8 or ml_dtypes fp8 arrays, torch fp8 or uint8 tensors; e4m3, or e5m2 beside
    an e4m3 weight; bytes are x_element, default the weight's), int8 as int8."""
    allowed = dtypes.X_ELEMENTS.get(element, (element,))
    if x_element is not None and x_element not in allowed:
        raise ValueError(f"x_element {x_element!r}: an {element} weight takes {what} of {allowed}")
    if is_torch(x):
        import torch

        found = {_torch_dtype(e): e for e in allowed}.get(x.dtype)
        if found is None and element != "s8" and x.dtype == torch.uint8:
            found = x_element or element
        if found is None:
            raise TypeError(f"{what} must be a tensor of {[str(_torch_dtype(e)) for e in allowed]}, got {x.dtype}")
        return to_array(x.view(torch.uint8) if found != "s8" else x), _matching(found, x_element, what)
    array = operands.as_device_array(x, what, f"linear_{_NAMES[element]}")
    found = {dtypes.numpy_dtype(e): e for e in allowed}.get(array.dtype)
    if found is None and element != "s8" and array.dtype == np.uint8:
        found = x_element or element
    if found is None:
        wanted = f"{'/'.join(allowed)} bytes (uint8 or ml_dtypes' fp8)" if element != "s8" else "int8"
        raise TypeError(f"{what} must hold {wanted}, got {array.dtype}")
    return (array if found == "s8" else array.view(np.uint8)), _matching(found, x_element, what)


def _matching(found: str, x_element: str | None, what: str) -> str:
    if x_element is not None and x_element != found:
        raise TypeError(f"{what} holds {found} values, but x_element is {x_element!r}")
    return found


def quantize_weight(w, element: str) -> SparseMatrix:
    """A 2:4 weight [features, K] (fp16, bf16 or fp32; CuPy or torch, on the GPU) quantized
    to `element` (e4m3 or s8) with one float32 scale per row (sw.scales, [features]) and
    compressed for the sm90 kernels. A torch w: on torch's current stream, from torch's
    allocator (as cs.compress does), so the weight is ordered with torch's work."""
    import cupy

    caller = f"quantize_{_NAMES[element]}"
    if not is_torch(w) or not getattr(w, "is_cuda", False):   # a torch CPU tensor: refused, naming w
        return _quantized_weight(operands.as_device_array(w, "w", caller), element)
    index = w.device.index
    with cupy.cuda.Device(index), torch_stream(index), torch_memory.using(index):
        return _quantized_weight(to_array(w), element)


def _quantized_weight(array, element: str) -> SparseMatrix:
    import cupy

    if array.ndim != 2 or array.dtype.kind not in "fV":
        raise ValueError(f"w must be a 2-D floating-point [features, K] array, got {array.dtype} {tuple(array.shape)}")
    m, k = array.shape
    if k % 4:
        raise ValueError(f"w has K = {k}: 2:4 sparsity needs K a multiple of 4")
    values = dtypes.to_float32(array)
    if int((values.reshape(m, k // 4, 4) != 0).sum(axis=-1).max()) > 2:
        raise ValueError("w is not 2:4 sparse (more than two nonzeros in a group of four along K): "
                         "prune it first (cs.prune_2to4)")
    # The kernels' rule (CUTLASS's can_implement): the compressed rows, K/2 bytes, in whole
    # 16-byte vectors. Zero columns (2:4 as they are) up to it.
    padded_k = round_up(k, 32)
    if padded_k != k:
        values = cupy.pad(cupy.asarray(values), ((0, 0), (0, padded_k - k)))
    quantized, scales = quantize(values, element, axis=1)
    kept, metadata = sm90_compress.compress(cupy.ascontiguousarray(quantized), element, 128)
    dtype = dtypes.float8_e4m3 if element == "e4m3" else np.dtype(np.int8)
    return SparseMatrix((m, k), dtype, kept, metadata, LAYOUT_SM90, 128, scales=cupy.ascontiguousarray(scales.ravel()),
                        padded_k=0 if padded_k == k else padded_k)


def quantize_activations(x, element: str):
    """(8-bit values [tokens, K], float32 scales [tokens]) of activations x [tokens, K]: one
    scale per token, its largest magnitude onto the type's largest value. torch tensors
    stay on the GPU (torch's cast) and come back as torch tensors. x [..., K] (any leading
    dimensions) gives values [..., K] and scales [...]."""
    folded, lead = tokens.folded(x)
    if lead is not None:
        values, scales = quantize_activations(folded, element)
        return tokens.unfolded(values, lead), scales.reshape(lead)
    if is_torch(x):
        import torch

        if x.dim() != 2:
            raise ValueError(f"x must be 2-D [tokens, K], got shape {tuple(x.shape)}")
        amax = x.abs().amax(dim=1, keepdim=True).float()
        scales = torch.where(amax > 0, amax / LARGEST[element], torch.ones_like(amax))
        scaled = x.float() / scales
        if element == "s8":
            scaled = scaled.round().clamp(-LARGEST["s8"], LARGEST["s8"])
        return scaled.to(_torch_dtype(element)).contiguous(), scales.reshape(-1).contiguous()
    array = operands.as_device_array(x, "x", f"quantize_activations_{'int8' if element == 's8' else 'fp8'}")
    if array.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, K], got shape {tuple(array.shape)}")
    quantized, scales = quantize(dtypes.to_float32(array), element, axis=1)
    return quantized, scales.ravel()


def _storage(element: str) -> np.dtype:
    """The CuPy dtype an element is held in: fp8 as its uint8 bytes (CuPy has no fp8)."""
    return np.dtype(np.uint8) if element in ("e4m3", "e5m2") else dtypes.numpy_dtype(element)


def _out_array(out, n: int, m: int, out_dtype: str, caller: str = "linear_quantized"):
    """(what the caller gets, its device pointer) for a caller's out: contiguous [n, m]."""
    if is_torch(out) and getattr(out, "is_cuda", False):
        import torch

        d = to_array(out.view(torch.uint8) if out.dtype == torch.float8_e4m3fn else out)
    else:
        d = operands.as_device_array(out, "out", caller)
    item = dtypes.numpy_dtype(out_dtype).itemsize
    if d.shape != (n, m) or d.dtype not in (_storage(out_dtype), dtypes.numpy_dtype(out_dtype)) \
            or d.strides != (m * item, item):
        raise ValueError(f"out must be a contiguous [{n}, {m}] {out_dtype} array, got {d.dtype} "
                         f"{tuple(d.shape)} with strides {d.strides}")
    return out, d.data.ptr


def linear_quantized(xq, x_scales, sw: SparseMatrix, *, bias=None, activation: str = "identity",
                     out_dtype: str | None = None, out_scale: float = 1.0, out=None, info: dict | None = None,
                     x_element: str | None = None):
    """activation(dequant(xq) @ dequant(sw).T + bias) / out_scale: [tokens, features] of
    out_dtype, one launch; an int32 out_dtype is the raw xq @ wq.T (no scales, no bias,
    x_scales may be None).

    xq: 8-bit [tokens, K] of sw's type (or [..., K], any leading dimensions, folded into
    tokens: x_scales, out and the result then have them too), or e5m2 beside an e4m3 weight (row-major is read in
    place; another view is copied once; uint8 bytes are read as x_element, default sw's
    type); x_scales: float32 [tokens], or one number for the whole tensor (folded into the
    epilogue's scalar); bias: [features] (float32 is read in place, another float type is
    converted on each call). The kernel computes D = act(s_w[f] * s_x[t] * acc + bias[f]) /
    out_scale as [features, tokens] column-major, which is the [tokens, features] result in place (staged
    through an aligned buffer where the feature count or out's address does not suit TMA).
    out: a contiguous [tokens, features] array of out_dtype to write (else one is made). Runs on torch's
    current stream for torch input (torch out), else CuPy's. `info`, if a dict, receives
    the kernel's name."""
    import cupy

    xq, lead = tokens.folded(xq)
    if lead is not None:   # [..., K]: leading dimensions folded into tokens
        y = linear_quantized(xq, tokens.folded_scales(x_scales, lead), sw, bias=bias, activation=activation,
                             out_dtype=out_dtype, out_scale=out_scale, out=tokens.folded_out(out, lead), info=info,
                             x_element=x_element)
        return out if out is not None else tokens.unfolded(y, lead)
    element = getattr(sw, "element", None)
    if not isinstance(sw, SparseMatrix) or element not in OUT_DTYPES or sw.scales is None:
        raise TypeError("sw must be a quantized SparseMatrix from cs.quantize_fp8 or cs.quantize_int8")
    allowed = OUT_DTYPES[element]
    out_dtype = allowed[0] if out_dtype is None else dtypes.parse(out_dtype)
    if out_dtype not in allowed:
        raise ValueError(f"out_dtype {out_dtype!r}: {_NAMES[element]} weights give one of {allowed}")
    raw = out_dtype == "s32"
    if raw and (activation != "identity" or out_scale != 1.0 or bias is not None):
        raise ValueError("out_dtype 's32' is the raw integer accumulator: no activation, no bias, no out_scale")
    if not (np.isfinite(out_scale) and out_scale > 0):
        raise ValueError(f"out_scale must be a positive finite number, got {out_scale!r}")
    torch_in = is_torch(xq)
    x, x_element = _data(xq, element, "xq", x_element)
    m, k = sw.shape
    if x.ndim != 2 or x.shape[1] != k or 0 in x.shape:
        raise ValueError(f"xq must be a [tokens, {k}] array with tokens >= 1, got shape {tuple(x.shape)}")
    n = x.shape[0]
    scale_ptrs, alpha = (0, 0), 1.0
    if not raw and isinstance(x_scales, (int, float, np.floating, np.integer)) and not isinstance(x_scales, bool):
        if not (np.isfinite(x_scales) and x_scales > 0):
            raise ValueError(f"x_scales, as one per-tensor scale, must be a positive finite number, got {x_scales!r}")
        scale_ptrs, alpha = (sw.scales.data.ptr, 0), float(x_scales)   # a null column pointer reads 1
    elif not raw:
        scales = to_array(x_scales) if is_torch(x_scales) and getattr(x_scales, "is_cuda", False) else \
            operands.as_device_array(x_scales, "x_scales", f"linear_{_NAMES[element]}")
        if scales.shape != (n,) or scales.dtype != np.float32 or scales.strides != (4,):
            raise ValueError(f"x_scales must be a contiguous float32 [{n}] array (one per token), "
                             f"got {scales.dtype} {tuple(scales.shape)}")
        scale_ptrs = (sw.scales.data.ptr, scales.data.ptr)
    device_id = x.device.id
    stream = torch_stream(device_id) if torch_in else cupy.cuda.get_current_stream()
    # copies and buffers in the launching stream's order (from torch's allocator for torch
    # operands), kept by a graph it may be capturing
    with stream, torch_memory.using(device_id) if torch_in else contextlib.nullcontext(), \
            graphs.Temporaries(stream):
        row_bias = None if bias is None else _bias(bias, m, f"linear_{_NAMES[element]}")
        scale_ptrs += (0 if row_bias is None else row_bias.data.ptr,)
        kernel_k = sw.padded_k or k
        if kernel_k != k:   # the weight's zero columns meet zero columns of x
            padded = cupy.zeros((n, kernel_k), dtype=x.dtype)
            padded[:, :k] = x
            x = padded
        elif x.strides != (k, 1):   # a strided view: one contiguous copy (x.T is then K-major)
            x = cupy.ascontiguousarray(x)
        if out is not None:
            y, d_ptr = _out_array(out, n, m, out_dtype, f"linear_{_NAMES[element]}")
        elif torch_in:
            import torch

            y = torch.empty((n, m), dtype=_torch_dtype(out_dtype), device=xq.device)
            d_ptr = y.data_ptr()
        else:
            y = cupy.empty((n, m), dtype=_storage(out_dtype))
            d_ptr = y.data.ptr
        arch, sm_count = device.facts(device_id)
        # x.T and D are column-major; their alignment decides whether TMA takes them in place
        problem = Problem("sm90", m, n, kernel_k, element, out_dtype,
                          Operand("col", kernel_k, alignment_class(x.data.ptr)),
                          Operand("col", m, alignment_class(d_ptr)), None,
                          Epilogue(alpha=alpha, activation=activation, scales="none" if raw else "row_col",
                                   out_scale=out_scale),
                          None, None, device_id, arch, sm_count, "" if x_element == element else x_element)
        plan = plans.get(problem)
        if info is not None:
            info.update(config=plan.config.name, swizzle=plan.swizzle, raster=plan.raster)
        if plan.direct:
            plan.launch_direct(sw, x.data.ptr, d_ptr, stream, scales=scale_ptrs)
        else:   # features or an out TMA cannot write in place: D staged and copied in
            plan.launch_staged(sw, x.data.ptr, d_ptr, stream, scales=scale_ptrs)
    return y


def _bias(bias, m: int, caller: str = "linear_quantized"):
    """A layer's bias as the contiguous float32 [m] the kernel reads (converted when it is
    another float type or strided; on the current stream)."""
    import cupy

    array = to_array(bias) if is_torch(bias) and getattr(bias, "is_cuda", False) else \
        operands.as_device_array(bias, "bias", caller)
    if array.shape != (m,) or dtypes.name_of(array.dtype) not in ("f16", "bf16", "f32"):
        raise ValueError(f"bias must be an f16, bf16 or f32 [{m}] array (one per output feature), "
                         f"got {array.dtype} {tuple(array.shape)}")
    if array.dtype == np.float32:
        return cupy.ascontiguousarray(array)
    return dtypes.to_float32(array)


def quantize_fp8(w) -> SparseMatrix:
    """quantize_weight(w, "e4m3"): e4m3 values, one float32 scale per output feature."""
    return quantize_weight(w, "e4m3")


def quantize_int8(w) -> SparseMatrix:
    """quantize_weight(w, "s8"): symmetric int8 values, one float32 scale per output feature."""
    return quantize_weight(w, "s8")


def quantize_activations_fp8(x, element: str = "e4m3"):
    """quantize_activations(x, element): (fp8 bytes or a torch fp8 tensor, scales), e4m3 or
    e5m2 (a wider range and two mantissa bits, for an e4m3 weight's cs.linear_fp8)."""
    if element not in ("e4m3", "e5m2"):
        raise ValueError(f"element {element!r} must be 'e4m3' or 'e5m2'")
    return quantize_activations(x, element)


def quantize_activations_int8(x):
    """quantize_activations(x, "s8"): (int8 [tokens, K], float32 scales [tokens])."""
    return quantize_activations(x, "s8")


def _check_element(sw, element: str) -> None:
    if not isinstance(sw, SparseMatrix) or sw.element != element or sw.scales is None:
        maker = "quantize_fp8" if element == "e4m3" else "quantize_int8"
        raise TypeError(f"sw must be an {_NAMES[element]} SparseMatrix from cs.{maker}")


def linear_fp8(xq, x_scales, sw: SparseMatrix, **kwargs):
    """linear_quantized for an fp8 weight (cs.quantize_fp8): bf16 (default), f16 or f32 out."""
    _check_element(sw, "e4m3")
    return linear_quantized(xq, x_scales, sw, **kwargs)


def linear_int8(xq, x_scales, sw: SparseMatrix, **kwargs):
    """linear_quantized for an int8 weight (cs.quantize_int8): bf16 (default), f16, f32, int8
    (requantized by out_scale) or int32 (raw) out."""
    _check_element(sw, "s8")
    return linear_quantized(xq, x_scales, sw, **kwargs)
