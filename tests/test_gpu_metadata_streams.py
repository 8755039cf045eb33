"""A weight's metadata converted for a tile-K-64 kernel on first use (4096^3 f16 runs
128x256x64): ready for a call on another stream at once, and for an eager call after a
CUDA graph capture that needed it first. Both failed before the conversion kept an event
and a capture converted for itself (scripts/device/probe_metadata_streams.py). Marked gpu."""
import pytest

import cutlass_sparse as cs

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def needs_sm90():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU")


@pytest.fixture(scope="module")
def x():
    return torch.randn(4096, 4096, device="cuda", generator=torch.Generator(device="cuda").manual_seed(3)).half()


def fresh_weight(seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda", generator=g).half())
    sw = cs.compress(w)
    torch.cuda.synchronize()
    assert not sw.holds_metadata_for(64)
    return w, sw


def relative_error(y, w, x):
    torch.cuda.synchronize()
    ref = w.float() @ x.float()
    return float((y.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_another_stream_waits_for_the_first_calls_conversion(x, seed):
    w, sw = fresh_weight(seed)
    busy, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(busy):
        torch.cuda._sleep(50_000_000)   # the first call's conversion queues behind this
        y_busy = cs.matmul(sw, x)
    with torch.cuda.stream(other):      # not ordered after `busy`
        y_other = cs.matmul(sw, x)
    assert relative_error(y_busy, w, x) < 2e-2
    assert relative_error(y_other, w, x) < 2e-2
    assert cs.matmul(sw, x) is not None and sw.holds_metadata_for(64)   # seen done by a later call


def test_a_capture_that_needs_the_conversion_first_converts_for_itself(x):
    w, sw = fresh_weight(4)
    out = torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=torch.cuda.Stream()):
        cs.matmul(sw, x, out=out)
    assert not sw.holds_metadata_for(64)   # the graph's conversion is its own
    assert relative_error(cs.matmul(sw, x), w, x) < 2e-2   # eager, before any replay
    out.zero_()
    graph.replay()
    assert relative_error(out, w, x) < 2e-2


def test_setup_buffers_read_on_another_stream_stay_until_that_launch_is_done(x, monkeypatch):
    """A launch whose Params the setup wrote into a buffer from one stream's pool, launched on
    another stream: evicted meanwhile, the buffer would go back to the first stream's pool
    while the GEMM still reads it (review of session 19, item 8). It is kept until then."""
    from cutlass_sparse.api.interop import _cupy_stream   # CuPy 14 deprecates ExternalStream
    from cutlass_sparse.launch import sm90

    def stream(torch_stream):
        return _cupy_stream(torch_stream.cuda_stream, torch.cuda.current_device())

    w, sw = fresh_weight(5)
    family = cs.plan(sw, x).family_plan
    monkeypatch.setattr(family, "_from_host", lambda *args: None)   # build: Params in a device buffer,
    monkeypatch.setattr(family, "_readies", type(family._readies)())  # not a launch kept by earlier tests
    built_on, reader = torch.cuda.Stream(), torch.cuda.Stream()
    y = torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
    pointers = (x.data_ptr(), y.data_ptr(), y.data_ptr())
    ready = family.ready(sw, pointers, None, stream(built_on))
    assert not ready.by_value and ready.stream == built_on.cuda_stream
    reader.wait_stream(built_on)
    before = len(sm90._read_elsewhere)
    with torch.cuda.stream(reader):
        torch.cuda._sleep(50_000_000)   # the GEMM queues behind this
        family.launch(ready, stream(reader))
    assert len(sm90._read_elsewhere) == before + 1   # held while the GEMM is queued
    reader.synchronize()
    sm90._read_elsewhere.drop_done()
    assert len(sm90._read_elsewhere) == 0
    family.launch(ready, stream(built_on))   # its own stream: nothing kept
    assert len(sm90._read_elsewhere) == 0
    assert relative_error(y, w, x) < 2e-2
