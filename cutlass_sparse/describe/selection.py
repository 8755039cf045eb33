"""Pick a configuration from the catalog for a problem, by a simple cost rule.

Until the profiler records measured winners, the rule is: fewest waves of
threadblocks over the device's SMs, weighted by the tile's perimeter (the bytes each
tile must load per K step), avoiding tiles whose K does not divide the problem's K
(that costs a padded copy of x).
"""
from __future__ import annotations

import dataclasses
import functools
import math

from . import catalog, dtypes
from .arith import cdiv, round_up
from .description import SparseGemmConfig
from .problem import Split, allocated_d_layout, x_layout


def cost(threadblock: tuple[int, int, int], m: int, n: int, k: int, sm_count: int) -> float:
    tm, tn, tk = threadblock
    waves = cdiv(cdiv(m, tm) * cdiv(n, tn), sm_count)
    penalty = 1.0 if k % tk == 0 else 4.0
    return waves * (tm + tn) * cdiv(k, tk) * tk * penalty


@functools.lru_cache(maxsize=4096)
def choose_tile(family: str, m: int, n: int, k: int, sm_count: int):
    """The catalog tile (threadblock, warps, stages) of least cost for an M x N x K problem."""
    return min(catalog.load(family).tiles, key=lambda tile: cost(tile[0], m, n, k, sm_count))


# Cost of reducing one accumulator element through the workspace, against loading one
# operand element per K step (both summed over a wave).
REDUCE_WEIGHT = 4.0


# Share of the SMs that clusters of each size can occupy at once: a cluster runs inside
# one GPC, and the H100's GPCs hold 14 to 18 SMs. Measured: 128 64x64 tiles ran 1.45x
# slower in 4x1 clusters than alone (one wave becomes two); 128x256 tiles in 4x1 against
# 2x1 clusters at 640 to 1024 tokens (docs/sweep_8bit_picks_round6_h100.log, 13 shapes, f16,
# bf16, e4m3) won 4-43% or lost 5-40% exactly as waves of 29 clusters of 4 (116 SMs) against
# 66 of 2 predict: 30 (the earlier 0.91) mispredicted 11008x1024 (-18%).
CLUSTER_SM_SHARE = {1: 1.0, 2: 1.0, 4: 0.88, 8: 0.85}


def sm90_tile_cost(threadblock, cluster, splits: int, m: int, n: int, k: int, sm_count: int) -> float:
    """Waves of (cluster-padded) tiles times each tile's work: its MMA area (a wgmma
    narrower than 64 costs as much as 64) plus 64 x the operand rows it loads per K step,
    where TMA multicast shares A among a cluster's CTAs along N and B along M. Fitted to
    the H100 sweep of 2026-11-23 (docs/tune90_k64_h100.log): picks the fastest tile, or
    one within 5% of it, at each of its 17 shapes from 4096 x 16 x 4096 to 28672 x 4096 x
    8192 (before: docs/tune90_splitk_h100.log). A cluster launches whole: a 1x2 cluster
    over one N tile leaves half its CTAs idle, so tile counts round up to the cluster's shape."""
    tm, tn, tk = threadblock
    cm, cn = cluster[0], cluster[1]
    size = cm * cn
    tiles = round_up(cdiv(m, tm), cm) * round_up(cdiv(n, tn), cn) * splits
    waves = cdiv(tiles, max(size, int(sm_count * CLUSTER_SM_SHARE.get(size, 0.8)) // size * size))
    reduce = REDUCE_WEIGHT * tm * tn if splits > 1 else 0.0
    work = tm * max(tn, 64) + 64 * (tm / cn + tn / cm)
    return waves * (work * cdiv(cdiv(k, tk), splits) * tk + reduce)


# The first range of N: N up to 8 (decode; its own 8-wide tiles, operations/sm90.toml).
FIRST_N_RANGE = 8


def n_range(n: int) -> int:
    """The range of N a kernel is chosen for: N up to 8 together, then each power-of-two
    interval (8, 16], (16, 32], ... named by its upper end. Every N of a range runs the
    kernel chosen for that end, so a serving loop whose token count changes at every step
    finds a chosen, compiled kernel after one call per range."""
    return max(FIRST_N_RANGE, 1 << (n - 1).bit_length())


def n_range_start(n: int) -> int:
    """The least N of N's range (selection.n_range)."""
    top = n_range(n)
    return 1 if top == FIRST_N_RANGE else top // 2 + 1


def choose_sm90(m: int, n: int, k: int, sm_count: int, split_k: int | None = None, element: str = "f16",
                element_out: str | None = None):
    """(tile, splits) of least cost among the sm90 catalog's tiles, for N's range (n_range).

    By default only the persistent-scheduler tiles, unsplit: on the H100 sweep no
    stream-K decomposition or K split beat the best of them at any shape
    (docs/tune90_splitk_h100.log). split_k > 1 leaves only stream-K tiles; the profiler
    (cs.tune) times all of them."""
    return _choose_sm90(m, n_range(n), k, sm_count, split_k, element, element_out)


@functools.lru_cache(maxsize=4096)
def _choose_sm90(m: int, n: int, k: int, sm_count: int, split_k: int | None, element: str,
                 element_out: str | None):
    options = []
    family = catalog.load(catalog.for_element("sm90", element))
    for tile in family.tiles:
        if not family.allows(tile, element, element_out or element):
            continue
        if tile[0][1] < 32 and n > tile[0][1]:   # 16-wide tiles: timed for decode (one N tile) only
            continue
        if not family.takes(tile, m, n, k, sm_count):
            continue
        streamk = tile[5] == "streamk"
        if split_k is not None:
            choices = (split_k,) if (streamk or split_k == 1) else ()
        else:
            choices = () if streamk else (1,)
        options += [(tile, s) for s in choices if s <= cdiv(k, tile[0][2])]
    if not options:
        if split_k is not None and split_k > 1 and not any(tile[5] == "streamk" for tile in family.tiles):
            raise ValueError(f"split_k={split_k}: the sm90 {element} kernels have no stream-K tile to split K "
                             f"with (operations/{catalog.for_element('sm90', element)}.toml); leave split_k unset")
        raise ValueError(f"split_k={split_k}: K = {k} has fewer K tiles than slices")
    return min(options, key=lambda o: sm90_tile_cost(o[0][0], o[0][3], o[1], m, n, k, sm_count))


# Where CUTLASS's stream-K scheduler splits a part-empty last wave (under half full: launch.grid.
# stream_k_tiles), the stream-K twin of a persistent tile can beat it: the persistent kernel
# runs ceil(W) waves of tiles, the twin W plus its overhead (the fixups through the workspace,
# and its scheduler's cost even on whole tiles). Twins, each with the producer registers its
# kernel needs not to spill (load_registers), by (tile, cluster): fp16/bf16's and fp8's
# 128x256 tile in 2x1 clusters.
TAIL_TWINS = {((128, 256, 64), (2, 1, 1)): 56, ((128, 256, 128), (2, 1, 1)): 56}
# The overhead in waves, by input bytes: constant, per wave, per 4096 / K.
# 16-bit: fitted to 24 H100 runs of the 128x256x64 2x1 twin against its persistent kernel, f16
# and bf16, 2.18 to 6.3 waves, K 3584 to 28672, and checked on 9 more (1.21 to 2.18 waves,
# where CUTLASS splits every tile or the tail) (docs/NOTES.md, session 32): measured/predicted
# within 4% but for one shape (5120x2048x28672: 0.99-1.00x measured, 1.07x predicted). The
# twin runs where the prediction is at least TAIL_GAIN: 19 of the 29 measured (shape, type)
# rows, +4% to +29% there (geomean +9.6%; 4096x1280x14336 +29%, 4608x2048x28672 +20%,
# 3584x4096x18944 +7-8%) but for that one shape (-1.1% f16, +0.4% bf16); none of the other 10
# gained more than 2% (tests/test_tail_twin.py holds the table).
# 8-bit (e4m3 weights): fitted to 14 H100 runs of the 128x256x128 2x1 twin, 1.21 to 6.3 waves,
# K 4096 to 28672 (docs/probe_streamk_e4m3_h100_session34_call1.log), within 3% but at 1.45
# waves (1.007 predicted, 0.982 measured). Its K term is twice fp16's: the fixup costs the
# same bytes, the mainloop half the time per K. Per k-tile of either (64 deep for 16-bit,
# 128 for 8-bit) the term is the same, about 25 / (K / tile K) waves.
TAIL_OVERHEAD = {2: (0.213, 0.047, 0.384), 1: (0.076, 0.048, 0.780)}
TAIL_GAIN = 1.03
TAIL_TWIN_INPUTS = ("f16", "bf16", "e4m3")   # measured (e4m3 weights take e4m3 or e5m2 x)


def has_tail_twin(threadblock, cluster, schedule: str, scheduler: str, element: str) -> bool:
    """Whether a tile has a stream-K twin for these inputs: a persistent cooperative tile of
    TAIL_TWINS, inputs of TAIL_TWIN_INPUTS (measured)."""
    return ((threadblock, cluster) in TAIL_TWINS and schedule == "cooperative" and scheduler == "persistent"
            and element in TAIL_TWIN_INPUTS)


def tail_split_gain(waves: float, k: int, item: int = 2) -> float:
    """The stream-K twin's predicted speed over its persistent tile's, for a problem of
    `waves` waves of tiles (CUTLASS splits the last one), K and inputs of `item` bytes."""
    constant, per_wave, per_k = TAIL_OVERHEAD[item]
    return math.ceil(waves) / (waves + constant + per_wave * waves + per_k * 4096 / k)


def linear_out_layout(tokens: int, item: int) -> str:
    """How cs.linear has the sm90 family write D [features, tokens]: column-major where a
    row-major D would need staging (a token count not in whole 16-byte vectors: decode
    steps); row-major otherwise, where column-major D measured up to 30% slower per block
    (scripts/device/probe_linear.py, docs/NOTES.md)."""
    return "col" if (tokens * item) % 16 else "row"


# The most of its tiles a swizzle may add as padding. CUTLASS's tile scheduler rounds both
# tile counts up to whole groups (swizzle x cluster tiles) and runs the added tiles through
# the whole mainloop on zeros, which costs more than their share: 128x256x64 tiles at
# 12288 x 4352 x 12288 (17 N tiles) ran 1074 TFLOP/s at swizzle 1, 907 at 2 (6% added), 679
# at 4 (18%); at 5120 x 8192 x 5120 (40 M tiles in 2x1 clusters: groups of 16 at swizzle 8)
# 919 at 8 (20%) against 1087 at 4 (0%). Even 2-3% cost more than a smaller swizzle gains:
# 12544 x 4096 x 4096 1045 at 2 (2%) / 1099 at 1, 18944 x 4096 x 3584 1046 at 4 (2.7%) / 1090
# at 2, 256x192x64 at 16384^3 1009 at 4 (2.3%) / 1023 at 2 (bf16 1038 / 1069)
# (docs/sweep_swizzle_h100_session29.log, docs/sweep_square_tile*_h100_session29.log).
SWIZZLE_PADDING = 0.01


# The 128x128x128 tile in 1x2 clusters (up to three waves, 5-8 N tiles; at 5-6 the 3 clusters
# along N would pad to 4, so _unpadded takes 1 back: in effect N from 769 to 1024) ran 4-9%
# faster at swizzle 2 than at 1: f16 6144x1024x4096 976 / 938 TFLOP/s, 5120x1024x13824
# 920 / 846, bf16 992 / 935 and 934 / 854; at N = 512 level (4096x512x4096 1% behind,
# 11008x512x4096 and 4096x512x14336 level), at 2048 mixed (1024x2048x4096 4 ahead of 2 and 1 by
# 3-9%, 3072x2048x8192 1 ahead by 6-14%) (docs/sweep_raster_h100_session30*.log).
SQUARE_TILE = (128, 128, 128)


def sm90_swizzle(threadblock, m: int, n: int, sm_count: int, default: int, cluster=(1, 1, 1)) -> int:
    """The tile scheduler's swizzle for a problem (it keeps the operand panels of
    neighbouring tiles in L2): 8 from three waves of tiles up where both tile counts are
    multiples of 8 and the scheduler pads neither (in 2x1 clusters, M's groups are of 16)
    (measured +2 to 2.5% at 4096^3, 4096x4096x11008, 8192^3 and 28672x4096x8192 under all
    three raster orders, docs/tune90_raster_h100.log); else 4 from eight waves up (+2% at
    8192^3, +11% at 16384^3 with the earlier 256x128 tile); else 2 for SQUARE_TILE in 1x2
    clusters at 5-8 N tiles; else the catalog's default (1: swizzling a few waves cost up
    to 3x). Never more than the clusters along either side:
    256x128 tiles in 1x2 clusters at 1024 tokens (8 N tiles, 4 clusters) ran at half speed
    with swizzle 8 and as 1 with 4 (docs/sweep_8bit_picks_round5_h100.log); and halved while
    it pads the tile grid by more than SWIZZLE_PADDING."""
    tiles_m, tiles_n = cdiv(m, threadblock[0]), cdiv(n, threadblock[1])
    tiles, clusters = tiles_m * tiles_n, sm90_clusters(threadblock, m, n, cluster)
    if (tiles >= 3 * sm_count and tiles_m % 8 == 0 and tiles_n % 8 == 0 and clusters >= 8
            and swizzle_padding(8, threadblock, m, n, cluster) <= SWIZZLE_PADDING):
        return 8
    swizzle = 4 if tiles >= 8 * sm_count and clusters >= 4 else default
    if (tuple(threadblock) == SQUARE_TILE and tuple(cluster) == (1, 2, 1) and 4 < tiles_n <= 8
            and swizzle == default):
        swizzle = 2   # see SQUARE_TILE
    return _unpadded(swizzle, threadblock, m, n, cluster)


# Rasterize along M (CUTLASS's heuristic goes along N unless N has more tiles) where the
# operand bytes that waves re-read from memory come to at least this many times fewer
# (sm90_raster). Measured on the H100 at the swizzle selection gives, f16 unless named, every
# result checked (docs/sweep_raster_h100_session30*.log): 8448x16384x4096 (ratio 3.1) 768 ->
# 1094 TFLOP/s, 11008x16384x4096 (2.5) 775 -> 1047, 8448x8192x8192 (1.6) 1072 -> 1128 (bf16
# 1118 -> 1181), 13824x16384x7168 (2.0) +4.4%, 3072x4096x13824 (1.5) +2.1%, 3584x4096x18944
# (1.5) +1.5%, 5120x8192x5120 (2.3) +1.1%, 5120x4096x13824 (1.26, below: not taken) +1.0%;
# level at 4608x4096x3584 (1.33) and 7168x4096x7168 (1.0); along M lost 4-14% where the
# ratio is below 1 (18944x4096x3584, 12544x4096x4096, 11008x4096x4096). At swizzle 8 (8192^3,
# 4096^3, 4096x4096x14336, 6144x4096x4096, 14336x16384x4096, 4096x8192x14336, 6144x8192x4096,
# 4096x6144x4096: ratios 1.1-2.5) along M was level (-1% to +1%): not taken; at 4,
# 7168x8192x7168 (1.8) +1.4%. At the power cap (sweep_swizzle.py --heat 1.2): 8448x8192x8192
# 940 -> 970, 11008x16384x4096 720 -> 935.
# e4m3 (128x256x128 c2x1) the same way: 8448x16384x4096 1398 -> 1953, 11008x16384x4096 1437 ->
# 1871, 8448x8192x8192 1852 -> 2020, 5120x8192x5120 +2.8%, 3072x4096x13824 +1.1%, 3584x4096x18944
# +0.5%; 18944x4096x3584 (below) -5%. s8's 256x128 tiles in 1x2 clusters run along M already
# there (N has more tiles) (docs/sweep_raster_h100_session30_round3.log).
RASTER_GAIN = 1.3
ALONG_M = 1
L2_BYTES = 50 << 20   # the H100's and H200's L2


def sm90_raster(threadblock, m: int, n: int, k: int, sm_count: int, swizzle: int,
                item_a: int = 2, item_b: int = 2, cluster=(1, 1, 1)) -> int:
    """The tile scheduler's raster order: 0 (CUTLASS's heuristic) or ALONG_M. Each wave of
    persistent CTAs runs a band of tiles; a band along N re-reads B once a wave (up to once
    per M tile), a band along M re-reads A, which 2:4 compression makes the cheaper operand
    per row (values half, metadata an eighth of a byte per element). Along M where the
    heuristic goes along N, the swizzle is at most 4 and the re-read bytes fall by
    RASTER_GAIN or more; operands that fit in L2 are not re-read at all. CUTLASS's heuristic
    compares the tile counts as its scheduler pads them (whole swizzle x cluster groups)."""
    tiles_m, tiles_n = cdiv(m, threadblock[0]), cdiv(n, threadblock[1])
    padded_m = round_up(round_up(tiles_m, cluster[0]), swizzle * cluster[0])
    padded_n = round_up(round_up(tiles_n, cluster[1]), swizzle * cluster[1])
    if padded_n > padded_m or swizzle > 4:   # CUTLASS already runs along M; or level at swizzle 8
        return 0
    a_bytes, b_bytes = m * k * (item_a / 2 + 1 / 8), n * k * item_b
    if a_bytes + b_bytes <= L2_BYTES:
        return 0
    waves = tiles_m * tiles_n / sm_count
    along_m = max(1.0, min(tiles_n, waves)) * a_bytes + b_bytes
    along_n = max(1.0, min(tiles_m, waves)) * b_bytes + a_bytes
    return ALONG_M if along_n >= RASTER_GAIN * along_m else 0


def operand_items(element: str, x_element: str) -> tuple[int, int]:
    """Bytes per element of A and of x (sm90_raster's item_a, item_b)."""
    return dtypes.numpy_dtype(element).itemsize, dtypes.numpy_dtype(x_element).itemsize


def sm90_clusters(threadblock, m: int, n: int, cluster=(1, 1, 1)) -> int:
    """Clusters of tiles along the scarcer side of an M x N problem."""
    return min(cdiv(cdiv(m, threadblock[0]), cluster[0]), cdiv(cdiv(n, threadblock[1]), cluster[1]))


def sm90_swizzle_capped(swizzle: int, threadblock, m: int, n: int, cluster=(1, 1, 1)) -> int:
    """A swizzle halved until it is no more than the clusters along the scarcer side (more
    ran at half speed, see sm90_swizzle) and pads no more than SWIZZLE_PADDING: for a
    profiled winner recorded at another M or N of its signature's bucket."""
    clusters = sm90_clusters(threadblock, m, n, cluster)
    while swizzle > 1 and swizzle > clusters:
        swizzle //= 2
    return _unpadded(swizzle, threadblock, m, n, cluster)


def swizzle_padding(swizzle: int, threadblock, m: int, n: int, cluster=(1, 1, 1)) -> float:
    """The share of tiles CUTLASS's tile scheduler adds at this swizzle, as given: it rounds
    the tile counts (whole clusters) up to whole groups of swizzle clusters, along M and along
    N. CUTLASS itself first cuts a swizzle the CTAs along the smaller side cannot fill
    (launch.grid.log_swizzle); such a swizzle pads that side by 60% or more here, so
    _unpadded halves it past that point anyway."""
    blocks_m, blocks_n = round_up(cdiv(m, threadblock[0]), cluster[0]), round_up(cdiv(n, threadblock[1]), cluster[1])
    padded = round_up(blocks_m, swizzle * cluster[0]) * round_up(blocks_n, swizzle * cluster[1])
    return padded / (blocks_m * blocks_n) - 1.0


def _unpadded(swizzle: int, threadblock, m: int, n: int, cluster) -> int:
    while swizzle > 1 and swizzle_padding(swizzle, threadblock, m, n, cluster) > SWIZZLE_PADDING:
        swizzle //= 2
    return swizzle


def output_alignments(family: str, element_out: str) -> tuple[int, ...]:
    """C/D vector widths the catalog offers, capped at 16-byte accesses."""
    item = dtypes.numpy_dtype(element_out).itemsize
    least = 8 if element_out == "s8" else 1    # CUTLASS writes int8 D 8 or 16 at a time
    return tuple(a for a in catalog.load(family).alignments_c if a * item <= 16 and a >= least)


def config_for_shape(m: int, n: int, k: int, element: str, element_out: str, layout_b: str,
                     sm_count: int, family: str = "sm80") -> SparseGemmConfig:
    """The catalog's pick for contiguous, allocator-aligned operands of this shape: what
    matmul runs, but on sm90 where its last wave splits (matmul may then run the tile's
    stream-K twin: launch.sm90_choice.tail_twin; plans.make says what it runs).

    Needs no GPU: the CLI's --emit and the profiler's candidate list use it.
    """
    is_sm90 = family == "sm90"
    family = catalog.for_element(family, element)
    fam = catalog.load(family)
    layout_b = x_layout(layout_b, k, n)
    if is_sm90:   # TMA: whole 16-byte vectors (the library stages operands that break them)
        tile, _ = choose_sm90(m, n, k, sm_count, None, element, element_out)
        config = fam.config(tile, element, element_out, layout_b, 16 // dtypes.numpy_dtype(element).itemsize,
                            16 // dtypes.numpy_dtype(element_out).itemsize, reads_c=False)   # no C: beta = 0
        swizzle = sm90_swizzle(tile[0], m, n, sm_count, config.swizzle, tile[3])
        return dataclasses.replace(config, swizzle=swizzle, layout_c=allocated_d_layout("sm90", n, element_out),
                                   raster=sm90_raster(tile[0], m, n, k, sm_count, swizzle,
                                                      *operand_items(element, config.b_element), tile[3]))
    if element == "s8":
        layout_b = "col"   # int8 B must be K-major
    m_pad = cdiv(m, 32) * 32
    tile = choose_tile(family, m_pad, n, k, sm_count)
    k_eff = cdiv(k, tile[0][2]) * tile[0][2]
    contiguous_b = n if layout_b == "row" else k_eff
    alignment_b = next((a for a in fam.alignments_b if contiguous_b % a == 0), None)
    if alignment_b is None:   # an odd-N row-major x is staged column-major (launch.sm80)
        layout_b, alignment_b = "col", next(a for a in fam.alignments_b if k_eff % a == 0)
    alignment_c = next(a for a in output_alignments(family, element_out) if n % a == 0)
    return fam.config(tile, element, element_out, layout_b, alignment_b, alignment_c)


def gemm_variant(config: SparseGemmConfig, split: Split, activation: str) -> SparseGemmConfig:
    """The sm80 GEMM a split needs: parallel writes fp32 partials with no activation (the
    reduction applies the epilogue); otherwise the epilogue is the GEMM's own."""
    if split.parallel:   # fp32 vectors are at most 4 wide (16 bytes); N stays a multiple
        return dataclasses.replace(config, element_out="f32", alignment_c=min(config.alignment_c, 4),
                                   activation="identity")
    return dataclasses.replace(config, activation=activation)


def partial_ld(n: int) -> int:
    """Leading dimension of parallel split-K's fp32 partial tiles: padded so every vector width fits."""
    return round_up(n, 8)


def reduction_alignment(element_out: str, n: int, *arrays: tuple[int, int, int]) -> int:
    """Widest vector the split-K reduction may use: N, the partials' ld and each
    (alignment or pointer, ld, itemsize)."""
    for a in output_alignments("sm80", element_out):   # float outputs only (sm80.toml)
        if n % a == 0 and partial_ld(n) % a == 0 and all(
                ptr % (a * item) == 0 and ld % a == 0 for ptr, ld, item in arrays):
            return a
    return 1
