"""CUDA graphs keep the buffers a captured call allocated for itself (launch.graphs).

Each case captures a call that allocates for itself (a staged x, a padded D copied out,
a bias vector, a split-K workspace, Params built by the setup entry), then drops
the library's plans (what eviction from its bounded caches does), allocates arrays of the
sizes that call allocated and fills them with a pattern, replays the graph, and checks
the result against dense and that the pattern is intact. Without the graph keeping its
buffers the pool hands them out again and the replay writes into those arrays: the
control case shows the check catches that. Marked gpu."""
import gc
import sys
import time
from pathlib import Path

import pytest

import cutlass_sparse as cs
from cutlass_sparse.api import eager, interop
from cutlass_sparse.launch import graphs
from cutlass_sparse.launch.staging import KeptBuffers
from cutlass_sparse.plan import plans

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gpu_epilogue_split_k import assert_close, expect  # noqa: E402
from test_gpu_matmul import random_operands  # noqa: E402

pytestmark = pytest.mark.gpu

PATTERN = 0xA5


def _sizes(call) -> list[int]:
    """Bytes of each allocation `call` makes through CuPy's allocator."""
    import cupy

    sizes, base = [], cupy.cuda.get_allocator()

    def record(nbytes):
        sizes.append(nbytes)
        return base(nbytes)

    with cupy.cuda.using_allocator(record):
        call()
    return sizes


def _forget_plans() -> None:
    """Drop every plan the library keeps, as its bounded caches do when they fill."""
    eager.clear()
    plans.clear()
    gc.collect()


def _captured_then_churned(call, stream):
    """Warm `call` on `stream`, capture it, forget the plans, allocate and fill arrays of
    the sizes its first call allocated (twice over), replay, and return (graph, what the
    captured call returned, whether the filled arrays are intact, holds added)."""
    import cupy

    cupy.cuda.Device().synchronize()   # operands were filled on the default stream
    with stream:
        sizes = _sizes(call)
        call()
        stream.synchronize()
        before = graphs.release_finished()
        stream.begin_capture()
        result = call()
        graph = stream.end_capture()
        added = graphs.release_finished() - before
        _forget_plans()
        junk = [cupy.full(max(size, 1), PATTERN, dtype=cupy.uint8) for size in sizes for _ in range(2)]
        graph.launch(stream)
        stream.synchronize()
    intact = all(bool((j == PATTERN).all()) for j in junk)
    return graph, result, intact, added


def _wait_released(count: int) -> bool:
    """Whether holds fall to `count` within a few seconds (the driver posts from its own thread)."""
    for _ in range(300):
        if graphs.release_finished() <= count:
            return True
        time.sleep(0.01)
    return False


def _torch_weight(torch, seed: int, m: int, k: int):
    """(generator, a pruned f16 torch weight [m, k], its compressed form), from `seed`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = cs.prune_2to4(torch.randn(m, k, device="cuda", generator=g).half())
    return g, w, cs.compress(w)


def _sm90_or_skip():
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")


def _case(name):
    """(weight, compressed weight, x, the call, what it must give) for one case."""
    import cupy

    if name == "odd-n":   # x staged into rows of 256, D written padded and copied into out
        w, sw, x = random_operands(256, 255, 4096, "f16", "row", seed=71, family="sm90")
        out = cupy.zeros((256, 255), dtype=cupy.float16)
        return lambda: cs.matmul(sw, x, out=out), expect(w, x)
    if name == "bias":    # the bias as a float32 vector the call allocates (the scaled epilogue adds it)
        w, sw, x = random_operands(256, 64, 512, "f16", "row", seed=72, family="sm90")
        bias = cupy.random.default_rng(73).standard_normal(256, dtype=cupy.float32).astype(cupy.float16)
        out = cupy.zeros((256, 64), dtype=cupy.float16)
        want = expect(w, x, bias_full=bias.astype(cupy.float32)[:, None], activation="relu")
        return lambda: cs.matmul(sw, x, bias=bias, activation="relu", out=out), want
    if name == "stream-k":   # sm90 split-K: a workspace and Params built by the setup entry
        w, sw, x = random_operands(256, 64, 1040, "f16", "row", seed=74, family="sm90")
        out = cupy.zeros((256, 64), dtype=cupy.float16)
        return lambda: cs.matmul(sw, x, out=out, split_k=2), expect(w, x)
    if name == "sm80-parallel":   # partials in a workspace, summed by the reduction kernel
        w, sw, x = random_operands(256, 72, 1000, "f16", "row", seed=75, family="sm80")
        out = cupy.zeros((256, 72), dtype=cupy.float16)
        return lambda: cs.matmul(sw, x, out=out, split_k=2, split_k_mode="parallel"), expect(w, x)
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["odd-n", "bias", "stream-k", "sm80-parallel"])
def test_a_graph_keeps_what_its_call_allocated(name):
    import cupy

    if name != "sm80-parallel":
        _sm90_or_skip()
    call, want = _case(name)
    stream = cupy.cuda.Stream(non_blocking=True)
    before = graphs.release_finished()
    graph, result, intact, added = _captured_then_churned(call, stream)
    assert added > 0, "the captured call handed nothing to its graph"
    assert intact, "the replay wrote into memory allocated after the capture"
    assert_close(result, want, "f16")
    del graph
    gc.collect()
    assert _wait_released(before), "the destroyed graph's buffers were not released"


def test_without_holds_the_replay_writes_into_later_allocations(monkeypatch):
    # The control: with the graph keeping nothing, the check above fails, so it can.
    import cupy

    _sm90_or_skip()
    call, _ = _case("odd-n")
    monkeypatch.setattr(graphs, "hold", lambda *args, **kwargs: False)
    stream = cupy.cuda.Stream(non_blocking=True)
    graph, _, intact, added = _captured_then_churned(call, stream)
    del graph
    assert added == 0
    assert not intact, "the pool did not hand a freed temporary out again: the control shows nothing"


def test_a_capture_never_gets_a_kept_staging_buffer():
    import cupy

    kept = KeptBuffers()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        eager_buffer = kept.get(4096, stream, "x")
        assert kept.get(4096, stream, "x") is eager_buffer   # kept between eager calls
        before = graphs.release_finished()
        stream.begin_capture()
        captured = kept.get(4096, stream, "x")
        cupy.cuda.runtime.memsetAsync(captured.data.ptr, 0, 4096, stream.ptr)   # a capture needs a node
        graph = stream.end_capture()
    assert captured is not eager_buffer and graphs.release_finished() == before + 1
    del graph
    gc.collect()
    assert _wait_released(before)


def test_torch_graph_of_staged_calls_keeps_its_buffers():
    # torch's eager path stages x (N = 7: a kept-buffer size; N = 255 with K = 4096: a pool
    # one) and D into out, on torch's capture stream.
    torch = pytest.importorskip("torch")
    import cupy

    _sm90_or_skip()
    cases = []
    for n, k, seed in ((7, 512, 76), (255, 4096, 77)):
        w, sw, x = random_operands(512 if n == 7 else 256, n, k, "f16", "row", seed=seed, family="sm90")
        xt = torch.as_tensor(x, device="cuda")
        out = torch.zeros((w.shape[0], n), dtype=torch.float16, device="cuda")
        cases.append((w, x, sw, xt, out))
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()

    def calls():
        for _, _, sw, xt, out in cases:
            cs.matmul(sw, xt, out=out)

    with torch.cuda.stream(stream), interop._cupy_stream(stream.cuda_stream, stream.device.index):
        sizes = _sizes(calls)   # the first calls: what they allocate through CuPy's pool
        calls()                 # warm: plans and Params
    torch.cuda.synchronize()
    before = graphs.release_finished()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        calls()
    assert graphs.release_finished() > before
    _forget_plans()
    with interop._cupy_stream(stream.cuda_stream, stream.device.index):
        junk = [cupy.full(max(size, 1), PATTERN, dtype=cupy.uint8) for size in sizes for _ in range(2)]
    for _, _, _, _, out in cases:
        out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert all(bool((j == PATTERN).all()) for j in junk)
    for w, x, _, _, out in cases:
        assert_close(cupy.asarray(out), expect(w, x), "f16")
    del graph
    gc.collect()
    assert _wait_released(before)


def test_holds_cost_nothing_outside_a_capture():
    # Outside a capture nothing is handed over: the eager path keeps no record per call.
    import cupy

    _sm90_or_skip()
    call, _ = _case("odd-n")
    before = graphs.release_finished()
    for _ in range(3):
        call()
    cupy.cuda.get_current_stream().synchronize()
    assert graphs.release_finished() == before


def test_an_eager_call_never_launches_params_a_capture_built():
    """A capture's first launch on new buffers has its setup entry inside the graph: its
    Params exist only once the graph replays. An eager call on the same buffers before
    any replay (checking the graph against eager, or after a failed capture) must build
    its own (sm90 stream-K: its Params are always built on the device)."""
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(256, 64, 1040, "f16", "row", seed=81, family="sm90")
    cs.matmul(sw, x.copy(), out=cupy.zeros((256, 64), dtype=cupy.float16), split_k=2)   # the plan, made eagerly
    out = cupy.zeros((256, 64), dtype=cupy.float16)
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.get_current_stream().synchronize()
    with stream:
        stream.begin_capture()
        cs.matmul(sw, x, out=out, split_k=2)
        graph = stream.end_capture()
        cs.matmul(sw, x, out=out, split_k=2)   # eager, no replay yet
        stream.synchronize()
        assert_close(out, expect(w, x), "f16")
        out.fill(0)
        graph.launch(stream)
        stream.synchronize()
    assert_close(out, expect(w, x), "f16")


def test_a_graph_reads_its_own_bias_vector_not_a_kept_one():
    """A biased torch call keeps its float32 bias vector for the next eager call on its
    stream. A capture on that stream must not bake the kept vector in: replacing it (a call
    with another bias) frees it, and the replay would read whatever took its memory."""
    torch = pytest.importorskip("torch")

    _sm90_or_skip()
    g, w, sw = _torch_weight(torch, 82, 256, 512)
    x = torch.randn(7, 512, device="cuda", generator=g).half()
    bias, other = (torch.randn(256, device="cuda", generator=g).half() for _ in range(2))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        cs.linear(x, sw, bias=bias, activation="relu")   # eager: the vector kept for this stream
        y = cs.linear(x, sw, bias=bias, activation="relu")
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        y = cs.linear(x, sw, bias=bias, activation="relu")
    with torch.cuda.stream(stream):
        cs.linear(x, sw, bias=other, activation="relu")   # replaces (frees) the kept vector
        junk = [torch.full((256,), float("nan"), device="cuda") for _ in range(64)]   # takes freed memory
    stream.synchronize()
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    ref = torch.relu(x.float() @ w.float().T + bias.float())
    assert float((y.float() - ref).norm() / ref.norm()) < 2e-2
    del junk


def test_a_kernels_first_use_on_the_device_inside_a_torch_capture(monkeypatch):
    """The first setup of a kernel on a device reads CUTLASS's recipes back (it synchronizes);
    where that first use comes inside a capture (torch's global mode; a cold kernel that lands
    mid-capture, say), the readback runs on a stream of its own in relaxed mode, and the
    captured call replays right (session 35's stress: a D2H copy refused inside a capture)."""
    torch = pytest.importorskip("torch")
    from cutlass_sparse.launch import sm90_params, sm90_prepare

    _sm90_or_skip()
    g, w, sw = _torch_weight(torch, 93, 4096, 4096)
    x = torch.randn(4096, 4096, device="cuda", generator=g).half()
    out = torch.zeros(4096, 4096, device="cuda", dtype=torch.half)
    # as in a new process: no kernel has had its first setup on this device
    monkeypatch.setattr(sm90_prepare, "_templates", {})
    monkeypatch.setattr(sm90_prepare, "_prepared", {})
    monkeypatch.setattr(sm90_prepare, "_stream_k_confirmed", set())
    monkeypatch.setattr(sm90_params, "pointer_maps", {})
    plans.clear()
    eager.clear()
    try:
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
            cs.matmul(sw, x, out=out)
        ref = w.float() @ x.float()
        for _ in range(2):
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            assert float((out.float() - ref).norm() / ref.norm()) < 2e-3
    finally:   # plans made around the tables this test replaced go with them
        plans.clear()
        eager.clear()
