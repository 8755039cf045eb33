"""Layers take activations as torch.nn.Linear does: [..., K], with any leading dimensions
(a batch of sequences [batch, tokens, K], or one token [K]); the kernels see [tokens, K].
The leading dimensions are folded into tokens by reshape (a view wherever the layout
allows it, which a contiguous tensor always does) and unfolded from the result the same
way (splitting the tokens dimension is always a view)."""
from __future__ import annotations

import numpy as np


def folded(x) -> tuple[object, tuple[int, ...] | None]:
    """(x as [tokens, K], its leading shape) for [..., K] x; (x, None) for a 2-D x or
    something that is not an array (the caller's own checks name what is wrong)."""
    ndim = getattr(x, "ndim", 2)
    if ndim == 2 or ndim == 0:
        return x, None
    shape = tuple(x.shape)
    return x.reshape(-1, shape[-1]), shape[:-1]


def unfolded(y, lead: tuple[int, ...] | None):
    """A [tokens, features] result as [*lead, features]."""
    return y if lead is None else y.reshape(*lead, y.shape[-1])


def folded_out(out, lead: tuple[int, ...] | None, name: str = "out"):
    """A caller's [..., features] out as the [tokens, features] view the kernel writes
    (None stays None); an out whose layout has no such view is refused, not copied."""
    if out is None or lead is None:
        return out
    shape = tuple(out.shape)
    if shape[:-1] != lead:
        raise ValueError(f"{name} must be [{', '.join(map(str, lead))}, features] like x, got {list(shape)}")
    if not _contiguous(out):   # then reshape would copy, and the result would land in the copy
        raise ValueError(f"{name} must be contiguous to go with a [..., K] x (written as one [tokens, "
                         f"features] array)")
    return out.reshape(-1, shape[-1])


def folded_scales(scales, lead: tuple[int, ...] | None, name: str = "x_scales"):
    """Per-token scales shaped like x's leading dimensions, as [tokens] (a number, a NumPy
    scalar or None stays as it is: one scale for the whole tensor)."""
    if lead is None or scales is None or not hasattr(scales, "shape") or isinstance(scales, np.generic):
        return scales
    if tuple(scales.shape) not in (lead, (*lead, 1)):
        raise ValueError(f"{name} must be [{', '.join(map(str, lead))}] (one per token of x), "
                         f"got {list(scales.shape)}")
    return scales.reshape(-1)


def _contiguous(array) -> bool:
    return array.is_contiguous() if hasattr(array, "is_contiguous") else array.flags.c_contiguous
