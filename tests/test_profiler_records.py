"""The profiler's CPU side: candidates, signatures, the winners table in compiled_cache.db
(round trip, checksum, merge, read-only), and the --tune shapes file."""
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from cutlass_sparse.describe import catalog, selection

from cutlass_sparse.plan import records as profiler
from cutlass_sparse.describe.problem import Problem
from cutlass_sparse.profiler.tune import Row, format_table, profiled_choices
from cutlass_sparse.build.cache import KernelCache

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import warmup_cache  # noqa: E402

SIGNATURE = profiler.Signature("sm80", 4096, 16, 4096, "f16", "f16", "row", "identity", "NVIDIA H100 80GB HBM3", "90")


@pytest.mark.parametrize("family", ["sm80", "sm90"])
def test_candidates_cover_every_tile_and_include_the_heuristic(family):
    choices = profiler.candidates(family, 4096)
    tiles = {c.tile for c in choices}
    assert tiles == set(catalog.load(family).tiles)
    if family == "sm80":
        default = selection.choose_tile("sm80", 4096, 16, 4096, 132)
        assert profiler.Choice("sm80", default) in choices
        assert {c.split_k_mode for c in choices if c.split_k > 1} == {"serial", "parallel"}
    else:
        tile, splits = selection.choose_sm90(4096, 16, 4096, 132)
        assert profiler.Choice("sm90", tile, splits) in choices
        assert all(c.tile[5] == "streamk" for c in choices if c.split_k > 1)
    # never more K slices than K tiles
    assert all(c.split_k <= -(-64 // c.tile[0][2]) for c in profiler.candidates(family, 64))


@pytest.mark.parametrize("element, element_out", [("f16", "f16"), ("bf16", "bf16"), ("e4m3", "bf16"), ("s8", "s32")])
@pytest.mark.parametrize("m, n, k", [(8192, 8192, 8192), (16384, 16384, 16384), (4096, 4096, 4096),
                                     (28672, 4096, 8192), (14336, 512, 4096), (11008, 4096, 4096),
                                     (4096, 16, 4096), (8192, 1024, 8192)])
def test_sm90_candidates_include_the_heuristics_own_pick(m, n, k, element, element_out):
    # What a call runs unprofiled (tile, split and the swizzle rule's value) is among what
    # the profiler times, so a recorded winner is never one the default beat untimed.
    fam = catalog.load(catalog.for_element("sm90", element))
    tile, splits = selection.choose_sm90(m, n, k, 132, None, element, element_out)
    swizzle = selection.sm90_swizzle(tile[0], m, n, 132, fam.swizzle, tile[3])
    default = profiler.Choice("sm90", tile, splits, "serial", None if swizzle == fam.swizzle else swizzle)
    problem = Problem.contiguous("sm90", m, n, k, element=element, element_out=element_out,
                                 layout_b="col" if element in ("e4m3", "s8") else "row", sm_count=132)
    assert default in profiled_choices(problem)


def test_the_profiler_skips_swizzles_the_shape_caps():
    wide = profiler.candidates("sm90", 4096)
    narrow = Problem.contiguous("sm90", 8192, 1024, 4096, sm_count=132)   # 4 clusters of 128x256 c2x1 along N
    c2x1 = next(t for t in catalog.load("sm90").tiles if t[0][:2] == (128, 256) and t[3] == (2, 1, 1))
    assert {c.swizzle for c in profiled_choices(narrow) if c.tile == c2x1} == {None, 2, 4}   # 8 would run as 4
    # 5 N tiles: 4 and 2 would pad them to 8 and 6 (selection.SWIZZLE_PADDING), so both run as 1
    odd = Problem.contiguous("sm90", 8192, 1104, 4096, sm_count=132)
    assert {c.swizzle for c in profiled_choices(odd) if c.tile == c2x1} == {None}
    assert {c.swizzle for c in wide if c.tile == c2x1} == {None, 2, 4, 8}
    large = Problem.contiguous("sm90", 8192, 8192, 4096, sm_count=132)
    assert any(c.swizzle == 8 for c in profiled_choices(large))


def test_signature_buckets_m_and_k_but_keeps_small_n():
    assert (profiler.bucket(11008), profiler.bucket(4096), profiler.bucket(16, 256),
            profiler.bucket(300, 256)) == (16384, 4096, 16, 512)
    assert json.loads(SIGNATURE.key())["n"] == 16


def test_winner_round_trip_checksum_merge_and_read_only(tmp_path):
    db = tmp_path / "w.db"
    cache = KernelCache(db)
    choice = profiler.Choice("sm80", catalog.load("sm80").tiles[1], 4, "parallel")
    table = [{"choice": choice.to_json(), "ms": 0.01, "tflops": 3.0, "status": "ok"}]
    cache.put_winner(SIGNATURE.key(), choice.to_json(), table)
    got, rows = cache.get_winner(SIGNATURE.key())
    assert profiler.Choice.from_json(got) == choice and rows == table
    assert cache.get_winner(SIGNATURE.key().replace("4096", "8192")) is None

    other = KernelCache(tmp_path / "merged.db")
    other.merge_from(db)
    assert profiler.Choice.from_json(other.get_winner(SIGNATURE.key())[0]) == choice

    with sqlite3.connect(db) as conn:        # a tampered record is ignored, not served
        conn.execute("UPDATE winners SET choice = replace(choice, '\"split_k\": 4', '\"split_k\": 8')")
    with pytest.warns(UserWarning, match="failed its checksum"):
        assert KernelCache(db).get_winner(SIGNATURE.key()) is None

    ro = KernelCache(tmp_path / "merged.db", read_only=True)
    ro.put_winner("other", choice.to_json(), [])
    assert ro.get_winner("other")[0] == choice.to_json()
    assert KernelCache(tmp_path / "merged.db").get_winner("other") is None   # kept in memory only


def test_clear_removes_records(tmp_path):
    cache = KernelCache(tmp_path / "c.db")
    cache.put_winner("s", {"name": "x"}, [])
    cache.put("k", "n", "sm_80", b"x", {})
    assert cache.clear() == 1 and cache.winners() == []


def test_shapes_file(tmp_path):
    path = tmp_path / "shapes.txt"
    path.write_text("# decode shapes\n4096 16 4096\n11008 512 4096 bf16 col sm80  # a comment\n\n")
    assert warmup_cache.parse_shapes(str(path)) == [(4096, 16, 4096, "f16", "row", None),
                                                    (11008, 512, 4096, "bf16", "col", "sm80")]
    path.write_text("4096 x 16\n")
    with pytest.raises(SystemExit, match="expected 'M N K"):
        warmup_cache.parse_shapes(str(path))


def test_profiler_table_format():
    choice = profiler.Choice("sm80", catalog.load("sm80").tiles[0])
    rows = [Row(choice, 0.010, 30.0, "ok"), Row(choice, 0.020, 15.0, "ok"),
            Row(choice, None, None, "wrong: relative error 1.0e+00")]
    text = format_table(rows)
    assert "1.00" in text and "0.50" in text and "wrong" in text


def test_sm90_candidates_vary_the_run_time_swizzle():
    choices = profiler.candidates("sm90", 4096)
    assert {c.swizzle for c in choices} == {None, 2, 4, 8}     # None: the catalog's (1)
    choice = next(c for c in choices if c.swizzle == 4)
    assert profiler.Choice.from_json(choice.to_json()) == choice and "swizzle 4" in choice.label
    assert all(c.swizzle is None for c in profiler.candidates("sm80", 4096))   # compiled in on sm80


def test_signature_tells_x_types_apart_and_keeps_earlier_keys():
    from dataclasses import replace

    assert "element_x" not in json.loads(SIGNATURE.key())   # records made before element_x keep their keys
    e5m2 = replace(SIGNATURE, element="e4m3", element_x="e5m2")
    assert e5m2.key() != replace(SIGNATURE, element="e4m3").key()
    assert profiler.Signature(**json.loads(e5m2.key())) == e5m2


@pytest.mark.parametrize("element_out", ["s32", "bf16"])
def test_profiler_candidates_take_each_tiles_own_epilogue_subtile(element_out):
    """The profiler builds each candidate from the selected configuration: the int8 4x1 tile
    selected at 512 tokens names a 128x16 subtile, which no other tile may inherit (it does
    not divide 64x64, say), and the 4x1 candidate keeps it wherever it is not the selected one."""
    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.profiler.tune import candidate_configs

    s8 = catalog.load("sm90_s8")
    four = next(t for t in s8.tiles if t[3] == (4, 1, 1) and t[0] == (128, 256, 128))
    for n in (512, 4096):
        problem = Problem.contiguous("sm90", 14336, n, 4096, element="s8", element_out=element_out, layout_b="col")
        configs = candidate_configs(profiler.candidates("sm90", 4096, "s8", element_out), problem)
        for config in configs:
            wanted = (128, 16) if (config.threadblock, config.cluster) == (four[0], four[3]) else ()
            assert config.epilogue_tile == wanted, config.name


def test_a_tiles_least_n_starts_a_range_of_n():
    assert catalog._n_bounds({"threadblock": [1], "min_n": 257, "max_n": 512}, "x.toml") == (257, 512)
    assert catalog._n_bounds({"threadblock": [1], "max_n": 512}, "x.toml") == (1, 512)
    with pytest.raises(ValueError, match="min_n = 300: 1, or one more than a power of two"):
        catalog._n_bounds({"threadblock": [1], "min_n": 300}, "x.toml")


@pytest.mark.parametrize("value", [0, -4096, 1.5, "12288", True])
def test_a_tiles_least_m_and_k_are_whole_numbers(value):
    assert catalog._mk_bounds({"threadblock": [1], "min_m": 12288}, "x.toml") == (12288, 1)
    assert catalog._mk_bounds({"threadblock": [1], "min_k": 24576}, "x.toml") == (1, 24576)
    for key in ("min_m", "min_k"):
        with pytest.raises(ValueError, match=f"x.toml: tile \\[1\\] {key} = .*: a whole number of at least 1"):
            catalog._mk_bounds({"threadblock": [1], key: value}, "x.toml")


def test_loading_a_catalog_checks_its_least_m_and_k(load_edited_catalog):
    with pytest.raises(ValueError, match="sm90.toml: tile \\[256, 192, 64\\] min_k = 0: a whole number"):
        load_edited_catalog("min_k = 12288", "min_k = 0")


@pytest.mark.parametrize("value", [0, -1, "3", True])
def test_a_tiles_most_waves_is_a_number_above_zero(value, load_edited_catalog):
    assert catalog._max_waves({"threadblock": [1], "max_waves": 2.5}, "x.toml") == 2.5
    with pytest.raises(ValueError, match="sm90.toml: tile \\[128, 128, 128\\] max_waves = .*: a number above 0"):
        load_edited_catalog("max_waves = 3", f"max_waves = {value!r}".replace("'", '"').replace("True", "true"))


def test_the_square_tile_is_taken_up_to_three_waves_of_it():
    # 128x128x128 c1x2 ran 7-32% behind 128x256x64 c2x1 from about 4.4 waves of its tiles
    # (5120 x 2048: 640 tiles) and led at 2.9 and fewer (docs/sweep_square_tile*_h100_session29.log)
    fam = catalog.load("sm90")
    square = next(t for t in fam.tiles if t[0] == (128, 128, 128) and t[3] == (1, 2, 1))
    assert fam.takes(square, 6144, 1024, 4096, 132) and fam.takes(square, 1024, 2048, 4096, 132)
    assert not fam.takes(square, 5120, 2048, 4096, 132) and not fam.takes(square, 4608, 2048, 4096, 132)
    assert fam.takes(square, 5120, 2048, 4096, 264)    # the bound is in waves: twice the SMs, twice the tiles
    for m, n, k in ((5120, 2048, 13824), (4608, 1536, 4096)):
        assert selection.choose_sm90(m, n, k, 132)[0][0] == (128, 256, 64), (m, n, k)
    for m, n, k in ((1024, 2048, 4096), (5120, 1024, 13824), (11008, 512, 4096)):
        assert selection.choose_sm90(m, n, k, 132)[0] == square, (m, n, k)
