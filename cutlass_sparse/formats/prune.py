"""2:4 pruning: keep the largest magnitudes the sparse tensor cores allow."""
from __future__ import annotations

from ..describe.arith import round_up
from .patterns import PATTERNS, _bits, _check_matrix, _magnitude


def prune_2to4(dense):
    """Keep the largest magnitudes the sparse tensor cores allow, along K (ties: lower index
    wins): two of each group of four (fp16, bf16, int8), one of each pair for float32
    (tf32 runs 1:2, which is also 2:4).

    numpy or cupy [M, K] in, the same type out. K need not be a multiple of the group.
    """
    if getattr(dense, "ndim", None) == 3:   # a batch: the same rule for every matrix
        return prune_2to4(dense.reshape(-1, dense.shape[-1])).reshape(dense.shape)
    xp, name = _check_matrix(dense, "dense")
    pattern = PATTERNS[name]
    m, k = dense.shape
    kg = round_up(k, pattern.group)
    source = _bits(xp.ascontiguousarray(dense))
    padded = xp.zeros((m, kg), dtype=source.dtype)
    padded[:, :k] = source
    groups = padded.reshape(m, kg // pattern.group, pattern.group)
    mag = _magnitude(xp, groups, name)
    a = mag[..., :, None]   # element i
    b = mag[..., None, :]   # element j
    index = xp.arange(pattern.group)
    beats = (b > a) | ((b == a) & (index[None, :] < index[:, None]))
    rank = beats.sum(axis=-1)
    kept = xp.where(rank < pattern.keep, groups, groups.dtype.type(0))
    return kept.reshape(m, kg)[:, :k].copy().view(dense.dtype)
