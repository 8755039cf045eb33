"""2:4 pruning: keep the largest magnitudes the sparse tensor cores allow."""
from __future__ import annotations

import functools

import numpy as np

from ..describe.arith import round_up
from .patterns import _INF, PATTERNS, _bits, _check_matrix, _order_key, check_fits, is_broadcast_batch

# Peak bytes per element of the padded matrix, beyond the input: a contiguous copy, the
# padded bits, the order keys (2 or 4 bytes), the int8 ranks and one comparison's booleans,
# the kept bits and the result (measured with tracemalloc in tests/test_bad_inputs.py).
_WORK_ITEMS, _WORK_FIXED = 4, 3


def work_bytes(shape, itemsize: int, group: int = 4) -> int:
    """About the most memory prune_2to4 holds at once for a [..., M, K] input."""
    *_, k = shape
    rows = 1
    for n in shape[:-1]:
        rows *= n
    elements = rows * round_up(k, group)
    return elements * (_WORK_ITEMS * itemsize + _WORK_FIXED)


def prune_2to4(dense):
    """Keep the largest magnitudes the sparse tensor cores allow, along K: two of each group
    of four (fp16, bf16, int8), one of each pair for float32 (tf32 runs 1:2, which is also
    2:4). Every group keeps exactly that many positions (a kept position may hold a zero).

    Order: by |x|; inf is larger than every finite value; NaN (any sign or payload) counts
    as larger than inf, so a NaN is always kept and shows up in the product instead of
    being silently pruned away. Ties (equal magnitudes, two NaNs) go to the lower index.

    numpy or cupy [M, K] or [batch, M, K] in, the same type out; K need not be a multiple
    of the group; an empty matrix gives an empty copy. A batch broadcast from one matrix
    (batch stride 0, np.broadcast_to) is pruned once and broadcast the same way (a
    read-only view). Raises TypeError/ValueError for other inputs, TooLarge (a ValueError)
    before allocating when the work cannot fit in the memory available.
    """
    xp, name = _check_matrix(dense, "dense", batch=True)
    if is_broadcast_batch(dense):
        return xp.broadcast_to(prune_2to4(dense[0]), dense.shape)
    pattern = PATTERNS[name]
    check_fits(dense, work_bytes(dense.shape, dense.dtype.itemsize, pattern.group), "dense", "prune_2to4")
    if dense.ndim == 3:   # a batch: the same rule for every matrix
        return _prune(xp, name, xp.ascontiguousarray(dense).reshape(-1, dense.shape[-1])).reshape(dense.shape)
    return _prune(xp, name, dense)


def _prune(xp, name: str, dense):
    pattern = PATTERNS[name]
    m, k = dense.shape
    if xp is not np and name in _FUSED_INF:
        return _fused_prune(dense, name)
    g = pattern.group
    kg = round_up(k, g)
    source = _bits(xp.ascontiguousarray(dense))
    padded = xp.zeros((m, kg), dtype=source.dtype)
    padded[:, :k] = source
    del source
    groups = padded.reshape(m, kg // g, g)
    key = _order_key(xp, groups, name)
    # rank[i] = how many values of the group beat value i: larger keys, and equal keys at a
    # lower index. One lane at a time: int8 counts and one comparison in memory at once.
    rank = xp.zeros(groups.shape, dtype=xp.int8)
    for j in range(g):
        rank += key[..., j:j + 1] > key
        rank[..., j + 1:] += key[..., j:j + 1] == key[..., j + 1:]
    del key
    kept = xp.where(rank < pattern.keep, groups, groups.dtype.type(0))
    return kept.reshape(m, kg)[:, :k].copy().view(dense.dtype)


# fp16/bf16 on the GPU: one CuPy kernel, one thread per group of four (the form above runs
# a dozen small kernels, which CuPy compiles on a machine's first use). Same keys and
# ties, so the two agree bit for bit (tests/test_compress.py on the GPU).
_FUSED_INF = {"f16": _INF["f16"], "bf16": _INF["bf16"]}
_PRUNE = """
long long groups = (k + 3) / 4, row = i / groups, col = (i % groups) * 4;
unsigned short v[4], key[4];
for (int j = 0; j < 4; ++j) {
  v[j] = col + j < k ? dense[row * k + col + j] : 0;
  unsigned short magnitude = v[j] & 0x7fff;
  key[j] = magnitude < inf_plus_one ? magnitude : inf_plus_one;   // NaNs tie, above inf
}
for (int j = 0; j < 4; ++j) {
  int rank = 0;   // values that beat this one: larger keys, and equal keys at a lower index
  for (int o = 0; o < 4; ++o) rank += key[o] > key[j] || (key[o] == key[j] && o < j);
  if (col + j < k) out[row * k + col + j] = rank < 2 ? v[j] : 0;
}
"""


@functools.lru_cache(maxsize=1)
def _prune_kernel():
    import cupy

    return cupy.ElementwiseKernel("raw uint16 dense, int64 k, uint16 inf_plus_one", "raw uint16 out", _PRUNE,
                                  "cutlass_sparse_prune_2to4_16bit")


def _fused_prune(dense, name: str):
    import cupy

    m, k = dense.shape
    out = cupy.empty((m, k), dtype=cupy.uint16)
    _prune_kernel()(_bits(cupy.ascontiguousarray(dense)), k, np.uint16(_FUSED_INF[name] + 1), out,
                    size=m * ((k + 3) // 4))
    return out.view(dense.dtype)
