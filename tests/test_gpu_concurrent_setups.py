"""Setups of one sm90 kernel on several streams at once, on the GPU. The setup entry hands its
launch's nonce to CuTe's TMA recipe hook; while the nonce was a `__device__` variable of the
module, two setups running at once took each other's nonce, left raw recipes in Params, and the
GEMM reading them stopped with an illegal instruction (sessions 32-35; with the variable, these
tests failed 5 of 5 runs). Since session 36 the nonce is in the setup block's shared memory
(emit.nvrtc_headers.RECIPE_HOOK) and setups are not ordered at all. Each setup here is held
behind a spinning kernel on its stream, so that they run together. Marked gpu."""
import numpy as np
import pytest

from cutlass_sparse.describe.problem import Problem
from cutlass_sparse.launch import device, sm90_params
from cutlass_sparse.plan import plans

pytestmark = pytest.mark.gpu

# The tail twin's kernel (128x256x64 2x1, stream-K): its setup stores the nonce and loads it
# back thousands of instructions later; with the nonce a module variable, 10 of 400 setups on two
# streams left a recipe (docs/probe_setup_race_h200_session35.log).
SHAPE = dict(m=4608, n=2048, k=4096)
SETUPS = 200


def _sm90_or_skip():
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")


def _spin(cupy, streams, cycles=50_000_000):
    """Hold each stream's queue a while, so what is queued behind it on each starts together."""
    kernel = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) { }
}""", "spin")
    for stream in streams:
        with stream:
            kernel((1,), (1,), (np.int64(cycles),))


def _plan_and_map(element):
    import cupy

    plan = plans.get(Problem.contiguous("sm90", SHAPE["m"], SHAPE["n"], SHAPE["k"], element=element))
    scratch = cupy.empty(256, dtype=cupy.uint8)
    plan._prepared((scratch.data.ptr,) * 5)   # the kernel's first setup: templates and pointer map
    offsets = sm90_params.pointer_maps.get((plan.compiled.key, plan.problem.device_id))
    assert offsets, f"{plan.config.name}: no pointer map ({sm90_params.failures})"
    return plan, offsets, scratch


def _unencoded(cupy, params, nbytes, offsets) -> int:
    host = params.get()
    return sum(not sm90_params.encoded(host[i, :nbytes].tobytes(), offsets) for i in range(len(host)))


@pytest.mark.parametrize("element", ["f16", "bf16"])
def test_setups_on_two_streams_at_once_each_encode_their_descriptors(element):
    import cupy

    _sm90_or_skip()
    plan, offsets, scratch = _plan_and_map(element)
    assert "128x256x64" in plan.config.name, plan.config.name
    nbytes = plan.compiled.constants["params_bytes"]
    params = cupy.zeros((SETUPS, -(-nbytes // 256) * 256), dtype=cupy.uint8)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    cupy.cuda.Device().synchronize()
    _spin(cupy, streams)
    for i in range(SETUPS):   # the library's own path for a call's Params
        plan._write_params((scratch.data.ptr,) * 5, params[i].data.ptr, None, streams[i % 2])
    cupy.cuda.Device().synchronize()
    assert _unencoded(cupy, params, nbytes, offsets) == 0


def test_build_ahead_beside_a_calls_setups_encodes_both():
    """build-ahead's setups (the device's side stream) while the call's stream runs setups of
    the same kernel: every Params of both encoded."""
    import cupy

    _sm90_or_skip()
    plan, offsets, scratch = _plan_and_map("f16")
    nbytes = plan.compiled.constants["params_bytes"]
    main = cupy.cuda.Stream(non_blocking=True)
    side = device.side_stream(plan.problem.device_id)
    params = cupy.zeros((SETUPS, -(-nbytes // 256) * 256), dtype=cupy.uint8)
    ahead = cupy.zeros((SETUPS, -(-nbytes // 256) * 256), dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()
    _spin(cupy, [main, side])
    for i in range(SETUPS):
        plan._write_params((scratch.data.ptr,) * 5, params[i].data.ptr, None, main)
        plan._write_params((scratch.data.ptr,) * 5, ahead[i].data.ptr, None, side)
    cupy.cuda.Device().synchronize()
    assert _unencoded(cupy, params, nbytes, offsets) == 0
    assert _unencoded(cupy, ahead, nbytes, offsets) == 0


def _split_k_operands(torch, seed: int):
    """(w, its compressed form, three x, three zeroed outputs) of a 1024x256x2048 f16 split-K
    call, whose Params come from the device (a setup per new buffer set); the first call ran
    eagerly (the plan and the kernel's first setup)."""
    import cutlass_sparse as cs

    _sm90_or_skip()
    g = torch.Generator(device="cuda").manual_seed(seed)
    m, k, n = 1024, 2048, 256
    w = cs.prune_2to4(torch.randn(m, k, device="cuda", generator=g).half())
    sw = cs.compress(w)
    xs = [torch.randn(k, n, device="cuda", generator=g).half() for _ in range(3)]
    outs = [torch.zeros(m, n, device="cuda", dtype=torch.half) for _ in range(3)]
    cs.matmul(sw, xs[0], out=outs[0], split_k=2)
    torch.cuda.synchronize()
    return w, sw, xs, outs


def _assert_products(w, xs, outs) -> None:
    for x, out in zip(xs, outs):
        ref = w.float() @ x.float()
        assert float((out.float() - ref).norm() / ref.norm()) < 2e-3


def test_setups_captured_on_two_forked_streams_in_torchs_global_mode():
    """A torch graph (global capture mode) whose capture forks onto a second stream, each
    stream's call launching a setup (split_k: Params from the device, new buffers): the two
    captured setups may run at once at every replay; every replay gives both results."""
    torch = pytest.importorskip("torch")
    import cutlass_sparse as cs

    w, sw, xs, outs = _split_k_operands(torch, 91)
    main, side = torch.cuda.Stream(), torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=main):
        cs.matmul(sw, xs[1], out=outs[1], split_k=2)
        side.wait_stream(main)   # the fork
        with torch.cuda.stream(side):
            cs.matmul(sw, xs[2], out=outs[2], split_k=2)
        main.wait_stream(side)   # the join
    for _ in range(3):
        for out in outs[1:]:
            out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        _assert_products(w, xs[1:], outs[1:])


def test_two_graphs_with_setups_of_one_kernel_replayed_at_once(monkeypatch):
    """Two torch graphs, each captured with a call that launches a setup of the same kernel
    (split_k: Params from the device), replayed at once on two streams held behind spinning
    kernels: the case the host-side order of session 35 left open, safe since the nonce is
    each setup's own. Every replay gives both results. Not a detector of the race itself: with
    the old module-variable nonce it passed 2 of 2 runs (session 36; two setups a replay, of a
    kernel that holds the nonce briefly); the two-stream tests above failed every run."""
    torch = pytest.importorskip("torch")
    import cupy

    import cutlass_sparse as cs

    w, sw, xs, outs = _split_k_operands(torch, 93)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    graphs, captured = [], []
    from cutlass_sparse.launch.sm90 import Sm90Plan

    queue_setup = Sm90Plan.queue_setup
    monkeypatch.setattr(Sm90Plan, "queue_setup", lambda plan, *a, **kw: captured.append(plan.compiled.key)
                        or queue_setup(plan, *a, **kw))
    for x, out, stream in zip(xs[1:], outs[1:], streams):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            cs.matmul(sw, x, out=out, split_k=2)
        graphs.append(graph)
    monkeypatch.undo()
    assert len(captured) >= 2 and len(set(captured)) == 1, captured   # a setup of one kernel in each graph
    for _ in range(20):
        for out in outs[1:]:
            out.zero_()
        torch.cuda.synchronize()
        _spin(cupy, [cupy.cuda.ExternalStream(s.cuda_stream) for s in streams], cycles=20_000_000)
        for graph, stream in zip(graphs, streams):
            with torch.cuda.stream(stream):
                graph.replay()
        torch.cuda.synchronize()
        _assert_products(w, xs[1:], outs[1:])
