"""The launch grid of an sm90 kernel with CUTLASS's persistent tile scheduler, computed on
the host: the same arithmetic as PersistentTileSchedulerSm90Params::get_grid_shape
(cutlass/gemm/kernel/tile_scheduler_params.h, CUTLASS 4.2) for the arguments our setup
entry gives it (sm_count set, max_active_clusters 0, truncated by the problem size).

Knowing the grid here is what lets a new N launch without reading anything back from
the device. The first setup of each kernel still reports CUTLASS's own grid, and
Sm90Plan checks this one against it.
"""
from __future__ import annotations

from ..describe.arith import cdiv, round_up

# RasterOrderOptions: 0 heuristic, 1 along M, 2 along N (the setup entry's `raster`).
ALONG_M, ALONG_N = 1, 2
MAX_SM_PER_GPC = 18   # GH100, as CUTLASS assumes for cluster launches


def log_swizzle(tiles: int, max_swizzle: int) -> int:
    """CUTLASS's log2 of the swizzle it uses for `tiles` tiles along the swizzled extent
    (2.x GemmIdentityThreadblockSwizzle: the N tiles; 3.x tile schedulers: the fewer of the
    M and N tiles): the largest of 8, 4, 2 that max_swizzle allows and the tiles fill."""
    if max_swizzle >= 8 and tiles >= 6:
        return 3
    if max_swizzle >= 4 and tiles >= 3:
        return 2
    if max_swizzle >= 2 and tiles >= 2:
        return 1
    return 0


def raster_order(blocks_m: int, blocks_n: int, option: int) -> int:
    if option == 0:
        return ALONG_M if blocks_n > blocks_m else ALONG_N
    return ALONG_N if option == ALONG_N else ALONG_M


def max_cta_occupancy(cluster_size: int, sm_count: int) -> int:
    gpcs = 1 if sm_count < MAX_SM_PER_GPC else sm_count // MAX_SM_PER_GPC
    per_device = gpcs * (MAX_SM_PER_GPC - MAX_SM_PER_GPC % cluster_size)
    residual = 0 if sm_count < MAX_SM_PER_GPC else sm_count % MAX_SM_PER_GPC
    per_device += residual - residual % cluster_size
    return min(sm_count, per_device)


def persistent_grid(m: int, n: int, tile: tuple[int, int], cluster: tuple[int, int], sm_count: int,
                    max_swizzle: int, raster_option: int = 0, truncate: bool = True) -> tuple[int, int, int]:
    """(x, y, z) CUTLASS launches a persistent-scheduler kernel with, for an M x N problem
    (truncate=False: not cut down to the problem's tiles, as the stream-K scheduler asks)."""
    padded_m, padded_n, order = _tiles(m, n, tile, cluster, max_swizzle, raster_option)
    total = padded_m * padded_n if truncate else 1 << 62
    cm, cn = cluster
    x, y = (cm, 1) if order == ALONG_N else (1, cn)
    if cm * cn == 1:
        if order == ALONG_N:
            y = min(sm_count, total)
        else:
            x = min(sm_count, total)
    else:
        ctas = max_cta_occupancy(cm * cn, sm_count)
        if order == ALONG_N:
            y = min(ctas // cm, total // cm)
        else:
            x = min(ctas // cn, total // cn)
    return x, y, 1


def _tiles(m: int, n: int, tile: tuple[int, int], cluster: tuple[int, int], max_swizzle: int, raster_option: int):
    """The scheduler's tile counts along M and N (whole clusters, padded to whole swizzle
    groups) and its raster order."""
    cm, cn = cluster
    # get_tiled_cta_shape_mnl: CTA tiles, rounded up to whole clusters
    blocks_m = round_up(cdiv(m, tile[0]), cm)
    blocks_n = round_up(cdiv(n, tile[1]), cn)
    # Params::initialize fixes the swizzle and the raster order; get_grid_shape(params) passes
    # them back in, so both are decided here as initialize decides them.
    log = log_swizzle(min(blocks_m, blocks_n), max_swizzle)
    padded_m = round_up(blocks_m, (1 << log) * cm)
    padded_n = round_up(blocks_n, (1 << log) * cn)
    order = raster_order(padded_m, padded_n, raster_option)
    # get_grid_shape, called with max_swizzle = 1 << log and that raster order
    log = log_swizzle(min(blocks_m, blocks_n), 1 << log)
    padded_m = round_up(blocks_m, (1 << log) * cm)
    padded_n = round_up(blocks_n, (1 << log) * cn)
    return padded_m, padded_n, order


def ctas_per_wave(m: int, n: int, tile, cluster: tuple[int, int], sm_count: int, max_swizzle: int = 1,
                  raster_option: int = 0) -> int:
    """CTAs in one wave of the stream-K scheduler: its grid, not cut down to the problem."""
    x, y, _ = persistent_grid(m, n, tile[:2], cluster, sm_count, max_swizzle, raster_option, truncate=False)
    return x * y


# PersistentTileSchedulerSm90StreamKParams::min_iters_per_sk_unit_: no stream-K work for a
# tile of this many K tiles or fewer
MIN_ITERS_PER_SK_UNIT = 8


def stream_k_tiles(m: int, n: int, k: int, tile: tuple[int, int, int], cluster: tuple[int, int], sm_count: int,
                   max_swizzle: int, raster_option: int = 0) -> tuple[int, int, int]:
    """(output tiles, CTAs per wave, stream-K tiles) of CUTLASS's stream-K scheduler in its
    heuristic decomposition (select_decomposition_mode and get_num_sk_tiles, CUTLASS 4.2):
    where the last wave is part-empty and under half full, the last full wave's tiles and
    the tail are split over one wave of CTAs; else none (data-parallel)."""
    padded_m, padded_n, _ = _tiles(m, n, tile[:2], cluster, max_swizzle, raster_option)
    tiles, size = padded_m * padded_n, cluster[0] * cluster[1]
    per_wave = ctas_per_wave(m, n, tile, cluster, sm_count, max_swizzle, raster_option)
    full, tail = divmod(tiles, per_wave)
    if not tail or cdiv(k, tile[2]) <= MIN_ITERS_PER_SK_UNIT or 2 * tail >= per_wave:
        return tiles, per_wave, 0
    split = tiles - max(full - 1, 0) * per_wave
    return tiles, per_wave, split // size * size


L2_ALIGNMENT = 128   # bytes: CUTLASS's round_up_to_l2_alignment
BARRIER_BITS = 32    # a stream-K tile's turnstile per MMA warp group


def stream_k_workspace(split_tiles: int, tile: tuple[int, int, int], mma_warp_groups: int = 2) -> tuple[int, int]:
    """(partials, barriers) bytes of the workspace CUTLASS's stream-K scheduler asks for
    with `split_tiles` stream-K tiles in its stream-K (not split-K) variant: one fp32
    accumulator tile per split tile, then one turnstile per MMA warp group of each, each
    part rounded to L2_ALIGNMENT (get_workspace_component_sizes, CUTLASS 4.2)."""
    partials = round_up(split_tiles * tile[0] * tile[1] * 4, L2_ALIGNMENT)
    barriers = round_up(cdiv(split_tiles * mma_warp_groups * BARRIER_BITS, 8), L2_ALIGNMENT)
    return partials, barriers
