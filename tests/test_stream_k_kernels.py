"""sm90 stream-K kernels without a GPU: the scheduler's Params by pointer (a patch only
stream-K kernels get, so every persistent kernel keeps its cache key) and the cooperative
kernel's register split (SparseGemmConfig.load_registers). Their results are checked on
the H100 by the GPU suite and their speed by scripts/device/probe_streamk.py
(docs/probe_streamk_h100_session31_call2.log)."""
import dataclasses

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.emit import nvrtc_headers
from cutlass_sparse.emit.registry import emit


def _pick(**changes):
    chosen = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 132, "sm90").as_compiled()
    return dataclasses.replace(chosen, **changes)


def test_only_a_stream_k_kernel_reads_its_scheduler_params_by_pointer():
    persistent, stream_k = _pick(), _pick(tile_scheduler="streamk")
    plain, patched = dict(emit(persistent).headers), dict(emit(stream_k).headers)
    header = nvrtc_headers.STREAM_K_HEADER
    assert "Params const* scheduler_params = nullptr;" in patched[header]
    assert "  Params scheduler_params;\n" not in patched[header]
    assert patched[header].count("*scheduler_params") == 3   # each use reads through the pointer
    assert "  Params scheduler_params;\n" in plain[header]    # the persistent kernel's text is as before
    assert "unit_iter_start = unit_iter_start_;" in patched[header]   # the base set's patch stays
    del plain[header], patched[header]
    assert plain == patched


def test_a_persistent_kernels_key_does_not_depend_on_the_stream_k_patch(monkeypatch):
    persistent, stream_k = _pick(), _pick(tile_scheduler="streamk")
    keys = {c: kernels.cache_key(emit(c), "sm_90a", []) for c in (persistent, stream_k)}
    monkeypatch.setattr(nvrtc_headers, "_STREAM_K_PATCHES", {})
    nvrtc_headers.patched_headers.cache_clear()
    try:
        assert kernels.cache_key(emit(persistent), "sm_90a", []) == keys[persistent]
        assert kernels.cache_key(emit(stream_k), "sm_90a", []) != keys[stream_k]
    finally:
        nvrtc_headers.patched_headers.cache_clear()


def test_a_register_split_is_its_own_kernel_and_its_name_finds_it():
    base = _pick(tile_scheduler="streamk")
    roomy = dataclasses.replace(base, load_registers=72)
    assert roomy.consumer_registers == 216 and dataclasses.replace(base, load_registers=56).consumer_registers == 224
    assert base.consumer_registers == 232   # CUTLASS's own split
    # setmaxnreg only moves registers among the CTA's warp groups: 384 threads x 168
    for load in (56, 72):
        split = dataclasses.replace(base, load_registers=load)
        assert 128 * load + 256 * split.consumer_registers <= 384 * 168 and split.consumer_registers % 8 == 0
    assert roomy.name == base.name[:-len("_lean_noc")] + "_ld72_lean_noc"   # our mainloop, both
    assert roomy.key != base.key
    listed = next(c for c in catalog.load("sm90").enumerate() if c.tile_scheduler == "streamk")
    listed_roomy = dataclasses.replace(listed, load_registers=72, reads_c=False)
    assert listed_roomy.name.endswith("_streamk_ld72_lean_noc")
    assert catalog.find(listed_roomy.name) == listed_roomy and catalog.find(listed.name) == listed
    # descriptions stored before the field existed keep their keys
    stored = base.to_json()
    del stored["load_registers"]
    assert type(base).from_json(stored).key == base.key
    header = dict(emit(roomy).headers)[nvrtc_headers.COOPERATIVE_HEADER]
    assert "LoadRegisterRequirement = !HeavyRegisterPressure ? 72 : 24;" in header
    assert "MmaRegisterRequirement = !HeavyRegisterPressure ? 216 : 240;" in header
    assert nvrtc_headers.COOPERATIVE_HEADER not in dict(emit(base).headers)


def test_a_register_split_needs_the_cooperative_schedule_and_a_known_count():
    base = _pick()
    with pytest.raises(ValueError, match="load_registers 64 must be one of"):
        dataclasses.replace(base, load_registers=64)
    pingpong = next(c for c in catalog.load("sm90").enumerate() if c.schedule == "pingpong")
    with pytest.raises(ValueError, match="a register split for the sm90 'cooperative' schedule"):
        dataclasses.replace(pingpong, load_registers=56)
    # CUTLASS gives tiles of 208 accumulators a thread and more its own 24/240 split, which
    # the patch does not touch
    with pytest.raises(ValueError, match="below 208 accumulators"):
        dataclasses.replace(base, threadblock=(256, 256, 64), load_registers=56)


def test_the_catalogs_stream_k_tiles_split_their_registers(load_edited_catalog):
    for config in catalog.load("sm90").enumerate():
        assert config.load_registers == (72 if config.tile_scheduler == "streamk" else 0)
        if config.tile_scheduler == "streamk":
            header = dict(emit(config).headers)[nvrtc_headers.COOPERATIVE_HEADER]
            assert "LoadRegisterRequirement = !HeavyRegisterPressure ? 72 : 24;" in header
    with pytest.raises(ValueError, match="load_registers = 64: one of"):
        load_edited_catalog('tile_scheduler = "streamk"\nload_registers = 72', 'tile_scheduler = "streamk"\nload_registers = 64')


@pytest.mark.parametrize("element, out", [("e4m3", "bf16"), ("s8", "s32")])
def test_split_k_on_a_catalog_without_stream_k_tiles_says_so(element, out):
    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.launch.sm90_choice import resolve

    problem = dataclasses.replace(Problem.contiguous("sm90", 4096, 128, 16384, element=element, element_out=out,
                                                     layout_b="col"), split_k=2)
    with pytest.raises(ValueError, match=f"split_k=2: the sm90 {element} kernels have no stream-K tile"):
        resolve(problem, None)
    # a catalog with stream-K tiles still names the K rule
    f16 = dataclasses.replace(Problem.contiguous("sm90", 4096, 128, 256), split_k=4)
    with pytest.raises(ValueError, match="split_k=4: K = 256 has fewer K tiles than slices"):
        resolve(f16, None)
