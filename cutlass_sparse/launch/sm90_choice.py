"""Which sm90 kernel a problem runs (the caller's config, the profiler's choice or the
catalog's, and how the stream-K scheduler divides K), and TMA's rules for the operands
it reads and writes in place."""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import NamedTuple

from ..describe import catalog, dtypes, selection
from ..describe.arith import cdiv, round_up
from ..describe.description import SparseGemmConfig
from ..describe.problem import Operand, Problem
from . import grid
from .sm80 import check_config_fits

FAMILY = "sm90"
TMA_ALIGN = 16     # bytes: TMA's rule for base addresses and leading dimensions


@dataclass(frozen=True)
class Scheduling:
    """How the stream-K scheduler divides K: DECOMPOSITIONS key and K slices (split-K)."""

    decomposition: str = "data_parallel"
    splits: int = 1

    @classmethod
    def split_k(cls, splits: int) -> "Scheduling":
        return cls("split_k", splits) if splits > 1 else cls()


# The tail twin's scheduling (tail_twin): CUTLASS's heuristic decomposition, K unsplit
TAIL_TWIN = Scheduling("heuristic")


@functools.lru_cache(maxsize=4096)
def resolve(problem: Problem, config: SparseGemmConfig | None, choice=None) -> tuple[SparseGemmConfig, Scheduling]:
    """The sm90 kernel and K decomposition for a problem (the caller's config, the
    profiler's choice, or the catalog's: its persistent tile, or that tile's stream-K twin
    where CUTLASS's scheduler would split a part-empty last wave to gain (tail_twin))."""
    p = problem
    given = config is not None
    alignment_b = TMA_ALIGN // dtypes.numpy_dtype(p.element).itemsize     # whole 16-byte vectors
    alignment_c = TMA_ALIGN // dtypes.numpy_dtype(p.element_out).itemsize
    entries = catalog.load(catalog.for_element(FAMILY, p.element))
    if config is None and choice is not None:
        splits = p.split_k or 1
        config = entries.config(choice.tile, p.element, p.element_out, p.layout_b, alignment_b, alignment_c,
                                p.element_x)
        config = run_order(p, config, choice)
        # the profiler's choice of the stream-K twin, where this shape's last wave splits (its
        # record serves other shapes too)
        if choice.twin and splits_tail(p, config.threadblock, config.cluster, config.swizzle, config.raster)[0]:
            return _fitted(p, twin_of(config), given), TAIL_TWIN
    elif config is None:
        tile, splits = selection.choose_sm90(p.m, p.n, p.k, p.sm_count, p.split_k, p.element, p.element_out)
        if p.split_k is None:
            tile = twin_tile_instead(p, tile) or tile
        config = entries.config(tile, p.element, p.element_out, p.layout_b, alignment_b, alignment_c, p.element_x)
        config = run_order(p, config)
        twin = tail_twin(p, config) if p.split_k is None else None
        if twin is not None:
            return _fitted(p, twin, given), TAIL_TWIN
    else:
        check_config_fits(config, p.element, p.element_out, p.layout_b, alignment_b, alignment_c)
        if config.b_element != p.x_element:
            raise ValueError(f"config {config.name} reads x as {config.b_element}; x is {p.x_element}")
        splits = p.split_k or 1
    config = _fitted(p, config, given)
    if splits > 1 and config.tile_scheduler != "streamk":
        raise ValueError(f"split_k={splits} needs an sm90 stream-K kernel; {config.name} is not one")
    if splits > cdiv(p.k, config.threadblock[2]):
        raise ValueError(f"split_k={splits} exceeds the {cdiv(p.k, config.threadblock[2])} K tiles of "
                         f"K = {p.k} with {config.name}")
    return config, Scheduling.split_k(splits)


def _fitted(problem: Problem, config: SparseGemmConfig, given: bool) -> SparseGemmConfig:
    """The kernel with the problem's epilogue. D's layout is the problem's (a caller's
    column-major out is written in place). A problem without C runs a kernel without C
    (more stages fit); a caller's config may still name one with C."""
    p = problem
    return dataclasses.replace(config, activation=p.activation, layout_c=p.layout_d, scales=p.epilogue.scales,
                               reads_c=p.epilogue.reads_c or (given and config.reads_c))


def tail_twin(problem: Problem, config: SparseGemmConfig) -> SparseGemmConfig | None:
    """The stream-K twin of the catalog's persistent kernel (selection.TAIL_TWINS), where
    CUTLASS's stream-K scheduler splits this problem's part-empty last wave (a full wave or
    more before it: fewer tiles than SMs were not measured) and selection.tail_split_gain
    predicts the twin at least TAIL_GAIN faster; else None. Measured inputs only
    (selection.TAIL_TWIN_INPUTS)."""
    if not selection.has_tail_twin(config.threadblock, config.cluster, config.schedule, config.tile_scheduler,
                                   config.element):
        return None
    gain = _twin_gain(problem, config.threadblock, config.cluster, config.swizzle, config.raster)
    return twin_of(config) if gain >= selection.TAIL_GAIN else None


class _Tile(NamedTuple):
    """A tile where run_swizzle and run_raster ask for a kernel (they read these two)."""

    threadblock: tuple
    cluster: tuple


@functools.lru_cache(maxsize=4096)
def runs_tail_twin(problem: Problem) -> bool:
    """Whether the heuristic's kernel for this problem (at the kernel's N: kernel_n) is the
    stream-K twin: resolve's decision without building a configuration, which costs tens of
    microseconds (plans.range_key asks at every new N)."""
    p = problem
    tile, _ = selection.choose_sm90(p.m, p.n, p.k, p.sm_count, None, p.element, p.element_out)
    if twin_tile_instead(p, tile) is not None:
        return True
    return selection.has_tail_twin(tile[0], tile[3], tile[4], tile[5], p.element) and _tile_twin_gain(p, tile) > 0


def twin_tile_instead(problem: Problem, tile):
    """A catalog tile whose stream-K twin runs at this N and is predicted faster than the
    persistent kernel of `tile` (selection's pick, chosen for N's range), or None: the cost
    rule (selection.sm90_tile_cost, at this N) over the twin's predicted gain. Where a finer
    tile was picked for its last wave, the 128x256 tile's twin may split that wave instead
    (e4m3 3072x2048x28672: 128x128x256 1596 TFLOP/s, 128x256x128's twin 1935,
    docs/probe_streamk_8bit_h100_session34_call2.log). The rule undercounts how much more
    the 128x256 tile does per flop, so it errs toward the tile selection picked. Only for
    another tile shape: the pick's own tile in other clusters (128x256 in 4x1) was chosen
    by the cluster rule, measured, and its twin's is not."""
    p = problem
    if selection.has_tail_twin(tile[0], tile[3], tile[4], tile[5], p.element):
        return None   # the pick's own twin, where it gains (tail_twin)
    best, least = None, selection.sm90_tile_cost(tile[0], tile[3], 1, p.m, p.n, p.k, p.sm_count)
    family = catalog.load(catalog.for_element(FAMILY, p.element))
    for other in family.tiles:
        if not (other[0] != tile[0] and selection.has_tail_twin(other[0], other[3], other[4], other[5], p.element)
                and family.allows(other, p.element, p.element_out or p.element)
                and family.takes(other, p.m, p.n, p.k, p.sm_count)):
            continue
        gain = _tile_twin_gain(p, other)
        cost = gain and selection.sm90_tile_cost(other[0], other[3], 1, p.m, p.n, p.k, p.sm_count) / gain
        if gain and cost < least:
            best, least = other, cost
    return best


def _tile_twin_gain(problem: Problem, tile) -> float:
    """The predicted gain of a tile's stream-K twin over its persistent kernel at this problem,
    in its own swizzle and raster order, where it runs (at least TAIL_GAIN); else 0."""
    shape = _Tile(tile[0], tile[3])
    swizzle = run_swizzle(problem, shape)
    gain = _twin_gain(problem, tile[0], tile[3], swizzle, run_raster(problem, shape, swizzle))
    return gain if gain >= selection.TAIL_GAIN else 0.0


def _twin_gain(problem: Problem, threadblock, cluster, swizzle: int, raster: int) -> float:
    """The twin's predicted gain where CUTLASS's scheduler splits this problem's last wave, else 0."""
    split, waves = splits_tail(problem, threadblock, cluster, swizzle, raster)
    item = dtypes.numpy_dtype(problem.element).itemsize
    return selection.tail_split_gain(waves, problem.k, item) if split else 0.0


def splits_tail(problem: Problem, threadblock, cluster, swizzle: int, raster: int = 0) -> tuple[bool, float]:
    """(whether CUTLASS's stream-K scheduler splits this problem's part-empty last wave with at
    least one full wave before it, the waves of tiles): where a twin may run."""
    p = problem
    tiles, per_wave, split = grid.stream_k_tiles(p.m, p.n, p.k, threadblock, cluster[:2], p.sm_count, swizzle,
                                                 raster)
    return split > 0 and tiles >= per_wave, tiles / per_wave


def kernel_n(problem: Problem) -> int:
    """The N the sm90 kernel runs: CUTLASS's TMA collectives want the contiguous extent of a
    row-major B or D in whole 16-byte vectors, so an N that is not runs on N rounded up, with
    x's extra columns unwritten and D's dropped. Column-major x and D take any N."""
    p = problem
    item = min(dtypes.numpy_dtype(p.element).itemsize, dtypes.numpy_dtype(p.element_out).itemsize)
    rounds = p.layout_b == "row" or p.layout_d == "row"
    return round_up(p.n, TMA_ALIGN // item) if rounds else p.n


def twin_of(config: SparseGemmConfig) -> SparseGemmConfig:
    """A persistent tile's stream-K twin: the same kernel under CUTLASS's stream-K scheduler,
    its producer given the registers selection.TAIL_TWINS names (it spills at CUTLASS's 40)."""
    registers = selection.TAIL_TWINS[(config.threadblock, config.cluster)]
    return dataclasses.replace(config, tile_scheduler="streamk", load_registers=registers)


def run_swizzle(problem: Problem, kernel: SparseGemmConfig, choice=None) -> int:
    """The tile scheduler's swizzle (a run-time argument: the same binary runs any) for this
    problem on this kernel's tile: a profiled choice's, capped by this shape's clusters (its
    record serves every M and N of its bucket, and a plan's kernel every N of its range),
    else the heuristic's."""
    p = problem
    default = catalog.load(catalog.for_element(FAMILY, p.element)).swizzle
    if choice is not None:
        return selection.sm90_swizzle_capped(choice.swizzle or default, kernel.threadblock, p.m, p.n, kernel.cluster)
    return selection.sm90_swizzle(kernel.threadblock, p.m, p.n, p.sm_count, default, kernel.cluster)


def run_raster(problem: Problem, kernel: SparseGemmConfig, swizzle: int) -> int:
    """The tile scheduler's raster order for this problem on this kernel's tile at this
    swizzle (a run-time argument, like the swizzle): selection's."""
    p = problem
    return selection.sm90_raster(kernel.threadblock, p.m, p.n, p.k, p.sm_count, swizzle,
                                 *selection.operand_items(p.element, p.x_element), kernel.cluster)


def run_order(problem: Problem, kernel: SparseGemmConfig, choice=None) -> SparseGemmConfig:
    """The kernel's configuration with this problem's swizzle and raster order."""
    swizzle = run_swizzle(problem, kernel, choice)
    return dataclasses.replace(kernel, swizzle=swizzle, raster=run_raster(problem, kernel, swizzle))


def tma_ready(operand: Operand | None, item: int) -> bool:
    """Whether TMA can read or write an operand in place: 16-byte aligned address and
    leading dimension."""
    return operand is not None and operand.align % TMA_ALIGN == 0 and (operand.ld * item) % TMA_ALIGN == 0


def staged(operand: Operand, extent: int, item: int) -> Operand:
    """The operand as the library stages it: an aligned buffer, leading dimension padded
    to 16 bytes (extent: the contiguous dimension's size)."""
    return Operand(operand.layout, round_up(extent, TMA_ALIGN // item), TMA_ALIGN)
