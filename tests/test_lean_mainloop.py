"""sm90 kernels whose mainloop producer and consumers are our own (SparseGemmConfig.lean_mainloop,
emit.sm90_lean_mainloop), without a GPU: their identity, where the wish is taken, what they
are emitted as, and (with a host C++ compiler) the oracle that compares the instructions they
issue with CUTLASS's own mainloop's. Results are checked on the GPU by every sm90 GPU test
(the catalog takes it on every tile) and timed beside CUTLASS's mainloop by
scripts/device/sweep_8bit_picks.py --round 22."""
import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.build.warmup import SM90_LEAN_BYTES, SM90_WITHOUT_TMA_EPILOGUE_BYTES, compile_bytes
from cutlass_sparse.describe import catalog, selection
from cutlass_sparse.describe.description import SparseGemmConfig
from cutlass_sparse.emit import sm90_lean_mainloop
from cutlass_sparse.emit.registry import emit


def _pick(m=4096, n=4096, k=4096, element="f16", **fields):
    chosen = selection.config_for_shape(m, n, k, element, element, "row", 132, "sm90").as_compiled()
    return dataclasses.replace(chosen, **fields)


def test_a_lean_kernel_is_its_own_kernel_and_its_name_finds_it():
    lean, cutlass = _pick(), _pick(lean_mainloop=False)
    assert lean.takes_lean_mainloop and not cutlass.takes_lean_mainloop   # the catalog's choice
    assert lean.name == cutlass.name[:-len("_noc")] + "_lean_noc"
    assert lean.key != cutlass.key and lean.as_compiled() == lean
    assert kernels.cache_key(emit(lean), "sm_90a", []) != kernels.cache_key(emit(cutlass), "sm_90a", [])
    assert catalog.find(lean.name) == lean and catalog.find(cutlass.name) == cutlass
    # descriptions and keys made before the field existed stay as they were
    stored = cutlass.to_json()
    del stored["lean_mainloop"]
    assert SparseGemmConfig.from_json(stored) == cutlass
    assert compile_bytes(lean) == SM90_LEAN_BYTES < compile_bytes(cutlass) == SM90_WITHOUT_TMA_EPILOGUE_BYTES
    assert "2.5 GB" in kernels.compile_estimate(lean) and "3.5 GB" in kernels.compile_estimate(cutlass)


@pytest.mark.parametrize("element,out,layout", [("s8", "s32", "col"), ("e4m3", "bf16", "col")])
def test_eight_bit_kernels_keep_cutlass_mainloop(element, out, layout):
    # LeanMainloop's metadata map is wgmma.sp k32's (16-bit A)
    config = selection.config_for_shape(4096, 4096, 4096, element, out, layout, 132, "sm90")
    wished = dataclasses.replace(config, lean_mainloop=True)
    assert not wished.takes_lean_mainloop and "_lean" not in wished.name
    assert wished.as_compiled() == dataclasses.replace(config, lean_mainloop=False).as_compiled()


def test_sm80_refuses_the_wish():
    sm80 = selection.config_for_shape(256, 64, 256, "f16", "f16", "row", 132, "sm80")
    with pytest.raises(ValueError, match="lean_mainloop: family sm90 only"):
        dataclasses.replace(sm80, lean_mainloop=True)


@pytest.mark.parametrize("tile,cluster", [
    ((128, 40, 64), (2, 1, 1)), ((256, 160, 64), (2, 1, 1)), ((128, 48, 128), (2, 1, 1)),   # not whole atoms
    # tile K 256 (two metadata atoms a k-tile) multicast along N: CuTe cuts the metadata box
    # along K, where boxes cuts rows (the oracle's script finds this tile's loads differ)
    ((64, 64, 256), (1, 2, 1)),
    ((64, 64, 128), (1, 8, 1)),   # a multicast share of 8 rows: boxes of fewer than 16 rows
], ids=str)
def test_tiles_whose_boxes_are_not_derived_keep_cutlass_mainloop(tile, cluster):
    odd = _pick(threadblock=tile, cluster=cluster)
    assert odd.lean_mainloop and not odd.takes_lean_mainloop and "_lean" not in odd.name


def test_every_catalog_tile_takes_it_for_16_bit_inputs():
    family = catalog.load("sm90")
    assert set(family.lean_mainloop) == set(family.tiles)
    assert all(config.takes_lean_mainloop for config in family.enumerate())


def test_the_emitted_mainloop_wraps_cutlass_with_the_tile_boxes():
    lean = _pick()
    source = emit(lean).source
    assert "using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<" in source
    assert "cutlass_sparse::LeanMainloop<BuiltMainloop," in source
    box_a, box_e, box_b = sm90_lean_mainloop.boxes(lean)
    assert f"cutlass_sparse::Boxes<{', '.join(map(str, box_b))}>" in source
    assert "LeanMainloop" not in emit(_pick(lean_mainloop=False)).source


@pytest.mark.parametrize("tile,cluster,layout,expected", [
    # 128x256x64 in 2x1: A one box (64 compressed bytes a row), B row-major four 64-column
    # boxes, each CTA of the pair loading half of K
    ((128, 256, 64), (2, 1, 1), "row", ((1, 0, 64, 128, 0), (1, 0, 0, 128, 0), (4, 64, 0, 0, 32))),
    # x column-major: B K-major, one box of 64 K, N split between the pair
    ((128, 256, 64), (2, 1, 1), "col", ((1, 0, 64, 128, 0), (1, 0, 0, 128, 0), (1, 0, 64, 128, 0))),
    # 1x2: A and E split between the pair (multicast along N)
    ((128, 128, 128), (1, 2, 1), "row", ((1, 0, 128, 64, 0), (1, 0, 0, 64, 0), (2, 64, 0, 0, 128))),
    # tile K 256: A two 128-byte boxes along K; a 16-wide B one box
    ((64, 16, 256), (4, 1, 1), "row", ((2, 0, 128, 64, 0), (1, 0, 0, 64, 0), (1, 16, 0, 0, 64))),
])
def test_the_boxes_follow_cutes_rule(tile, cluster, layout, expected):
    # each of these was checked against CUTLASS's own producer by the oracle below
    config = dataclasses.replace(_pick(), threadblock=tile, cluster=cluster, layout_b=layout)
    assert sm90_lean_mainloop.boxes(config) == expected


def _oracle():
    path = Path(__file__).resolve().parents[1] / "scripts" / "lean_mainloop_oracle.py"
    spec = importlib.util.spec_from_file_location("lean_mainloop_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow_compile
@pytest.mark.skipif(shutil.which("g++") is None, reason="the oracle compiles CUTLASS's mainloop on the host with g++")
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (4096, 16, 4096)], ids=["default", "decode"])
def test_the_picked_tiles_issue_cutlass_instructions(shape):
    # CUTLASS's producer and ours issue the same TMA loads (descriptor, coordinates, shared
    # memory, multicast mask) for every CTA of the cluster, k-tile and stage, in the second
    # matrix of a batch; every consumer thread reads the same metadata bytes
    # (scripts/lean_mainloop_oracle.py). The decode tile (K 256, 4x1) is the one whose
    # metadata the first version read wrong.
    config = _pick(*shape)
    assert config.takes_lean_mainloop
    ok, detail = _oracle().check(config)
    assert ok, detail


def test_the_oracle_reads_a_difference():
    # its comparison fails on a producer that issued another coordinate, or on wrong metadata
    oracle = _oracle()
    same = "CUTLASS 0 0 0\nTMA x crd 1 2\nLEAN 0 0 0\nTMA x crd 1 2\nEND\nMETADATA checked 8 wrong 0\n"
    assert oracle.compare(same)[0]
    assert not oracle.compare(same.replace("LEAN 0 0 0\nTMA x crd 1 2", "LEAN 0 0 0\nTMA x crd 1 3"))[0]
    assert not oracle.compare(same.replace("wrong 0", "wrong 2"))[0]
