"""The element types cutlass-sparse handles: NumPy dtype <-> cutlass_library DataType."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from cutlass_library.library import DataType, DataTypeTag

bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)

_BY_NAME = {
    "f16": (np.dtype(np.float16), DataType.f16),
    "bf16": (bfloat16, DataType.bf16),
    "f32": (np.dtype(np.float32), DataType.f32),
    "s8": (np.dtype(np.int8), DataType.s8),
    "s32": (np.dtype(np.int32), DataType.s32),
    "tf32": (np.dtype(np.float32), DataType.tf32),   # float32 operands, read by tf32 tensor cores
    "e4m3": (float8_e4m3, DataType.e4m3),
    "e5m2": (float8_e5m2, DataType.e5m2),   # fp8 activations only (beside an e4m3 weight)
}
_NAME_BY_DTYPE = {dtype: name for name, (dtype, _) in _BY_NAME.items() if name != "tf32"}

# Operand types of the sparse tensor-core kernels: both families take the 16-bit floats,
# the sm80 family also int8 (int32 accumulation).
INPUT_NAMES = ("f16", "bf16")
SM80_INPUT_NAMES = ("f16", "bf16", "s8", "tf32")
INTEGER_NAMES = ("s8", "s32")
# What the sm90 family's kernels take: the 16-bit floats and, for quantized weights
# (issue 15), e4m3 and s8 (cs.linear_fp8, cs.linear_int8).
SM90_KERNEL_INPUT_NAMES = ("f16", "bf16", "e4m3", "s8")
EIGHT_BIT_NAMES = ("e4m3", "s8")
FP8_NAMES = ("e4m3",)
# What x may be beside a weight of each type, where it may differ (sm90 fp8: CUTLASS's
# sparse wgmma takes e4m3 x e5m2; a wider-range activation type with a precise weight).
X_ELEMENTS = {"e4m3": ("e4m3", "e5m2")}


def array_module(array):
    """numpy or cupy, whichever owns `array` (cupy is imported only when it does)."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def from_float32(array, dtype):
    """float32 numpy/cupy array -> f16/bf16/f32, round to nearest even. bf16 is rounded on
    its bit pattern, so CuPy needs no bf16 arithmetic; values the target holds stay exact."""
    xp = array_module(array)
    if np.dtype(dtype) == bfloat16:
        bits = xp.ascontiguousarray(array, dtype=xp.float32).view(xp.uint32)
        rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return rounded.astype(xp.uint16).view(bfloat16)
    return array.astype(dtype)


def to_float32(array):
    """Exact float32 copy of an f16/bf16/f32 numpy or cupy array (bf16 via its bit pattern)."""
    xp = array_module(array)
    if name_of(array.dtype) == "bf16":
        bits = xp.ascontiguousarray(array).view(xp.uint16)
        return (bits.astype(xp.uint32) << 16).view(xp.float32)
    return array.astype(xp.float32)


def name_of(dtype) -> str | None:
    """'f16' / 'bf16' / 'f32' for a dtype-like, or None for anything else."""
    try:
        return _NAME_BY_DTYPE.get(np.dtype(dtype))
    except TypeError:
        return None


def operand_name(dtype) -> str | None:
    """The element type the sparse kernels see for an operand dtype (float32 runs as tf32)."""
    name = name_of(dtype)
    return "tf32" if name == "f32" else name


def outputs_for(element: str, family: str = "sm80") -> tuple[str, ...]:
    """What the kernels may write for an operand type, the default first: the input type
    or f32 for 16-bit floats, f32 for tf32, int32 or int8 (clamped) for int8 (and on sm90,
    whose int8 kernels take scales, a dequantized 16-bit float or f32), a 16-bit float or
    f32 for fp8 (e4m3), or e4m3 again (scaled, for a following fp8 layer)."""
    if element == "s8" and family == "sm90":
        return ("s32", "s8", "bf16", "f16", "f32")
    return {"s8": ("s32", "s8"), "tf32": ("f32",), "e4m3": ("bf16", "f16", "f32", "e4m3")}.get(element, (element, "f32"))


def numpy_dtype(name: str) -> np.dtype:
    return _BY_NAME[name][0]


def data_type(name: str) -> DataType:
    return _BY_NAME[name][1]


def cutlass_type(name: str) -> str:
    """The CUTLASS C++ type of an element name (cutlass::half_t, ...)."""
    return DataTypeTag[data_type(name)]


def parse(name_or_dtype) -> str:
    """Accept 'f16', 'fp16', 'float16', np.float16, ml_dtypes.bfloat16... -> canonical name."""
    aliases = {"fp16": "f16", "half": "f16", "float16": "f16", "bfloat16": "bf16",
               "fp32": "f32", "float32": "f32", "float": "f32", "int8": "s8", "int32": "s32"}
    if isinstance(name_or_dtype, str):
        key = aliases.get(name_or_dtype, name_or_dtype)
        if key in _BY_NAME:
            return key
    found = name_of(name_or_dtype)
    if found is None:
        raise ValueError(f"unsupported dtype {name_or_dtype!r}: expected one of f16, bf16, f32, s8, s32")
    return found
