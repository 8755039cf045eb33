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
    # so a persistent kernel's key does not depend on the stream-K patch
    assert kernels.cache_key(emit(persistent), "sm_90a", []) == kernels.cache_key(
        emit(_pick()), "sm_90a", [])


def test_a_register_split_is_its_own_kernel_and_its_name_finds_it():
    base = _pick(tile_scheduler="streamk")
    roomy = dataclasses.replace(base, load_registers=72)
    assert roomy.consumer_registers == 216 and dataclasses.replace(base, load_registers=56).consumer_registers == 224
    assert 128 * 72 + 256 * roomy.consumer_registers <= 65536
    assert roomy.name == base.name[:-len("_noc")] + "_ld72_noc"
    assert roomy.key != base.key
    listed = next(c for c in catalog.load("sm90").enumerate() if c.tile_scheduler == "streamk")
    listed_roomy = dataclasses.replace(listed, load_registers=72, reads_c=False)
    assert listed_roomy.name.endswith("_streamk_ld72_noc")
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
    with pytest.raises(ValueError, match="load_registers 64: one of"):
        dataclasses.replace(base, load_registers=64)
    pingpong = next(c for c in catalog.load("sm90").enumerate() if c.schedule == "pingpong")
    with pytest.raises(ValueError, match="only for the sm90 'cooperative' schedule"):
        dataclasses.replace(pingpong, load_registers=56)
