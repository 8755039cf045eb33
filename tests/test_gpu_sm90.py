"""The sm90 family (CUTLASS 3.x: wgmma.sp + TMA) on an sm_90 GPU, against a float32 dense
reference. Marked gpu: skipped without a GPU; skipped on GPUs other than sm_90."""
import sys
from pathlib import Path

import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.describe import catalog, dtypes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_cases  # noqa: E402
from test_gpu_any_shape import _torch_view as torch_view  # noqa: E402
from test_gpu_matmul import captured_and_replayed, check, poisoned, random_operands  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_sm90")]



def operands(m, n, k, dtype, layout, seed):
    return random_operands(m, n, k, dtype, layout, seed, family="sm90")


@pytest.mark.parametrize("layout", gpu_cases.LAYOUTS)
@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
@pytest.mark.parametrize("shape", gpu_cases.SM90_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sm90_matmul_matches_dense(shape, dtype, layout):
    m, n, k = shape
    w, sw, x = operands(m, n, k, dtype, layout, seed=hash((shape, dtype, layout)) % 2**31)
    assert sw.layout == "sm90"
    info = {}
    y = cs.matmul(sw, x, out=poisoned((m, n), dtypes.numpy_dtype(dtype)), info=info)
    assert info["config"].startswith("cutlass3x_sm90_sptensorop")
    check(y, w, x, dtype)


def test_default_family_on_sm90_is_sm90():
    w, _, x = operands(256, 64, 256, "f16", "row", seed=1)
    sw = cs.compress(w)
    assert sw.layout == "sm90"
    info = {}
    check(cs.matmul(sw, x, info=info), w, x, "f16")
    assert info["config"].startswith("cutlass3x_sm90")


def test_alpha_beta_and_f32_output():
    import cupy

    w, sw, x = operands(256, 64, 256, "bf16", "row", seed=2)
    c = cupy.random.default_rng(3).standard_normal((256, 64), dtype=cupy.float32)
    y = cs.matmul(sw, x, out_dtype="f32", alpha=0.5, beta=2.0, c=c)
    check(y, w, x, "bf16", alpha=0.5, beta=2.0, c=c)


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
def test_sm90_to_dense_and_layout_conversion(dtype):
    w, sw, x = operands(200, 64, 256, dtype, "row", seed=4)
    back = sw.to_dense()
    np.testing.assert_array_equal(back.get().view(np.uint16), w.get().view(np.uint16))
    sw80 = sw.to_layout("sm80")
    assert sw80.layout == "sm80"
    check(cs.matmul(sw80, x), w, x, dtype)
    check(cs.matmul(sw80.to_layout("sm90"), x), w, x, dtype)


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
def test_metadata_atoms_convert_exactly_and_both_kinds_of_tile_run(dtype):
    # K = 448: a multiple of 64 but not of 128, so the two atoms also pad K differently.
    import cupy

    from cutlass_sparse.describe import catalog
    from cutlass_sparse.formats import sm90_layout
    from cutlass_sparse.launch import sm90_compress

    m, n, k = 320, 256, 448
    w, sw, x = operands(m, n, k, dtype, "row", seed=7)
    assert sw.atom_k == sm90_layout.STORED_ATOM_K
    other = next(a for a in sm90_layout.ATOMS_K if a != sw.atom_k)
    _, direct = sm90_compress.compress(w, dtype, other)
    index = sm90_layout.byte_index(cupy.arange(m)[:, None], cupy.arange(k // 8)[None, :], m, other)
    converted = sw.metadata_for(other)
    assert converted.size == direct.size
    assert bool((converted[index] == direct[index]).all())
    assert sw.metadata_for(other) is converted   # made once
    fam = catalog.load("sm90")
    for atom in sm90_layout.ATOMS_K:
        tile = next(t for t in fam.tiles if min(t[0][2], 128) == atom and t[5] == "persistent")
        config = fam.config(tile, dtype, dtype, "row", 8, 8)
        check(cs.matmul(sw, x, out=poisoned((m, n), dtypes.numpy_dtype(dtype)), config=config), w, x, dtype)


K256_CASES = [(320, 16, 448), (256, 64, 4224), (128, 16, 256)]   # 1.75, 16.5 and 1 k-block of 256


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
@pytest.mark.parametrize("shape", K256_CASES, ids=lambda s: "x".join(map(str, s)))
def test_k256_tiles_take_a_k_that_256_does_not_divide(shape, dtype):
    # Selection takes a K-256 decode tile only where 256 divides K; a caller's config may
    # name one for any K, and the last k-block then reads past K (TMA fills zeros).
    m, n, k = shape
    w, sw, x = operands(m, n, k, dtype, "row", seed=17)
    for config in gpu_cases.sm90_k256_configs(dtype):
        if config.threadblock[1] >= n:
            check(cs.matmul(sw, x, out=poisoned((m, n), dtypes.numpy_dtype(dtype)), config=config), w, x, dtype)


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
def test_kernels_with_wgmma_in_flight_match_dense(dtype):
    for m, n, k in gpu_cases.IN_FLIGHT_SHAPES:
        w, sw, x = operands(m, n, k, dtype, "row", seed=m + n + k)
        for config in gpu_cases.sm90_in_flight_configs(dtype):
            info = {}
            y = cs.matmul(sw, x, out=poisoned((m, n), dtypes.numpy_dtype(dtype)), config=config, info=info)
            assert info["config"] == config.name
            check(y, w, x, dtype)


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
def test_tiles_for_the_largest_problems_match_dense_at_any_size(dtype):
    # selection takes 256x192x64 only from M 8192, N above 4096 and K 12288 (operations/sm90.toml);
    # a caller's config may name it at any size
    configs = gpu_cases.sm90_large_only_configs(dtype)
    assert [c.threadblock for c in configs] == [(256, 192, 64)]
    for m, n, k in gpu_cases.LARGE_ONLY_SHAPES:
        w, sw, x = operands(m, n, k, dtype, "row", seed=m + n + k)
        for config in configs:
            info = {}
            y = cs.matmul(sw, x, out=poisoned((m, n), dtypes.numpy_dtype(dtype)), config=config, info=info)
            assert info["config"] == config.name
            check(y, w, x, dtype)


@pytest.mark.parametrize("shape", [(3072, 8192, 256), (12288, 4352, 256)], ids=lambda s: "x".join(map(str, s)))
def test_every_swizzle_matches_dense_where_the_scheduler_pads_the_tiles(shape):
    # 24 M tiles in 2x1 clusters (groups of 16 at swizzle 8) and 17 N tiles: selection takes
    # the swizzle that adds no tiles (selection.SWIZZLE_PADDING); a caller's config may name
    # one that does, which runs the added tiles on zeros and must write none of them
    import dataclasses

    m, n, k = shape
    w, sw, x = operands(m, n, k, "f16", "row", seed=m + n)
    info = {}
    check(cs.matmul(sw, x, out=poisoned((m, n), np.float16), info=info), w, x, "f16")
    picked = catalog.find(info["config"])
    assert picked.threadblock == (128, 256, 64)
    for swizzle in (1, 2, 4, 8):
        for raster in (0, 1, 2):   # CUTLASS's heuristic, along M, along N
            config = dataclasses.replace(picked, swizzle=swizzle, raster=raster)
            check(cs.matmul(sw, x, out=poisoned((m, n), np.float16), config=config), w, x, "f16")


def test_a_call_selection_rasterizes_along_m_matches_dense():
    # B re-read once a wave along N costs more than A along M here (selection.sm90_raster)
    from cutlass_sparse.describe import selection

    m, n, k = 3072, 4096, 13824
    assert selection.config_for_shape(m, n, k, "f16", "f16", "row", 132, "sm90").raster == selection.ALONG_M
    w, sw, x = operands(m, n, k, "f16", "row", seed=7)
    info = {}
    check(cs.matmul(sw, x, out=poisoned((m, n), np.float16), info=info), w, x, "f16")
    assert info["raster"] == selection.ALONG_M   # the plan that ran


def test_tiles_for_the_largest_problems_read_c_and_write_f32():
    import cupy

    configs = gpu_cases.sm90_large_only_c_configs()
    assert [(c.threadblock, c.element, c.element_out) for c in configs] == \
        [((256, 192, 64), "f16", "f16"), ((256, 192, 64), "bf16", "f32")]
    for m, n, k in gpu_cases.LARGE_ONLY_SHAPES:
        for config in configs:
            w, sw, x = operands(m, n, k, config.element, "row", seed=m + k)
            c = cupy.random.default_rng(n).standard_normal((m, n), dtype=cupy.float32)
            c = c.astype(dtypes.numpy_dtype(config.element_out))
            info = {}
            y = cs.matmul(sw, x, out_dtype=config.element_out, alpha=0.5, beta=2.0, c=c, config=config, info=info)
            assert info["config"] == config.name and y.dtype == c.dtype
            check(y, w, x, config.element, alpha=0.5, beta=2.0, c=c)


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
@pytest.mark.parametrize("m", [4096, 1001])
def test_one_token_writes_a_contiguous_column_in_one_launch(m, dtype):
    """N = 1: D [M, 1] is allocated column-major (the same memory), x read in place: one
    GEMM launch, no staging; eager CuPy and torch calls, a plan, a graph and out= agree."""
    import cupy
    import torch

    w, sw, x = operands(m, 1, 4096, dtype, "row", seed=m)
    info = {}
    y = cs.matmul(sw, x, info=info)
    check(y, w, x, dtype)
    assert y.shape == (m, 1) and y.flags.c_contiguous and "_tnn_" in info["config"]
    planned = cs.plan(sw, x)
    plan = planned.family_plan
    assert plan.layout_c == "col" and plan.n_k == 1 and not plan.stage_x and plan.direct and planned.direct
    check(planned(x), w, x, dtype)
    out = poisoned((m, 1), dtypes.numpy_dtype(dtype))
    captured_and_replayed(lambda: cs.matmul(sw, x, out=out))
    check(out, w, x, dtype)
    xt = torch_view(x)
    for _ in range(3):   # the first call plans, later ones take the eager fast path
        yt = cs.matmul(sw, xt)
        assert isinstance(yt, torch.Tensor) and yt.shape == (m, 1) and yt.is_contiguous()
        check(cupy.asarray(yt.float()), w, x, dtype)


def test_layouts_are_not_interchangeable():
    w, sw, x = operands(128, 64, 128, "f16", "row", seed=5)
    sw80 = cs.compress(w, layout="sm80")
    with pytest.raises(ValueError, match="compressed in the 'sm80' layout; the sm90 kernels"):
        cs.matmul(sw80, x, family="sm90")
    with pytest.raises(ValueError, match="compressed in the 'sm90' layout; the sm80 kernels"):
        cs.matmul(sw, x, family="sm80")


def test_tma_rule_violations_are_staged():
    import cupy

    w, sw, x = operands(128, 64, 128, "f16", "row", seed=6)
    x60 = cupy.ascontiguousarray(x[:, :60])           # 120-byte rows: staged, D padded and viewed
    check(cs.matmul(sw, x60), w, x60, "f16")
    with pytest.raises(ValueError, match="K a multiple of 16"):
        cs.compress(cupy.zeros((32, 40), dtype=cupy.float16), layout="sm90")


@pytest.mark.parametrize("splits", gpu_cases.SPLITS)
@pytest.mark.parametrize("shape", gpu_cases.SM90_SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sm90_split_k_serial(shape, splits):
    m, n, k = shape
    w, sw, x = operands(m, n, k, "f16", "row", seed=splits)
    config = gpu_cases.sm90_streamk_config()
    info = {}
    y = poisoned((m, n), np.float16)
    cs.matmul(sw, x, out=y, config=config, split_k=splits, split_k_mode="serial", info=info)
    assert info["split_k"] == splits and (info["workspace_bytes"] > 0) == (splits > 1)
    check(y, w, x, "f16")
    # Same pointers again: the cached Params and workspace are reused, so the reduction's
    # barriers must have been reset before this launch.
    y.view(np.uint16)[...] = 0x7E00
    cs.matmul(sw, x, out=y, config=config, split_k=splits)
    check(y, w, x, "f16")


def test_sm90_split_k_caller_workspace_and_errors():
    import cupy

    m, n, k = gpu_cases.SM90_SPLIT_SHAPES[0]
    w, sw, x = operands(m, n, k, "f16", "row", seed=11)
    config = gpu_cases.sm90_streamk_config()
    need = cs.workspace_size(sw, x, config=config, split_k=3)
    assert need > 0 and cs.workspace_size(sw, x, config=config, split_k=1) == 0
    workspace = cupy.empty(need, dtype=cupy.uint8)
    check(cs.matmul(sw, x, config=config, split_k=3, workspace=workspace), w, x, "f16")
    with pytest.raises(ValueError, match="workspace holds"):
        cs.matmul(sw, x, config=config, split_k=3, workspace=cupy.empty(need // 2, dtype=cupy.uint8))
    with pytest.raises(ValueError, match="split_k_mode 'parallel' is not offered by the sm90 family"):
        cs.matmul(sw, x, split_k=2, split_k_mode="parallel")
    with pytest.raises(ValueError, match="split_k must be an integer >= 1"):
        cs.matmul(sw, x, split_k=0)
    with pytest.raises(ValueError, match="exceeds the 9 K tiles"):
        cs.matmul(sw, x, config=config, split_k=10)
    persistent = next(c for c in gpu_cases.sm90_configs() if c.tile_scheduler == "persistent")
    with pytest.raises(ValueError, match="needs an sm90 stream-K kernel"):
        cs.matmul(sw, x, config=persistent, split_k=2)


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
@pytest.mark.parametrize("m, k", [(320, 448), (100, 48), (4096, 4096), (1376, 512)])
def test_compress_encodes_what_cutlass_compressor_writes(m, k, dtype):
    # cs.compress encodes the sm90 layout with CuPy (formats.sm90_layout); CUTLASS's
    # compressor kernel must write the same bytes for fresh matrices (zero groups too).
    import cupy

    from cutlass_sparse.launch import sm90_compress

    w, _, _ = operands(m, 8, k, dtype, "row", seed=m + k)
    w[: m // 5, : k // 3] = 0
    ours = cs.compress(w, layout="sm90")
    values, metadata = sm90_compress.compress(w, dtype, ours.atom_k)
    assert ours.values.size == values.size and ours.metadata.size == metadata.size
    assert bool((ours.values.view(cupy.uint16) == values.view(cupy.uint16)).all())
    assert bool((ours.metadata == metadata).all())


def test_a_cold_sm90_gemm_is_stood_in_for_by_the_sm80_family(monkeypatch):
    # The sm90 GEMM made to look missing (no compile is started: the background start is
    # replaced): default-family calls run on the sm80 family with a converted weight, and
    # take the sm90 GEMM once it is cached. Calls naming the family never stand in.
    from cutlass_sparse.build import background, kernels
    from cutlass_sparse.plan import plans, stand_in

    missing = {"on": True}
    real_cached, real_loaded = kernels.cached, kernels.loaded
    monkeypatch.setattr(kernels, "cached", lambda config, arch, cache=None:
                        real_cached(config, arch, cache) and not (missing["on"] and config.family == "sm90"))
    monkeypatch.setattr(kernels, "loaded", lambda config, arch:
                        real_loaded(config, arch) and not (missing["on"] and config.family == "sm90"))
    started = []
    monkeypatch.setattr(background, "start", lambda items: started.append(items) or (None, "log"))
    monkeypatch.setattr(background, "under_way", lambda config, arch: missing["on"])
    monkeypatch.setattr(stand_in, "CHECK_EVERY_S", 0.0)
    stand_in.clear()
    plans.clear()
    try:
        m, n, k = 256, 512, 1024
        w, sw, x = operands(m, n, k, "f16", "row", seed=11)
        from cutlass_sparse.api import eager
        from cutlass_sparse.launch.sm80 import Sm80Plan

        info = {}
        check(cs.matmul(sw, x, info=info), w, x, "f16")
        assert info["config"].startswith("cutlass_tensorop") and len(started) == 1
        assert info["stand_in_for"].startswith("cutlass3x_sm90")
        check(cs.matmul(sw, x), w, x, "f16")                 # again: not remembered by the eager path
        check(cs.matmul(sw, x), w, x, "f16")
        # (eager keys start with the weight's shape, dtype and layout)
        assert not any(isinstance(e.plan, Sm80Plan) for key, e in eager._entries.items() if key[2] == "sm90")
        tokens = x.T.copy()                                     # cs.linear: x column-major, its own kernel
        check(cs.linear(tokens, sw).T, w, x, "f16")
        assert len(started) == 2 and started[0] != started[1]
        info = {}
        check(cs.matmul(sw, x, family="sm90", info=info), w, x, "f16")
        assert info["config"].startswith("cutlass3x_sm90")
        import cupy

        # a plan runs (and so prepares) the kernel it launches, never the stand-in: its first
        # call captures into a graph
        planned = cs.plan(sw, x)
        assert planned.info["config"].startswith("cutlass3x_sm90") and planned.direct
        planned_out = cupy.empty((m, n), dtype=cupy.float16)
        captured_and_replayed(lambda: planned(x, out=planned_out))
        check(planned_out, w, x, "f16")
        # under graph capture a call never stands in (the graph would keep the sm80 kernel)

        out = cupy.empty((m, n), dtype=cupy.float16)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            cs.matmul(sw, x, out=out)
            graph = stream.end_capture()
        assert stand_in.standing_in() and len(started) == 2
        out.fill(0)
        graph.launch(stream)
        stream.synchronize()
        check(out, w, x, "f16")
        missing["on"] = False                                    # the compiles landed
        info = {}
        check(cs.matmul(sw, x, info=info), w, x, "f16")
        assert info["config"].startswith("cutlass3x_sm90")
        check(cs.linear(tokens, sw).T, w, x, "f16")
        assert not stand_in.standing_in() and stand_in._sm80_weights == {} and len(started) == 2
        check(cs.matmul(sw, x), w, x, "f16")                 # plain calls now remembered, on sm90
        check(cs.matmul(sw, x), w, x, "f16")
        remembered = [e.plan for key, e in eager._entries.items() if key[:3] == (sw.shape, sw.dtype, "sm90")]
        assert remembered and not any(isinstance(plan, Sm80Plan) for plan in remembered)
    finally:
        stand_in.clear()
        plans.clear()
