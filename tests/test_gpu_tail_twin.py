"""The stream-K twin that default selection runs where a part-empty last wave splits
(sm90_choice.tail_twin), on the GPU: results against dense, with the epilogues a call can
ask for, a range of N that holds it and the persistent kernel, a plan captured in a CUDA
graph, and the workspace a caller passes. Marked gpu."""
import sys
from pathlib import Path

import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse import reference
from cutlass_sparse.describe import dtypes
from cutlass_sparse.launch import grid

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_cases  # noqa: E402
from test_gpu_epilogue_split_k import assert_close, expect  # noqa: E402
from test_gpu_matmul import poisoned, random_operands  # noqa: E402

pytestmark = pytest.mark.gpu

M, K = gpu_cases.TAIL_TWIN_M, gpu_cases.TAIL_TWIN_K
N_TWIN, N_PERSISTENT = gpu_cases.TAIL_TWIN_N, gpu_cases.TAIL_PERSISTENT_N   # one range of N


def _sm90_or_skip():
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")


def _twin(info):
    return info["decomposition"] == "heuristic" and "_streamk_" in info["config"] and info["workspace_bytes"] > 0


@pytest.mark.parametrize("layout", gpu_cases.LAYOUTS)
@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
def test_the_default_call_runs_the_twin_and_matches_dense(dtype, layout):
    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, dtype, layout, seed=81, family="sm90")
    info = {}
    y = cs.matmul(sw, x, out=poisoned((M, N_TWIN), dtypes.numpy_dtype(dtype)), info=info)
    assert _twin(info), info
    assert_close(y, expect(w, x), dtype)
    y2 = cs.matmul(sw, x)   # the library's D, then again: the barriers start from zero each launch
    y3 = cs.matmul(sw, x)
    assert_close(y2, expect(w, x), dtype)
    assert_close(y3, expect(w, x), dtype)


def test_the_twin_takes_a_bias_an_activation_and_c():
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=82, family="sm90")
    rng = cupy.random.default_rng(83)
    bias = rng.standard_normal(M, dtype=cupy.float32).astype(cupy.float16)
    c = rng.standard_normal((M, N_TWIN), dtype=cupy.float32).astype(cupy.float16)
    info = {}
    y = cs.matmul(sw, x, bias=bias, activation="relu", info=info)   # the bias rides the scaled epilogue
    assert _twin(info), info
    assert_close(y, expect(w, x, bias_full=bias.astype(cupy.float32)[:, None], activation="relu"), "f16")
    info = {}
    y = cs.matmul(sw, x, alpha=0.5, beta=-1.5, c=c, info=info)      # a kernel reading C
    assert _twin(info), info
    assert_close(y, expect(w, x, alpha=0.5, beta=-1.5, c=c), "f16")


def test_one_range_of_n_runs_both_kernels_in_an_eager_loop():
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "bf16", "row", seed=84, family="sm90")
    from cutlass_sparse.api import eager

    eager.clear()
    seen, xs = {}, {}
    for n in (N_TWIN, N_PERSISTENT, N_TWIN - 8, N_PERSISTENT - 8, N_TWIN):
        xs[n] = xn = cupy.ascontiguousarray(x[:, :n])
        assert_close(cs.matmul(sw, xn), expect(w, xn), "bf16")   # the eager path (and its build-ahead)
        info = {}
        y = cs.matmul(sw, xn, info=info)                         # the plan, reported
        seen[n] = _twin(info)
        assert_close(y, expect(w, xn), "bf16")
    assert seen == {N_TWIN: True, N_PERSISTENT: False, N_TWIN - 8: True, N_PERSISTENT - 8: False}
    # what the eager path remembered for each N (built ahead or made) runs the same kernel
    remembered = {e.problem.n: "_streamk_" in e.plan.config.name for e in list(eager._entries.values())
                  if (e.problem.m, e.problem.k, e.problem.element) == (M, K, "bf16") and e.problem.n in seen}
    assert remembered == seen


def test_linear_and_a_plan_replayed_in_a_cuda_graph():
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=85, family="sm90")
    tokens = cupy.ascontiguousarray(x.T)   # cs.linear: x [tokens, K]
    info = {}
    y = cs.linear(tokens, sw, info=info)
    assert _twin(info), info
    assert_close(y.T, expect(w, x), "f16")
    out = poisoned((M, N_TWIN), np.float16)
    plan = cs.plan(sw, x)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        plan(x, out=out)
        stream.synchronize()
        out[...] = 0
        stream.begin_capture()
        plan(x, out=out)
        graph = stream.end_capture()
        for _ in range(3):   # each replay zeroes its barriers before the GEMM
            graph.launch(stream)
        stream.synchronize()
    assert_close(out, expect(w, x), "f16")


def test_a_caller_workspace_of_workspace_size_bytes():
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=86, family="sm90")
    need = cs.workspace_size(sw, x)
    workspace = cupy.empty(need, dtype=cupy.uint8)
    info = {}
    y = cs.matmul(sw, x, workspace=workspace, info=info)
    assert _twin(info) and info["workspace_bytes"] == need, info
    sm_count = cupy.cuda.Device().attributes["MultiProcessorCount"]
    _, _, split = grid.stream_k_tiles(M, N_TWIN, K, (128, 256, 64), (2, 1), sm_count, info["swizzle"], info["raster"])
    assert need == sum(grid.stream_k_workspace(split, (128, 256, 64)))   # the split tiles' partials and barriers
    assert_close(y, expect(w, x), "f16")
    assert reference.relative_error(cs.matmul(sw, x, workspace=workspace), expect(w, x)) <= 2e-2


# (M, N, K) where selection runs the twin: 1.21 to 2.42 waves, along N and (3584 x 4096) along M
HOST_SHAPES = [(4608, 2048, 4096), (4096, 1280, 4096), (6144, 1536, 4096), (4608, 1280, 8192),
               (3584, 4096, 14336), (5120, 2048, 13824)]


@pytest.mark.parametrize("shape", HOST_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_hosts_stream_k_grid_and_workspace_are_cutlass_s(shape):
    """A new shape of a twin kernel whose templates the device has is prepared on the host
    (no synchronizing setup): the grid and workspace launch.grid computes must be what
    CUTLASS's setup reports (sm90_prepare.on_device raises otherwise)."""
    import cupy

    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.launch import sm90_prepare
    from cutlass_sparse.plan import plans

    _sm90_or_skip()
    scratch = cupy.empty(256, dtype=cupy.uint8)
    m, n, k = shape
    plan = plans.get(Problem.contiguous("sm90", m, n, k, sm_count=cupy.cuda.Device().attributes["MultiProcessorCount"]))
    assert sm90_prepare.host_stream_k(plan) is not None and plan.config.tile_scheduler == "streamk"
    prepared = sm90_prepare.on_device(plan, (scratch.data.ptr,) * 5)   # the setup builds descriptors only
    assert prepared.workspace_bytes > 0


def test_the_profiler_times_the_twin_beside_the_persistent_tile(tmp_path, monkeypatch):
    """cs.tune at a shape where the twin runs: both it and the persistent tile it replaced run
    checked and timed in one run, and the winner is the fastest of them."""
    from cutlass_sparse import env
    from cutlass_sparse.build import cache
    from cutlass_sparse.profiler.tune import format_table

    _sm90_or_skip()
    db = tmp_path / "tuned.db"
    if env.cache_path().exists():   # the compiled kernels; the record goes to this copy
        cache.KernelCache(db).merge_from(env.cache_path())
    monkeypatch.setenv("CUTLASS_SPARSE_CACHE", str(db))
    from cutlass_sparse.api import eager
    from cutlass_sparse.plan import plans

    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=87, family="sm90")
    try:
        winner, rows = cs.tune(sw, x, force=True, jobs=16)
        print(format_table(rows))
        ok = {(r.choice.tile[0], r.choice.tile[3], r.choice.twin, r.choice.swizzle): r.ms
              for r in rows if r.ms is not None}
        key = ((128, 256, 64), (2, 1, 1))
        twin, persistent = ok.get((*key, True, None)), ok.get((*key, False, None))
        assert twin is not None and persistent is not None, sorted(ok)
        assert rows[0].choice == winner and rows[0].ms <= min(twin, persistent)
        info = {}
        assert_close(cs.matmul(sw, x, info=info), expect(w, x), "f16")   # the recorded winner
    finally:   # plans made around this test's record must not serve the tests after it
        plans.clear()
        eager.clear()


def test_two_streams_running_the_twin_at_once_each_use_their_own_workspace():
    """Twin launches share their stream's workspace (launch.stream_workspaces): calls queued
    on two streams at once, with different outputs, must not meet in one workspace."""
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=88, family="sm90")
    x2 = cupy.ascontiguousarray(x[::-1])    # another x: the streams' results differ
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    outs = [poisoned((M, N_TWIN), np.float16) for _ in range(2)]
    cupy.cuda.Device().synchronize()
    plan = cs.plan(sw, x)
    family = plan.family_plan
    assert family.config.tile_scheduler == "streamk", family.config.name
    spaces = [[family.ready(sw, (xi.data.ptr, out.data.ptr, out.data.ptr), None, s).workspace.data.ptr
               for out in outs] for s, xi in zip(streams, (x, x2))]
    assert spaces[0][0] == spaces[0][1] and spaces[1][0] == spaces[1][1]   # one per stream ...
    assert spaces[0][0] != spaces[1][0]                                     # ... and apart
    for _ in range(6):   # the two streams' launches interleave on the GPU
        for stream, xi, out in zip(streams, (x, x2), outs):
            with stream:
                cs.matmul(sw, xi, out=out)
                plan(xi, out=out)
    cupy.cuda.Device().synchronize()
    assert_close(outs[0], expect(w, x), "f16")
    assert_close(outs[1], expect(w, x2), "f16")


def test_new_pointers_and_new_n_launch_the_twin_with_params_by_value(monkeypatch):
    """The twin's pointer map holds its workspace (sm90_params.map_pointers): once a setup's
    Params have reached the host, a call with new pointers, or a new N of the range (built
    ahead), patches a host copy with its pointers and its stream's shared workspace and
    launches no setup; each result matches dense, launched back to back on one workspace."""
    import cupy

    from cutlass_sparse.api import eager
    from cutlass_sparse.launch import sm90, sm90_params, stream_workspaces

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=89, family="sm90")
    eager.clear()
    stream = cupy.cuda.get_current_stream()
    plan = cs.plan(sw, x)
    family = plan.family_plan
    assert family.config.tile_scheduler == "streamk" and family._shared_workspace, family.config.name
    assert_close(plan(x), expect(w, x), "f16")            # the first setup of these pointers
    assert_close(cs.matmul(sw, x), expect(w, x), "f16")   # the eager class: its range built ahead
    cupy.cuda.Device().synchronize()                      # every copy to the host has landed
    offsets = sm90_params.pointer_maps.get((family.compiled.key, 0))
    assert offsets and offsets[sm90_params.WORKSPACE], sm90_params.failures
    builds = []
    original = sm90.Sm90Plan._build

    def counted(plan, pointers, workspace, stream=None, scales=(0, 0, 0)):
        builds.append(plan.problem.n)
        return original(plan, pointers, workspace, stream, scales)

    monkeypatch.setattr(sm90.Sm90Plan, "_build", counted)
    shared = stream_workspaces.for_stream(0, stream, family._shared_workspace)
    done = []
    for xi in (cupy.ascontiguousarray(x[::-1]), -x, x * 0.5):   # new pointers
        out = poisoned((M, N_TWIN), np.float16)
        ready = family.ready(sw, (xi.data.ptr, out.data.ptr, out.data.ptr), None, stream)
        assert ready.by_value and ready.workspace is shared and ready.barrier[1] > 0, ready
        family.launch(ready, stream)
        done.append((xi, out))
    for n in (N_TWIN - 16, N_TWIN - 24, N_TWIN - 8):       # new N of the twin's range
        xn = cupy.ascontiguousarray(x[:, :n])
        info = {}
        done.append((xn, cs.matmul(sw, xn)))
        cs.matmul(sw, xn, info=info)
        assert _twin(info), info
    assert builds == [], f"setups launched for N {builds}"
    for xi, y in done:
        assert_close(y, expect(w, xi), "f16")


def test_a_range_builds_ahead_for_both_its_kernels(monkeypatch):
    """A class's first eager call builds its range's N ahead for the kernel it runs; where the
    range holds two (the twin's), the other kernel's N are built on that kernel's first call
    (which maps its pointers if it has not run in the process: only its own call synchronizes
    for it). After that, new N of either kernel launch no setup. (Before session 33 the other
    kernel's N were never built ahead there: each made a plan and launched a setup, 400-600
    us of host time at M 4608, K 8192.)"""
    import cupy

    from cutlass_sparse.api import eager
    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.launch import device, sm90, sm90_params, sm90_prepare
    from cutlass_sparse.plan import plans

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=90, family="sm90")
    sm_count = cupy.cuda.Device().attributes["MultiProcessorCount"]
    persistent = plans.at_hand(Problem.contiguous("sm90", M, N_PERSISTENT, K, sm_count=sm_count)).compiled.key
    # as in a new process: the persistent kernel has not run here (no map, no templates, no shapes)
    sm90_params.pointer_maps.pop((persistent, 0), None)
    sm90_prepare._templates.pop((persistent, 0), None)
    for shape in [s for s in sm90_prepare._prepared if s[0] == persistent]:
        monkeypatch.delitem(sm90_prepare._prepared, shape)
    plans.clear()
    eager.clear()
    ns = (N_TWIN - 8, N_PERSISTENT - 24, N_TWIN - 16, N_PERSISTENT - 8, N_PERSISTENT - 16)
    xs = {n: cupy.ascontiguousarray(x[:, :n]) for n in (N_TWIN, N_PERSISTENT, *ns)}
    info = {}
    assert_close(cs.matmul(sw, xs[N_TWIN], info=info), expect(w, xs[N_TWIN]), "f16")
    assert _twin(info), info
    assert_close(cs.matmul(sw, xs[N_TWIN]), expect(w, xs[N_TWIN]), "f16")   # the class's first eager call
    first = cs.matmul(sw, xs[N_PERSISTENT])   # the persistent kernel's first call: maps it, builds its N
    cupy.cuda.Device().synchronize()
    assert sm90_params.pointer_maps.get((persistent, 0)), sm90_params.failures
    assert_close(first, expect(w, xs[N_PERSISTENT]), "f16")
    builds = []
    original = sm90.Sm90Plan._build

    def counted(plan, pointers, workspace, stream=None, scales=(0, 0, 0)):
        if stream is not device._side_streams.get(0):   # a build ahead runs there
            builds.append(plan.problem.n)
        return original(plan, pointers, workspace, stream, scales)

    monkeypatch.setattr(sm90.Sm90Plan, "_build", counted)
    results = {n: cs.matmul(sw, xs[n]) for n in ns}
    assert builds == [], f"setups launched for N {builds}"
    twins = {e.problem.n: "_streamk_" in e.plan.config.name for e in list(eager._entries.values())
             if (e.problem.m, e.problem.k) == (M, K) and e.problem.n in ns}
    assert twins == {n: n > N_PERSISTENT for n in ns}
    for n, y in results.items():
        assert_close(y, expect(w, xs[n]), "f16")


def test_a_callers_workspace_stays_the_callers_once_params_could_come_by_value():
    """A twin launch on the caller's workspace is never moved to its stream's shared one (the
    caller orders its own uses of that buffer; another stream's twin launches use theirs)."""
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=91, family="sm90")
    workspace = cupy.empty(cs.workspace_size(sw, x), dtype=cupy.uint8)
    family = cs.plan(sw, x).family_plan
    out = poisoned((M, N_TWIN), np.float16)
    stream = cupy.cuda.get_current_stream()
    for _ in range(3):   # the host copy of the first launch's Params has landed by the second
        ready = family.ready(sw, (x.data.ptr, out.data.ptr, out.data.ptr), workspace, stream)
        assert ready.workspace is workspace and not ready.shared_workspace, ready
        family.launch(ready, stream)
        stream.synchronize()
    assert_close(out, expect(w, x), "f16")


def test_a_capture_never_leaves_its_workspace_to_eager_calls():
    """A plan's kept twin launch runs on its stream's shared workspace; a graph captured
    from it gets a workspace of its own, even after the shared buffer left the kept set
    (stream_workspaces.clear, as plans.clear or an eviction does), and no launch kept for
    later eager calls holds the graph's."""
    import cupy

    from cutlass_sparse.launch import stream_workspaces

    _sm90_or_skip()
    w, sw, x = random_operands(M, N_TWIN, K, "f16", "row", seed=92, family="sm90")
    plan = cs.plan(sw, x)
    out = poisoned((M, N_TWIN), np.float16)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        plan(x, out=out)
        stream.synchronize()
        plan(x, out=out)       # by value now, on the stream's shared workspace
        stream.synchronize()
        stream_workspaces.clear()
        stream.begin_capture()
        plan(x, out=out)
        graph = stream.end_capture()
        kept = [r for r in list(plan._readies.values()) + list(plan.family_plan._readies.values())
                if r.stream == stream.ptr]   # (the family plan also keeps earlier tests' launches)
        assert kept and all(r.workspace is not None and r.shared_workspace and not r.captured for r in kept), \
            [(r.by_value, r.shared_workspace, r.captured) for r in kept]
        out[...] = 0
        for _ in range(2):
            graph.launch(stream)
            plan(x, out=out)   # eager between replays, on the stream's own buffer
        stream.synchronize()
    assert_close(out, expect(w, x), "f16")
