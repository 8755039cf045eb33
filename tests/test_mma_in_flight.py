"""sm90 kernels that keep one wgmma batch in flight across k-tiles
(SparseGemmConfig.mma_in_flight), without a GPU: their identity, the mainloop patch only
they get, and that every other kernel keeps its headers (and so its cache key). Their
results and speed are checked on the H100 (scripts/device/sweep_8bit_picks.py --round 9,
tests/test_gpu_sm90.py)."""
import dataclasses

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.emit import nvrtc_headers
from cutlass_sparse.emit.registry import emit


def _pick(mma_in_flight=False):
    chosen = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 132, "sm90").as_compiled()
    return dataclasses.replace(chosen, mma_in_flight=mma_in_flight)


def test_a_kernel_in_flight_is_its_own_kernel_and_its_name_finds_it():
    drained, in_flight = _pick(), _pick(mma_in_flight=True)
    assert in_flight == selection.config_for_shape(
        4096, 4096, 4096, "f16", "f16", "row", 132, "sm90").as_compiled()   # the catalog's choice
    assert in_flight.name == drained.name[:-len("_lean_noc")] + "_inflight_lean_noc"   # our mainloop, both
    assert in_flight.key != drained.key
    assert catalog.find(in_flight.name) == in_flight
    subtile = dataclasses.replace(in_flight, epilogue_tile=(128, 64))
    assert subtile.name.endswith("_epi128x64_inflight_lean_noc") and catalog.find(subtile.name) == subtile
    # descriptions stored before the field existed load as drained kernels
    stored = drained.to_json()
    del stored["mma_in_flight"]
    assert type(drained).from_json(stored) == drained
    with pytest.raises(ValueError, match="mma_in_flight: family sm90 only"):
        dataclasses.replace(catalog.load("sm80").enumerate()[0], mma_in_flight=True)


def test_only_a_kernel_in_flight_gets_the_patched_mainloop():
    drained, in_flight = _pick(), _pick(mma_in_flight=True)
    plain, patched = dict(emit(drained).headers), dict(emit(in_flight).headers)
    assert nvrtc_headers.SPARSE_MAINLOOP_HEADER not in plain
    mainloop = patched.pop(nvrtc_headers.SPARSE_MAINLOOP_HEADER)
    assert patched == plain   # every other header as a drained kernel has it
    assert "K_PIPE_MMAS = 1;" in mainloop and "K_PIPE_MMAS = 0;" not in mainloop
    # two metadata fragments, alternating, and one batch left in flight after each issue
    assert "issue_k_tile(tErE_next);\n      retire_previous();\n      issue_k_tile(tErE);" in mainloop
    assert "warpgroup_wait<K_PIPE_MMAS>();" in mainloop
    # the rest of the collective is CUTLASS's: the producer's load and mma_tail are untouched
    original = (nvrtc_headers.env.cutlass_root() / "include" / nvrtc_headers.SPARSE_MAINLOOP_HEADER).read_text()
    for kept in ("  mma_tail(MainloopPipeline pipeline, PipelineState smem_pipe_release, int k_tile_count) {",
                 "copy(mainloop_params.tma_load_e.with(*tma_barrier, mcast_mask_e)"):
        assert kept in original and kept in mainloop
    assert kernels.cache_key(emit(in_flight), "sm_90a", []) != kernels.cache_key(emit(drained), "sm_90a", [])


def test_a_patch_whose_text_moved_fails_loudly(monkeypatch):
    moved = {nvrtc_headers.SPARSE_MAINLOOP_HEADER: [(("no such start", "  /// Perform a Consumer Epilogue"), "x")]}
    monkeypatch.setattr(nvrtc_headers, "_IN_FLIGHT_PATCHES", moved)
    nvrtc_headers.patched_headers.cache_clear()
    try:
        with pytest.raises(nvrtc_headers.HeaderPatchError, match="found 0 times"):
            nvrtc_headers.patched_headers(True)
    finally:
        nvrtc_headers.patched_headers.cache_clear()


def test_a_catalog_turns_it_on_per_tile():
    family = catalog.load("sm90")
    on, off = family.tiles[:2]
    family = dataclasses.replace(family, in_flight=(on,))
    config = family.config(on, "f16", "f16", "row", 8, 8, reads_c=False)
    assert config.mma_in_flight and config.name.endswith("_inflight_lean_noc")   # every 16-bit tile: ours
    assert not family.config(off, "f16", "f16", "row", 8, 8).mma_in_flight


@pytest.mark.parametrize("shape,element", [((1024, 16, 1024), "f16"), ((4096, 4096, 4096), "bf16"),
                                           ((4096, 512, 4096), "f16")])
def test_the_profiler_compiles_the_kernels_it_then_runs(shape, element):
    # its candidates take each tile's catalog fields (in flight or not), as the plans it
    # times do: a kernel compiled ahead is the one that runs
    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.launch.sm90_choice import resolve
    from cutlass_sparse.plan import records
    from cutlass_sparse.profiler import tune

    problem = Problem.contiguous("sm90", *shape, element=element, sm_count=132)
    choices = records.candidates("sm90", shape[2])
    compiled = {c.as_compiled() for c in tune.candidate_configs(choices, problem)}
    ran = {resolve(problem, None, choice)[0].as_compiled() for choice in choices}
    assert ran <= compiled
    assert {c.mma_in_flight for c in ran} == {True, False}


def test_an_fp8_kernel_in_flight_needs_fast_accumulation():
    # the other fp8 mainloop is CUTLASS's own header, which the patch does not touch
    fp8 = catalog.load("sm90_fp8")
    fast = fp8.config(fp8.tiles[0], "e4m3", "bf16", "col", 16, 8, reads_c=False)
    assert dataclasses.replace(fast, mma_in_flight=True).mma_in_flight
    with pytest.raises(ValueError, match="mma_in_flight: an fp8 kernel needs fast_accum"):
        dataclasses.replace(fast, fast_accum=False, mma_in_flight=True)


def test_a_region_patch_whose_end_moved_before_its_start_fails(monkeypatch):
    start, end = "  /// Perform a Consumer Epilogue", "    Tensor tErE  = smem_thr_copy_E.retile_D(tCrE);"
    monkeypatch.setattr(nvrtc_headers, "_IN_FLIGHT_PATCHES", {nvrtc_headers.SPARSE_MAINLOOP_HEADER: [((start, end), "x")]})
    nvrtc_headers.patched_headers.cache_clear()
    try:
        with pytest.raises(nvrtc_headers.HeaderPatchError, match="no longer follows"):
            nvrtc_headers.patched_headers(True)
    finally:
        nvrtc_headers.patched_headers.cache_clear()


def test_a_header_patched_twice_keeps_both_patch_lists(monkeypatch):
    # an in-flight patch of a header the base set also patches adds to its list
    header = nvrtc_headers.UINT128_HEADER
    extra = {header: [("/// Optionally enable GCC's built-in type", "/// cutlass_sparse: both lists")]}
    monkeypatch.setattr(nvrtc_headers, "_IN_FLIGHT_PATCHES", extra)
    nvrtc_headers.patched_headers.cache_clear()
    try:
        text = dict(nvrtc_headers.patched_headers(True))[header]
        assert "/// cutlass_sparse: both lists" in text and "CUTLASS_UINT128_NATIVE" in text
    finally:
        nvrtc_headers.patched_headers.cache_clear()


def test_the_catalog_flag_must_be_a_boolean(load_edited_catalog):
    with pytest.raises(ValueError, match="mma_in_flight = 1: true or false"):
        load_edited_catalog("mma_in_flight = true", "mma_in_flight = 1")
