"""The call's options, checked with no GPU and no arrays: D's element type, the activation
and its slope, alpha and beta as numbers, split-K and its mode per family, int8's own rules.
Each raises a ValueError or TypeError naming the option and the rule."""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..describe import dtypes
from ..describe.description import ACTIVATIONS

SPLIT_K_MODES = {"sm80": ("serial", "parallel"), "sm90": ("serial",)}


def output_type(element: str, out_dtype) -> str:
    """D's element: the input type by default (int32 for int8), or one the kernels offer."""
    allowed = dtypes.outputs_for(element)
    try:
        element_out = allowed[0] if out_dtype is None else dtypes.parse(out_dtype)
    except (TypeError, ValueError):
        raise ValueError(f"out_dtype {out_dtype!r} is not a dtype the kernels write: {element} inputs give "
                         f"one of {allowed}") from None
    if element_out not in allowed:
        raise ValueError(f"out_dtype {out_dtype!r}: {element} inputs give one of {allowed}")
    return element_out


def check_activation(activation, leaky_slope) -> None:
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    check_number(leaky_slope, "leaky_slope")
    if not math.isfinite(leaky_slope):
        raise ValueError(f"leaky_slope must be finite, got {leaky_slope!r}")


def check_number(value, what: str) -> None:
    """A real number: int, float, a NumPy scalar of either, or a 0-d array of one (NumPy, CuPy,
    torch: read with float() as before); not a bool, a string or a larger array."""
    if type(value) is float:
        return
    if getattr(value, "ndim", None) == 0 and _real_dtype(getattr(value, "dtype", None)):
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number, got {type(value).__name__}")


def _real_dtype(dtype) -> bool:
    """A NumPy/CuPy dtype of kind int, uint or float, or a torch one that is neither complex nor bool."""
    kind = getattr(dtype, "kind", None)
    if isinstance(kind, str):
        return kind in ("f", "i", "u")
    return dtype is not None and hasattr(dtype, "is_complex") and not dtype.is_complex and str(dtype) != "torch.bool"


def check_split_k(split_k, split_k_mode, family):
    if split_k is not None and (isinstance(split_k, bool) or not isinstance(split_k, (int, np.integer))
                                or split_k < 1):
        raise ValueError(f"split_k must be an integer >= 1, got {split_k!r}")
    if split_k_mode is not None and split_k_mode not in ("serial", "parallel"):
        raise ValueError(f"split_k_mode {split_k_mode!r} must be 'serial' or 'parallel'")
    if split_k_mode is not None and split_k_mode not in SPLIT_K_MODES[family]:
        raise ValueError(f"split_k_mode {split_k_mode!r} is not offered by the {family} family (it has "
                         f"{SPLIT_K_MODES[family]}: CUTLASS 3.x reduces K slices inside the GEMM kernel)")
    return (None if split_k is None else int(split_k)), split_k_mode


def check_int8(element_out: str, activation: str, split_k, split_k_mode) -> None:
    """int8's own rules (a row-major x is fine: the library stages it K-major)."""
    if activation != "identity":
        raise ValueError(f"activation {activation!r} needs a floating-point output; int8 GEMMs give int32 "
                         f"or int8 (scaled by alpha and clamped)")
    if (split_k or 1) > 1 and (split_k_mode == "parallel" or element_out == "s8"):
        raise ValueError("int8 split-K: serial with an int32 output only (an int8 D would clamp the partial "
                         "sums; the parallel reduction sums float32 partials)")
