"""With compiling forbidden (CUTLASS_SPARSE_NO_COMPILE=1), serve a problem whose chosen
kernel is not cached with the best cached kernel that fits it, instead of failing.

Candidates are the cached GEMMs of the problem's arch (this toolchain's only) with the
chosen kernel's input and output types; each is tried as the caller's config would be
(the family plan checks that it fits and adapts layout, alignment and epilogue), in
order of the selection heuristic's own cost, and taken only if the kernel that plan
asks for is cached. Said once per process; a plan made this way is kept like any other.
"""
from __future__ import annotations

import logging
import threading
import warnings
from typing import Callable

from ..build import kernels
from ..build.compiler import CompileError
from ..describe import catalog, selection
from ..describe.arith import cdiv
from ..describe.problem import Problem
from ..launch.sm90_choice import run_order

log = logging.getLogger("cutlass_sparse")
_said = threading.Event()


def substitute(problem: Problem, make: Callable, missing: CompileError):
    """The plan of the best cached kernel for problem (make(problem, config) makes one);
    re-raises `missing` when the cache holds none that fits."""
    asked = kernels.first_asked(lambda: make(problem))
    if asked is None:
        raise missing
    wanted, arch = asked
    for config in sorted(_candidates(wanted, arch), key=lambda c: _rank(c, wanted, problem)):
        if config.family == "sm90":   # this problem's swizzle and raster order, not those it was cached with
            config = run_order(problem, config)
        try:
            needed = kernels.first_asked(lambda: make(problem, config))
        except ValueError:          # does not fit this problem's shapes or operands
            continue
        if needed is not None and kernels.cached(*needed):
            plan = make(problem, config)
            _say(problem, wanted, needed[0])
            return plan
    raise missing


def _candidates(wanted, arch: str) -> list:
    if not hasattr(wanted, "threadblock"):    # a reduction or compressor: no stand-in for it
        return []
    return [c for c in kernels.present(arch) if (c.family, c.element, c.element_out) ==
            (wanted.family, wanted.element, wanted.element_out)]


def _rank(config, wanted, p: Problem) -> tuple:
    """Tiles the catalog offers for this N first, then the same layout of x (no staging
    copy), then the selection heuristic's cost, then wider vectors."""
    outside = False
    if config.family == "sm90":
        cost = selection.sm90_tile_cost(config.threadblock, config.cluster, 1, p.m, p.n, p.k, p.sm_count)
        # a tile the catalog keeps to other problems (min_n, max_n, min_m, min_k, max_waves) only where
        # nothing else is cached
        fam = catalog.load(catalog.for_element("sm90", config.element))
        outside = not any(fam.takes(t, p.m, selection.n_range(p.n), p.k, p.sm_count) for t in fam.tiles
                          if (t[0], t[3], t[4]) == (config.threadblock, config.cluster, config.schedule))
    else:
        cost = selection.cost(config.threadblock, cdiv(p.m, 32) * 32, p.n, p.k, p.sm_count)
    return outside, config.layout_b != wanted.layout_b, cost, -config.alignment_b, -config.alignment_c, config.name


def _say(problem: Problem, wanted, used) -> None:
    text = (f"CUTLASS_SPARSE_NO_COMPILE is set and the kernel cache lacks {wanted.name}: "
            f"{problem.m}x{problem.n}x{problem.k} runs {used.name}, the best cached kernel that fits")
    if _said.is_set():
        log.debug("%s", text)
    else:
        _said.set()
        warnings.warn(f"{text} (said once; later substitutions are logged at debug level)", stacklevel=5)
