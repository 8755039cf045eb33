"""Pick a configuration from the catalog for a problem, by a simple cost rule.

Until the profiler records measured winners, the rule is: fewest waves of
threadblocks over the device's SMs, weighted by the tile's perimeter (the bytes each
tile must load per K step), avoiding tiles whose K does not divide the problem's K
(that costs a padded copy of x).
"""
from __future__ import annotations

from . import catalog
from .description import SparseGemmConfig


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def cost(threadblock: tuple[int, int, int], m: int, n: int, k: int, sm_count: int) -> float:
    tm, tn, tk = threadblock
    ctas = _cdiv(m, tm) * _cdiv(n, tn)
    waves = _cdiv(ctas, sm_count)
    penalty = 1.0 if k % tk == 0 else 4.0
    return waves * (tm + tn) * _cdiv(k, tk) * tk * penalty


def choose(family: str, element: str, element_out: str, layout_b: str, alignment_b: int,
           alignment_c: int, m: int, n: int, k: int, sm_count: int) -> SparseGemmConfig:
    fam = catalog.load(family)
    best = min(fam.tiles, key=lambda tile: cost(tile[0], m, n, k, sm_count))
    return fam.config(best, element, element_out, layout_b, alignment_b, alignment_c)
