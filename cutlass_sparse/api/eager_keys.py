"""The eager fast path's keys (api.eager): what a call is, from raw attributes of its
operands, as one tuple. A CuPy call's key (key) and a torch call's (torch_key,
linear_key: from the tensors' attributes, no CuPy view) are equal for the same memory, so a
call that went the full path is found by the next one; a key's class (class_key) is the
key without N, which calls of one N range share."""
from __future__ import annotations

import numpy as np

from ..describe import selection
from ..formats.matrices import SparseMatrix
from . import interop

# A key's fields: head (4), x (5: shape, strides, dtype, align, device), options, out, bias.
X_SHAPE, X_STRIDES, _OPTIONS, _OUT, _BIAS = 4, 5, 9, 10, 11
OUT_DTYPE = 4     # in options

_ndarray = None


def array_type():
    global _ndarray
    if _ndarray is None:
        import cupy

        _ndarray = cupy.ndarray
    return _ndarray


def _head(sw):
    """The weight's part of a key, or None when the fast path does not take sw."""
    if type(sw) is not SparseMatrix or type(sw.values) is not (_ndarray or array_type()):
        return None
    return sw.shape, sw.dtype, sw.layout, sw.values.data.device_id


def _cupy_attrs(array):
    data = array.data
    return array.shape, array.strides, array.dtype, data.ptr & 15, data.device_id


def key(sw, x, out, bias, options: tuple) -> tuple | None:
    """The fast key of a CuPy call, or None when the fast path does not take it."""
    head = _head(sw)
    ndarray = array_type()
    if head is None or type(x) is not ndarray:
        return None
    found = (*head, *_cupy_attrs(x), options)
    for array in (out, bias):
        if array is None:
            found += (None,)
        elif type(array) is not ndarray:
            return None
        else:
            found += (_cupy_attrs(array),)
    return found


def torch_attrs(tensor, dims: tuple[int, ...] = (2,)):
    """(shape, byte strides, NumPy dtype, address mod 16, device) of a CUDA tensor of one of
    these dimension counts, as _cupy_attrs of a CuPy view of it, or None."""
    dtype = interop.numpy_dtype(tensor.dtype)
    if dtype is None or not tensor.is_cuda or tensor.dim() not in dims:
        return None
    item, strides = dtype.itemsize, tensor.stride()
    # no generator for the common 2-D case: this runs on every eager torch call
    strides = (strides[0] * item, strides[1] * item) if len(strides) == 2 else tuple(s * item for s in strides)
    return tensor.shape, strides, dtype, tensor.data_ptr() & 15, tensor.get_device()


def torch_bias_attrs(bias):
    """A torch bias's part of a key ([M] or [M, 1]): None for no bias, False where the fast
    path does not take it."""
    return None if bias is None else torch_attrs(bias, (1, 2)) or False


_INT8, _INT32 = np.dtype(np.int8), np.dtype(np.int32)


def _allocated_out(m: int, n: int, dtype, device: int, col: bool = False) -> tuple:
    """The key part of a D the library allocates with torch.empty (row-major [M, N], or
    col: [N, M] seen as its transpose): aligned, as every torch allocation is."""
    out = _INT32 if dtype is _INT8 else dtype   # the default output type (NumPy's dtypes are singletons)
    item = out.itemsize
    return (m, n), ((item, m * item) if col else (n * item, item)), out, 0, device


def torch_key(sw, x, out, options: tuple, bias=None) -> tuple | None:
    """The key of a torch call, equal to key() of CuPy views of its tensors. out=None: the
    key of the row-major D the caller (the torch wrapper) allocates on a hit, which needs
    the default output type (None for another)."""
    head = _head(sw)
    x_attrs = None if head is None else torch_attrs(x)
    bias_attrs = torch_bias_attrs(bias)
    if x_attrs is None or bias_attrs is False:
        return None
    if out is not None:
        out_attrs = torch_attrs(out)
        if out_attrs is None:
            return None
    elif options[OUT_DTYPE] is not None:
        return None
    elif padded_out(head[2], x_attrs[0][1], x_attrs[2].itemsize):
        out_attrs = None   # the library's own padded D, as a CuPy call without out keys it
    else:
        out_attrs = _allocated_out(head[0][0], x_attrs[0][1], x_attrs[2], x_attrs[4])
    return (*head, *x_attrs, options, out_attrs, bias_attrs)


def padded_out(layout: str, n: int, item: int) -> bool:
    """Whether the [M, N] D the library allocates for a call has a padded leading
    dimension: sm90 with N not in whole 16-byte vectors of the inputs (the kernel runs N
    rounded up; launch.sm90). Returned as an [M, N] view: nothing is copied."""
    return layout == "sm90" and (n * item) % 16 != 0


def linear_key(x, sw, options: tuple, bias=None) -> tuple[tuple, bool] | None:
    """(key, D column-major) of cs.linear(x, sw) on a torch or CuPy [tokens, K] x: the key
    of the matmul linear makes of it (sw @ x.T into the D it allocates, column-major for
    token counts a row-major D cannot take in place: a torch call's D is allocated by the
    torch wrapper, a CuPy call's row-major D by matmul itself); None where linear makes
    no such call."""
    head = _head(sw)
    if head is None or head[2] != "sm90" or options[OUT_DTYPE] is not None:
        return None
    if type(x) is _ndarray:
        x_attrs = _cupy_attrs(x) if x.ndim == 2 else None
        bias_attrs = None if bias is None else (_cupy_attrs(bias) if type(bias) is _ndarray else False)
    else:
        x_attrs, bias_attrs = torch_attrs(x), torch_bias_attrs(bias)
    if x_attrs is None or bias_attrs is False:
        return None
    (n, k), (s0, s1), dtype, align, device = x_attrs
    col = selection.linear_out_layout(n, dtype.itemsize) == "col"
    out = _allocated_out(head[0][0], n, dtype, device, col) if col or type(x) is not _ndarray else None
    return (*head, (k, n), (s1, s0), dtype, align, device, options, out, bias_attrs), col


def _compact(shape, strides, item) -> str | None:
    """'C' for a compact row-major 2-D array, 'F' for compact column-major, else None."""
    rows, cols = shape
    if strides == (cols * item, item):
        return "C"
    if strides == (item, rows * item):
        return "F"
    return None


def class_key(fast_key: tuple) -> tuple | None:
    """The class of a call (see the module docstring): its key without N, or None."""
    if fast_key[_BIAS] is not None or len(fast_key[X_SHAPE]) != 2:
        return None
    (k, n), item = fast_key[X_SHAPE], fast_key[6].itemsize
    x_kind = _compact((k, n), fast_key[X_STRIDES], item)
    out = fast_key[_OUT]
    if out is not None:   # the [M, N] of this call's own N, compact
        out_kind = _compact(out[0], out[1], out[2].itemsize)
        if out[0] != (fast_key[0][0], n) or out_kind is None:
            return None
        out = (out_kind, *out[2:])
    if x_kind is None or n == 0:
        return None
    return (*fast_key[:4], k, x_kind, *fast_key[6:9], fast_key[_OPTIONS], out,
            selection.n_range(n), n % 8 == 0, n == 1)


def key_for_n(fast_key: tuple, n: int) -> tuple:
    """The key of a call of fast_key's class with N = n (compact operands, as class_key
    requires: x's and out's strides follow from N and their layout)."""
    k, item = fast_key[X_SHAPE][0], fast_key[6].itemsize
    x_row = _compact(fast_key[X_SHAPE], fast_key[X_STRIDES], item) == "C"
    key = list(fast_key)
    key[X_SHAPE], key[X_STRIDES] = (k, n), ((n * item, item) if x_row else fast_key[X_STRIDES])
    out = fast_key[_OUT]
    if out is not None:
        (m, _), strides, dtype = out[:3]
        row = _compact(out[0], strides, dtype.itemsize) == "C"
        key[_OUT] = ((m, n), (n * dtype.itemsize, dtype.itemsize) if row else strides, *out[2:])
    return tuple(key)
