"""sm90 kernels without C (SparseGemmConfig.reads_c False), without a GPU: which problems
get them, what the emitter writes for them, and that kernels with C keep their sources
(and so their cache keys). Their speed and results are checked on the H100
(scripts/device/sweep_void_c.py; every default sm90 GPU test runs them)."""
import dataclasses
from unittest import mock

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.describe.problem import Epilogue, Problem, folded_c
from cutlass_sparse.emit.registry import emit
from cutlass_sparse.launch.sm90_choice import resolve
from cutlass_sparse.plan import plans


def _fp8_large(reads_c=True):
    fp8 = catalog.load("sm90_fp8")
    return fp8.config(fp8.tiles[0], "e4m3", "bf16", "col", 16, 8, reads_c=reads_c)   # 128x256x128, 2x1


def test_a_kernel_without_c_is_its_own_kernel():
    with_c, without_c = _fp8_large(), _fp8_large(reads_c=False)
    assert without_c.name == with_c.name + "_noc" and without_c.key != with_c.key
    # a kernel with C keeps the key it had before the field existed (cached binaries stay valid)
    assert with_c.key == "879cd1f32661f7f5"
    sm80 = catalog.load("sm80").enumerate()[0]
    with pytest.raises(ValueError, match="reads_c False: family sm90 only"):
        dataclasses.replace(sm80, reads_c=False)


def test_the_emitted_kernel_has_no_c_and_searches_one_more_stage():
    with_c, without_c = emit(_fp8_large()).source, emit(_fp8_large(reads_c=False)).source
    epilogue_c = "    ElementC, cutlass::layout::RowMajor, 8,\n    ElementC, cutlass::layout::RowMajor, 8,"
    assert epilogue_c in with_c and "OneMoreStageFits" not in with_c
    assert "    void, cutlass::layout::RowMajor, 8,\n    ElementC, cutlass::layout::RowMajor, 8," in without_c
    assert "StageCount<OneMoreStageFits ? AutoStages + 1 : AutoStages>" in without_c
    # an explicit stage count is taken as it is
    fixed = emit(dataclasses.replace(_fp8_large(reads_c=False), stages=4)).source
    assert "OneMoreStageFits" not in fixed and "StageCount<4>" in fixed


def _problem(bias=False):
    problem = Problem.contiguous("sm90", 4096, 4096, 4096)
    return problem.with_bias() if bias else problem


def _with_c(beta=0.5):
    """The 4096^3 problem reading a C of its own (beta * C)."""
    return _problem().with_(c=folded_c("row", 4096, 4096), epilogue=Epilogue(beta=beta))


def test_problems_without_c_run_kernels_without_c():
    assert not resolve(_problem(), None)[0].reads_c
    assert resolve(_with_c(), None)[0].reads_c
    # a row bias rides the scaled epilogue as a float32 vector: no C
    biased = resolve(_problem(bias=True), None)[0]
    assert not biased.reads_c and biased.scales == "row_col" and biased.name.endswith("_scaled_inflight_lean_noc")
    # where the scaled epilogue cannot take it (leaky_relu, a column bias, 8-bit's own path), C
    leaky = _problem().with_(epilogue=Epilogue(activation="leaky_relu")).with_bias()
    assert resolve(leaky, None)[0].reads_c and leaky.epilogue.scales == "none"
    assert _problem().with_bias("columns").epilogue.reads_c
    # what warm-up, compile-only runs and the profiler compile is what matmul runs
    chosen = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 132, "sm90")
    assert chosen.as_compiled() == resolve(_problem(), None)[0].as_compiled()
    # a caller's kernel with C still runs a problem without C; one without C gets C where needed
    given = catalog.load("sm90").config(catalog.load("sm90").tiles[0], "f16", "f16", "row", 8, 8)
    assert resolve(_problem(), given)[0].reads_c
    assert resolve(_with_c(), dataclasses.replace(given, reads_c=False))[0].reads_c


def test_plans_of_one_n_range_keep_c_apart():
    def stand_in(config, arch, cache=None):
        return kernels.CompiledKernel(config, arch, "stand-in", b"", {"shared_bytes": 0, "threads": 384,
                                                                     "params_bytes": 8})

    plans.clear()
    with mock.patch.object(kernels, "get", stand_in):
        without_c = plans.make(_problem())
        with_c = plans.make(_with_c())   # beta * C, no bias
    plans.clear()
    assert not without_c.config.reads_c and with_c.config.reads_c


def test_an_epilogue_subtile_is_emitted_and_checked():
    s8 = catalog.load("sm90_s8")
    tile = next(t for t in s8.tiles if t[0] == (256, 128, 128))
    config = dataclasses.replace(s8.config(tile, "s8", "s32", "col", 16, 4, reads_c=False), epilogue_tile=(128, 16),
                                 mma_in_flight=False)
    assert config.name.endswith("_epi128x16_noc")
    assert "    Shape<_128, _16>, int32_t, int32_t," in emit(config).source
    assert "EpilogueTileAuto" in emit(dataclasses.replace(config, epilogue_tile=())).source
    with pytest.raises(ValueError, match="epilogue_tile"):
        dataclasses.replace(config, epilogue_tile=(96, 16))
    # descriptions stored before the field existed still load
    stored = config.to_json()
    del stored["epilogue_tile"], stored["reads_c"]
    assert type(config).from_json(stored) == dataclasses.replace(config, epilogue_tile=(), reads_c=True)


def test_names_calls_report_can_be_passed_back():
    # a plain call reports a kernel without C: config=<that name> finds it
    chosen = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 132, "sm90").as_compiled()
    assert chosen.name.endswith("_noc") and catalog.find(chosen.name) == chosen
    subtile = dataclasses.replace(chosen, epilogue_tile=(128, 16))
    assert catalog.find(subtile.name) == subtile
    with pytest.raises(ValueError, match="no configuration named"):
        catalog.find(chosen.name[:-len("_noc")] + "_nocx")


def test_warm_up_lists_have_both_kinds():
    from cutlass_sparse.build import warmup
    from cutlass_sparse.plan import presets

    sm90 = [c for c, _ in warmup.catalog_items(["sm_90a"]) if hasattr(c, "reads_c")]
    row = [c for c in sm90 if c.layout_c == "row"]
    assert sum(not c.reads_c for c in row) == sum(c.reads_c for c in row) > 0
    # and a one-token call's kernels (Problem.layout_d): D column-major, never C
    assert all(not c.reads_c for c in sm90 if c.layout_c == "col") and len(sm90) > len(row)
    # a preset serves projections with a bias (the scaled epilogue's vector) as well as without
    problems = presets.problems("llm-4096", "sm_90a", 132, n_max=64)
    assert any(p.epilogue.scales == "row_col" for p in problems)
    assert any(p.epilogue.scales == "none" and not p.epilogue.reads_c for p in problems)
