import pytest
import dataclasses
from cutlass_library.library import DataType, LayoutType, OpcodeClass

from cutlass_sparse.describe import catalog, dtypes, selection
from cutlass_sparse.describe.description import SparseGemmConfig


def make(**over):
    base = dict(family="sm80", element="f16", element_out="f16", layout_b="col",
                threadblock=(128, 128, 64), warps=(2, 2, 1), stages=3, instruction=(16, 8, 32),
                alignment_a=8, alignment_b=8, alignment_c=8, swizzle=8)
    base.update(over)
    return SparseGemmConfig(**base)


def test_procedural_name_follows_cutlass():
    assert make().name == "cutlass_tensorop_f16_s16832spgemm_f16_128x128_64x3_tn_align8_swz8"
    assert make(layout_b="row", element_out="f32").name == \
        "cutlass_tensorop_s16832spgemm_f16_128x128_64x3_tt_align8_swz8"
    assert make(alignment_c=1).name.endswith("_align8_b8c1_swz8")
    assert make(element="bf16", element_out="bf16").name.startswith("cutlass_tensorop_bf16_s16832spgemm_bf16_")


def test_descriptions_use_cutlass_library_types():
    cfg = make(element="bf16", element_out="f32")
    assert cfg.math_instruction.element_a == DataType.bf16
    assert cfg.math_instruction.element_accumulator == DataType.f32
    assert cfg.math_instruction.opcode_class == OpcodeClass.TensorOp
    assert cfg.tile_description.threadblock_shape == [128, 128, 64]
    assert cfg.tensor_b.layout == LayoutType.ColumnMajor
    assert cfg.tensor_c.element == DataType.f32
    assert cfg.tensor_e.element == DataType.u16
    assert cfg.threads == 128


def test_key_is_stable_and_distinguishes_fields():
    assert make().key == make().key
    assert make().key != make(stages=4).key
    assert SparseGemmConfig.from_json(make().to_json()) == make()


@pytest.mark.parametrize("field, value", [("element", "f32"), ("element_out", "bf16"),
                                          ("layout_b", "diag"), ("swizzle", 3), ("threadblock", (128, 128, 32))])
def test_invalid_configs_are_refused(field, value):
    with pytest.raises(ValueError, match=field.split("_")[0]):
        make(**{field: value})


def test_catalog_enumerates_unique_names():
    fam = catalog.load("sm80")
    widest = fam.enumerate()
    every = fam.enumerate(widest_only=False)
    assert len(widest) == len(fam.tiles) * 2 * 2 * 2   # inputs x outputs x B layouts
    assert len({c.name for c in every}) == len(every)
    assert catalog.find(widest[0].name) == widest[0]
    with pytest.raises(ValueError, match="no configuration named"):
        catalog.find("cutlass_nothing")


def test_selection_prefers_big_tiles_for_big_problems_and_small_for_small():
    big = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", sm_count=132)
    small = selection.config_for_shape(64, 16, 4096, "f16", "f16", "row", sm_count=132)
    assert big.threadblock[0] * big.threadblock[1] > small.threadblock[0] * small.threadblock[1]
    odd = selection.config_for_shape(100, 3, 16, "f16", "f16", "col", sm_count=132)
    assert odd.alignment_c == 1
    # an odd-N row-major x is staged column-major: the same kernel as a column-major x
    assert selection.config_for_shape(100, 3, 16, "f16", "f16", "row", sm_count=132) == odd


# The H100 sweeps of session 6 (docs/tune90_k64_h100.log; swizzles from
# docs/tune90_raster_h100.log and docs/tune90_large_h100.log, 11008x4096x4096's from
# docs/sweep_swizzle_h100_session29.log): (M, N, K) -> (tile, cluster, schedule) of the fastest
# kernel, or one within 5% of it, and the swizzle that measured best.
SM90_MEASURED = {
    # decode: 16-wide tiles of K 256 (docs/sweep_decode_n16_h100.log); n = 64: tile K 256
    # (docs/sweep_decode_k256_h100.log)
    (4096, 16, 4096): ((64, 16, 256), (4, 1, 1), "pingpong", 1),
    (14336, 16, 4096): ((64, 16, 256), (4, 1, 1), "pingpong", 1),
    (4096, 16, 14336): ((64, 16, 256), (4, 1, 1), "pingpong", 1),
    (28672, 16, 8192): ((64, 16, 256), (4, 1, 1), "pingpong", 1),
    (8192, 16, 28672): ((64, 16, 256), (1, 1, 1), "pingpong", 1),
    (14336, 64, 4096): ((64, 64, 256), (4, 1, 1), "pingpong", 1),
    (4096, 64, 14336): ((64, 64, 256), (4, 1, 1), "pingpong", 1),
    (4096, 128, 4096): ((64, 64, 128), (1, 1, 1), "pingpong", 1),
    (4096, 512, 4096): ((128, 128, 128), (1, 2, 1), "cooperative", 1),
    (11008, 512, 4096): ((128, 128, 128), (1, 2, 1), "cooperative", 1),
    (4096, 512, 14336): ((128, 128, 128), (1, 2, 1), "cooperative", 1),
    (14336, 512, 4096): ((128, 256, 64), (4, 1, 1), "cooperative", 1),   # docs/sweep_8bit_picks_round2_h100.log
    (6144, 512, 4096): ((128, 256, 64), (4, 1, 1), "cooperative", 1),
    (28672, 512, 8192): ((128, 256, 64), (4, 1, 1), "cooperative", 1),
    (8192, 512, 28672): ((128, 256, 64), (2, 1, 1), "cooperative", 1),
    (14336, 4096, 4096): ((128, 256, 64), (2, 1, 1), "cooperative", 8),
    (4096, 4096, 4096): ((128, 256, 64), (2, 1, 1), "cooperative", 8),
    (11008, 4096, 4096): ((128, 256, 64), (2, 1, 1), "cooperative", 1),   # 4 and 2 pad 86 M tiles to 88
    (4096, 4096, 11008): ((128, 256, 64), (2, 1, 1), "cooperative", 8),
    (8192, 8192, 8192): ((128, 256, 64), (2, 1, 1), "cooperative", 8),
    (28672, 4096, 8192): ((128, 256, 64), (2, 1, 1), "cooperative", 8),
}


@pytest.mark.parametrize("shape", list(SM90_MEASURED), ids=lambda s: "x".join(map(str, s)))
def test_sm90_selection_follows_the_h100_sweeps(shape):
    config = selection.config_for_shape(*shape, "f16", "f16", "row", 132, "sm90")
    tile, cluster, schedule, swizzle = SM90_MEASURED[shape]
    assert (config.threadblock, config.cluster, config.schedule, config.swizzle) == (tile, cluster, schedule,
                                                                                       swizzle)


def test_sm90_cost_counts_the_idle_half_of_a_cluster():
    # 11008 x 128: one N tile, so a 1x2 cluster of 128x128 tiles runs 86 busy CTAs and 86
    # idle ones (two waves, not one); measured at under 280 TFLOP/s against 372 for 64x128
    # ping-pong. Multicast of A saves less than the second wave costs.
    one = selection.sm90_tile_cost((128, 128, 128), (1, 1, 1), 1, 11008, 128, 4096, 132)
    two = selection.sm90_tile_cost((128, 128, 128), (1, 2, 1), 1, 11008, 128, 4096, 132)
    assert two > 1.5 * one
    tile, _ = selection.choose_sm90(11008, 128, 4096, 132)
    assert tile[3][1] == 1


def test_default_sm90_selection_never_splits_k():
    # No K split beat the best unsplit tile on the H100 at any swept shape; split_k asks for one.
    for shape in [(4096, 16, 4096), (4096, 16, 11008), (4096, 128, 4096), (11008, 128, 4096)]:
        assert selection.choose_sm90(*shape, 132)[1] == 1
    tile, splits = selection.choose_sm90(4096, 16, 4096, 132, split_k=3)
    assert splits == 3 and tile[5] == "streamk"


def test_a_tile_limited_to_some_outputs_is_refused_clearly_and_never_chosen(monkeypatch):
    # A catalog tile may carry `outputs` (e.g. a float32 epilogue that leaves too little
    # shared memory for two mainloop stages): it is refused for the others and never chosen.
    import dataclasses

    from cutlass_sparse.describe import catalog
    from cutlass_sparse.plan import records as profiler

    fam = catalog.load("sm90")
    wide = fam.tiles[0]
    limited = dataclasses.replace(fam, limits=((wide, ("same",), "one mainloop stage"),))
    monkeypatch.setattr(catalog, "load", lambda family: limited if family == "sm90" else fam)
    selection._choose_sm90.cache_clear()
    assert not limited.allows(wide, "f16", "f32") and limited.allows(wide, "bf16", "bf16")
    name = "x".join(map(str, wide[0]))
    with pytest.raises(ValueError, match=f"{name} tile .* no f32 output: one mainloop stage"):
        limited.config(wide, "f16", "f32", "row", 8, 4)
    assert all((c.threadblock, c.cluster) != (wide[0], wide[3]) for c in limited.enumerate() if c.element_out == "f32")
    for shape in [(4096, 4096, 4096), (256, 8192, 4096), (128, 16384, 1024)]:
        assert selection.choose_sm90(*shape, 132, None, "f16", "f32")[0] != wide
    assert selection.choose_sm90(4096, 4096, 4096, 132, None, "f16", "f16")[0] == wide
    assert all(c.tile != wide for c in profiler.candidates("sm90", 4096, "bf16", "f32"))
    selection._choose_sm90.cache_clear()


def test_problem_is_its_own_plan_key():
    """Two problems that need different kernels or parameters never compare equal; the
    same problem made again (new pointers, same alignment class) does."""
    from cutlass_sparse.describe.problem import Epilogue, Operand, Problem, alignment_class

    base = Problem.contiguous("sm90", 4096, 16, 4096)
    assert base == Problem.contiguous("sm90", 4096, 16, 4096) and hash(base) == hash(
        Problem.contiguous("sm90", 4096, 16, 4096))
    others = [Problem.contiguous("sm90", 4096, 17, 4096), Problem.contiguous("sm80", 4096, 16, 4096),
              Problem.contiguous("sm90", 4096, 16, 4096, element="bf16"),
              Problem.contiguous("sm90", 4096, 16, 4096, layout_b="col"),
              Problem.contiguous("sm90", 4096, 16, 4096, activation="gelu"),
              dataclasses.replace(base, x=Operand("row", 24, 16)),          # padded leading dimension
              dataclasses.replace(base, x=Operand("row", 16, 2)),           # offset view
              dataclasses.replace(base, out=Operand("row", 16, 16)),        # a caller's out
              dataclasses.replace(base, epilogue=Epilogue(alpha=2.0)),
              dataclasses.replace(base, split_k=2), dataclasses.replace(base, device_id=1)]
    assert len({base, *others}) == len(others) + 1
    # alignment classes: what a pointer allows, capped at 16 bytes
    assert [alignment_class(p) for p in (0, 0x7f0000000100, 0x7f0000000102, 0x7f0000000108)] == [16, 16, 2, 8]


def test_sm90_int8_kernels_accumulate_in_int32():
    """catalog sm90_s8: int32 accumulation; an int32 D keeps the epilogue in int32 (exact
    past float's 24 bits), scaled outputs compute in float; scales never write int32."""
    import dataclasses

    from cutlass_sparse.emit.registry import emit

    fam = catalog.load("sm90_s8")
    raw = fam.config(fam.tiles[0], "s8", "s32", "col", 16, 4)
    source = emit(raw).source
    assert "int32_t, TileShape, ClusterShape" in source                      # the mainloop's accumulator
    assert "EpilogueTileAuto, int32_t, int32_t," in source
    assert "LinearCombination<int32_t, int32_t, int32_t, float>" in source
    scaled = dataclasses.replace(fam.config(fam.tiles[0], "s8", "s8", "col", 16, 16), scales="row_col", layout_c="col")
    assert "EpilogueTileAuto, int32_t, float," in emit(scaled).source
    with pytest.raises(ValueError, match="int32 output is the raw accumulator"):
        dataclasses.replace(raw, scales="row_col")
    with pytest.raises(ValueError, match="fast_accum: sm90 fp8 kernels only"):
        dataclasses.replace(raw, fast_accum=True)
    assert catalog.for_element("sm90", "s8") == "sm90_s8"
    assert "s32" in dtypes.outputs_for("s8", "sm90") and "bf16" not in dtypes.outputs_for("s8", "sm80")


def test_narrow_tiles_only_where_one_covers_n():
    # 64x8 tiles for N <= 8 (their own range), 64x16 for N of 9 to 16 (timed at decode
    # only); N of 17 and up keeps the 32- and 64-wide tiles the sweeps chose, whatever M.
    for element in ("f16", "bf16", "e4m3", "s8"):   # the 8-bit catalogs have them too (64x8x512)
        for m in (64, 1000, 4096, 8192, 28672):
            width = lambda n: selection.choose_sm90(m, n, 4096, 132, element=element)[0][0][1]  # noqa: E731
            assert [width(n) for n in (1, 4, 8, 9, 16)] == [8, 8, 8, 16, 16], (element, m)
            assert all(width(n) >= 32 for n in (17, 32, 64, 128)), (element, m)


def test_a_single_column_x_reads_as_column_major():
    # cs.matmul reads x [K, 1] as column-major (api.operands.matrix_layout), so warm-up,
    # presets and compile-only name that kernel for N = 1, in both families.
    from cutlass_sparse.describe.problem import x_layout

    assert x_layout("row", 4096, 1) == "col" and x_layout("row", 1, 1) == "row" and x_layout("row", 64, 2) == "row"
    for family in ("sm80", "sm90"):
        assert selection.config_for_shape(4096, 1, 4096, "f16", "f16", "row", 132, family).layout_b == "col"
        assert selection.config_for_shape(4096, 2, 4096, "f16", "f16", "row", 132, family).layout_b == "row"


@pytest.mark.parametrize("element, element_out, tile, wide, at_256, most", [
    ("e4m3", "bf16", (128, 256, 128), (2, 1, 1), True, 1024), ("s8", "s32", (128, 256, 128), (1, 2, 1), False, 1024),
    ("f16", "f16", (128, 256, 64), (2, 1, 1), True, 1024), ("bf16", "bf16", (128, 256, 64), (2, 1, 1), True, 1024)])
def test_4x1_cluster_tiles_only_up_to_their_max_n(element, element_out, tile, wide, at_256, most):
    """The 128x256 tiles in 4x1 clusters won at the 512-token rows of many M tiles and lost
    from 2048 tokens up (docs/sweep_8bit_picks_h100.log, docs/sweep_8bit_picks_round2_h100.log;
    int8's also at N = 256): the catalog's min_n / max_n keep them to the N they won at.
    Within that, the cost rule keeps the 2x1 cluster where 4x1 clusters (29 at once) need
    more waves: at 1024 tokens the 4x1 won at M 13824, 14336 and 18432 and lost at 4096,
    8192, 11008, 12288 and 28672 (docs/sweep_8bit_picks_round6_h100.log, int8's against its
    256x128 c1x2 in docs/sweep_8bit_picks_round6_s8_h100.log)."""
    fam = catalog.load(catalog.for_element("sm90", element))
    four = next(t for t in fam.tiles if t[0] == tile and t[3] == (4, 1, 1))
    assert fam.takes_n(four, most) and not fam.takes_n(four, 2 * most)
    for n in (300, 512):
        assert selection.choose_sm90(14336, n, 4096, 132, None, element, element_out)[0] == four
    assert (selection.choose_sm90(14336, 256, 4096, 132, None, element, element_out)[0] == four) == at_256
    assert selection.choose_sm90(14336, 4096, 4096, 132, None, element, element_out)[0][3] == wide
    assert selection.choose_sm90(14336, most + 1, 4096, 132, None, element, element_out)[0] != four
    for m, k in ((4096, 4096), (8192, 4096), (11008, 4096), (12288, 4096), (28672, 8192)):   # lost 5-40%
        assert selection.choose_sm90(m, 1024, k, 132, None, element, element_out)[0] != four, m
    for m in (13824, 14336, 18432):   # won 5-8%
        assert selection.choose_sm90(m, 1024, 4096, 132, None, element, element_out)[0] == four, m
    assert selection.choose_sm90(8192, 512, 28672, 132, None, element, element_out)[0][3] == wide


def test_a_catalog_tile_names_its_epilogue_subtile():
    s8 = catalog.load("sm90_s8")
    four = next(t for t in s8.tiles if t[3] == (4, 1, 1) and t[0] == (128, 256, 128))
    config = s8.config(four, "s8", "s32", "col", 16, 4, reads_c=False)
    assert config.epilogue_tile == (128, 16) and config.name.endswith("_epi128x16_noc")
    assert catalog.find(config.name) == config
    assert s8.config(s8.tiles[0], "s8", "s32", "col", 16, 4).epilogue_tile == ()


def test_swizzle_never_exceeds_the_clusters_along_a_side():
    """256x128 int8 tiles in 1x2 clusters at 1024 tokens: 8 N tiles but 4 clusters along N;
    swizzle 8 ran at half speed there, 4 and 1 alike (docs/sweep_8bit_picks_round5_h100.log)."""
    tile = ((256, 128, 128), (1, 2, 1))   # int8's pick at 28672x1024 (14336x1024 now runs 4x1 clusters)
    assert selection.choose_sm90(28672, 1024, 8192, 132, None, "s8", "s32")[0][0::3] == tile
    for m in (14336, 28672):
        assert selection.sm90_swizzle(tile[0], m, 1024, 132, 1, tile[1]) < 8
    assert selection.sm90_swizzle((256, 128, 128), 14336, 2048, 132, 1, (1, 2, 1)) == 8   # 8 clusters: as before


def test_swizzle_never_pads_the_tiles_by_more_than_a_few_percent():
    """CUTLASS's scheduler rounds the tile counts up to whole groups of swizzle x cluster
    tiles and runs the added ones on zeros (12288 x 4352 x 12288 ran at 0.69x cuSPARSELt with
    17 N tiles padded to 20)."""
    wide, c2x1 = (128, 256, 64), (2, 1, 1)
    assert selection.swizzle_padding(4, wide, 12288, 4352, c2x1) == 20 / 17 - 1
    assert selection.swizzle_padding(8, wide, 5120, 8192, c2x1) == 48 / 40 - 1   # 40 M tiles, groups of 16
    assert selection.swizzle_padding(8, wide, 8192, 8192, c2x1) == 0.0
    swizzles = {(m, n): selection.sm90_swizzle(wide, m, n, 132, 1, c2x1)
                for m, n in ((8192, 8192), (5120, 8192), (12288, 4352), (11008, 4096), (13824, 4096))}
    # 11008: 86 M tiles padded to 88 at 4 and at 2 (2.3%); 13824: 108 -> 112 at 4, 108 at 2;
    # 8448: 66 -> 68 at 2 (3%)
    assert swizzles == {(8192, 8192): 8, (5120, 8192): 4, (12288, 4352): 1, (11008, 4096): 1, (13824, 4096): 2}
    assert selection.sm90_swizzle(wide, 8448, 8192, 132, 1, c2x1) == 1
    assert selection.sm90_swizzle_capped(8, wide, 5120, 8192, c2x1) == 4


def test_a_recorded_swizzle_is_capped_by_the_clusters_of_the_shape_it_runs(monkeypatch):
    """A profiled winner applies to every M and N of its signature's bucket (N rounded up
    to a power of two above 256), and a plan's kernel to every N of its range: swizzle 8
    timed at N = 2048 (8 clusters of the 128x256 c2x1 tile along N) must not run at N = 1104
    (5 clusters), where 8 measured half speed, whichever of the two is planned first."""
    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.launch import sm90
    from cutlass_sparse.launch.sm90_choice import resolve
    from cutlass_sparse.plan import plans
    from cutlass_sparse.plan.records import Choice

    tile = next(t for t in catalog.load("sm90").tiles if t[0][:2] == (128, 256) and t[3] == (2, 1, 1))
    choice = Choice("sm90", tile, 1, "serial", 8)
    swizzles = {}
    for m, n in ((8192, 4096), (8192, 1104), (8192, 512), (1024, 4096), (256, 4096)):
        problem = Problem.contiguous("sm90", m, n, 4096, sm_count=132)
        swizzles[m, n] = resolve(problem, None, choice)[0].swizzle
    # clusters along the scarcer side: 16, 5, 2, 4, 1; at N = 1104 the 5 N tiles would be
    # padded to 8 at swizzle 4 and to 6 at 2 (selection.SWIZZLE_PADDING), so 1
    assert swizzles == {(8192, 4096): 8, (8192, 1104): 1, (8192, 512): 2, (1024, 4096): 4, (256, 4096): 1}
    assert selection.sm90_swizzle_capped(2, (128, 256, 64), 8192, 8192, (2, 1, 1)) == 2   # never raised

    class Compiled:   # plans without a compile or a GPU: only the swizzle is looked at
        key, from_cache, compile_seconds, constants, symbol = "k", True, 0.0, {}, "k"

    monkeypatch.setattr(sm90.kernels, "get", lambda config, target: Compiled())
    monkeypatch.setattr(sm90.modules, "load", lambda compiled: object())
    for order in ((2048, 1104), (1104, 2048)):   # one N range: the second plan reuses the first's kernel
        plans.clear()
        made = {n: plans.make(Problem.contiguous("sm90", 8192, n, 4096, sm_count=132), None, choice) for n in order}
        assert {n: plan.swizzle for n, plan in made.items()} == {2048: 8, 1104: 1}, order
    plans.clear()


@pytest.mark.parametrize("element", ["f16", "bf16"])
def test_tall_tile_only_for_the_largest_problems(element):
    """256x192x64 (drained) ran 5-66% faster than 128x256x64 from M 12288, N 8193 and K
    24576 up (docs/sweep_tall_drained_round19_h100_session27.log); from K 12288 it is level
    in 20-call timings and 13-15% faster at the power cap (docs/sustained_h100_session28.log);
    since session 29 (docs/sustained_corners_h100_session29.log) from M 8192 and N's range
    (4096, 8192] as well. It trails at 8192^3, 12288^2 x 8192 and where N or M is small: the
    catalog's min_m, min_n and min_k keep it to M >= 8192, N > 4096 and K >= 12288, where the
    cost rule prefers it."""
    fam = catalog.load(catalog.for_element("sm90", element))
    tall = next(t for t in fam.tiles if t[0] == (256, 192, 64))
    large_only = [limited for limited, _ in fam.mk_bounds]
    assert tall in large_only and fam.tiles[0] not in large_only
    won = [(16384, 16384, 24576), (16384, 16384, 32768), (12288, 12288, 32768), (16384, 9216, 32768),
           (16384, 10240, 24576), (12288, 8448, 24576), (12288, 8193, 24576), (16384, 16384, 16384),
           (12288, 12288, 12288), (12288, 4352, 12288), (12288, 6144, 12288), (16384, 8192, 12288),
           (8192, 8448, 12288), (8192, 16384, 12288), (8192, 12288, 16384), (16384, 8192, 16384),
           (8192, 16384, 16384), (16384, 6144, 16384), (16384, 8192, 32768)]   # the last: +8% f16, +6% bf16
    lost = [(8192, 8192, 8192), (28672, 8192, 8192), (32768, 8192, 8192), (16384, 16384, 8192),
            (12288, 12288, 8192), (4096, 16384, 32768), (5120, 4096, 13824), (11008, 4096, 4096)]
    for m, n, k in won:
        assert selection.choose_sm90(m, n, k, 132, None, element)[0] == tall, (m, n, k)
    for m, n, k in lost:
        assert selection.choose_sm90(m, n, k, 132, None, element)[0] != tall, (m, n, k)
    assert fam.takes(tall, 8192, 4097, 12288, 132) and not fam.takes(tall, 8191, 16384, 12288, 132)
    assert not fam.takes(tall, 8192, 4096, 12288, 132) and not fam.takes(tall, 8192, 16384, 12287, 132)
    # no 8-bit catalog has such a tile: their picks stay
    assert not any(catalog.load(name).mk_bounds for name in ("sm90_fp8", "sm90_s8"))


def test_the_raster_order_is_a_run_time_field_of_sm90_configs():
    """The tile scheduler's raster order, like its swizzle, is an argument of the setup
    entry: configurations that differ only in it share one binary (and one cache key with
    the configurations made before the field existed); sm80 kernels have none."""
    config = selection.config_for_shape(8192, 8192, 8192, "f16", "f16", "row", 132, "sm90")
    along_m = dataclasses.replace(config, raster=1)
    assert config.raster == 0 and along_m.as_compiled() == config.as_compiled()
    assert along_m.key != config.key and along_m.as_compiled().key == config.as_compiled().key
    with pytest.raises(ValueError, match="raster 3 must be one of"):
        dataclasses.replace(config, raster=3)
    with pytest.raises(ValueError, match="sm80 takes 0"):
        make(raster=1)


def test_waves_that_reread_b_rasterize_along_m():
    """A band of tiles along N re-reads B once a wave, a band along M re-reads A, which 2:4
    compression makes the cheaper operand: 8448 x 16384 x 4096 ran 768 TFLOP/s along N (CUTLASS's
    heuristic: M has more tiles) and 1094 along M; where the waves re-read A more (18944 x 4096 x
    3584) along M lost 14%, and at swizzle 8 it was level."""
    wide = (128, 256, 64)
    along_m = {s: selection.sm90_raster(wide, *s, 132, 1) for s in
               ((8448, 16384, 4096), (11008, 16384, 4096), (8448, 8192, 8192), (3072, 4096, 13824),
                (3584, 4096, 18944), (18944, 4096, 3584), (12544, 4096, 4096), (11008, 4096, 4096),
                (7168, 4096, 7168), (5120, 4096, 13824))}
    assert [s for s, r in along_m.items() if r == selection.ALONG_M] == [
        (8448, 16384, 4096), (11008, 16384, 4096), (8448, 8192, 8192), (3072, 4096, 13824), (3584, 4096, 18944)]
    assert selection.sm90_raster(wide, 8192, 8192, 8192, 132, 8) == 0          # swizzle 8: level, left alone
    assert selection.sm90_raster(wide, 4608, 4096, 3584, 132, 1) == 0          # both operands fit in L2
    assert selection.sm90_raster(wide, 4096, 16384, 4096, 132, 1) == 0         # N has more tiles: CUTLASS's already
    config = selection.config_for_shape(8448, 8192, 8192, "bf16", "bf16", "row", 132, "sm90")
    assert (config.swizzle, config.raster) == (1, selection.ALONG_M)
    # 8-bit: e4m3's 128x256x128 tile gained 40% at 8448 x 16384 x 4096 along M and lost 5% at
    # 18944 x 4096 x 3584; s8's 256x128 tile in 1x2 clusters runs along M there already
    fp8 = {s: selection.config_for_shape(*s, "e4m3", "bf16", "col", 132, "sm90").raster
           for s in ((8448, 16384, 4096), (18944, 4096, 3584))}
    assert fp8 == {(8448, 16384, 4096): selection.ALONG_M, (18944, 4096, 3584): 0}
    assert selection.config_for_shape(8448, 16384, 4096, "s8", "s32", "col", 132, "sm90").raster == 0


def test_the_square_tile_swizzles_by_two_at_five_to_eight_n_tiles():
    square, c1x2 = (128, 128, 128), (1, 2, 1)
    assert selection.SQUARE_TILE == square
    swizzles = {n: selection.sm90_swizzle(square, 3072, n, 132, 1, c1x2) for n in (512, 768, 1024, 2048)}
    assert swizzles == {512: 1, 768: 1, 1024: 2, 2048: 1}   # 768: 3 clusters padded to 4 at 2
    assert selection.config_for_shape(5120, 1024, 13824, "f16", "f16", "row", 132, "sm90").swizzle == 2
