"""launch.setup_order: setups of one module on two streams never overlap (the nonce race
behind session 35's illegal instruction), with stand-in streams and events (no GPU)."""
import pytest

from cutlass_sparse.launch import graphs, setup_order


class Event:
    def __init__(self, disable_timing=True):
        self.records = []

    def record(self, stream):
        self.records.append(stream.name)


class Stream:
    def __init__(self, name, ptr):
        self.name, self.ptr, self.waited = name, ptr, []

    def wait_event(self, event):
        self.waited.append(event.records[-1])   # what a wait takes: the record made before it


@pytest.fixture
def order(monkeypatch):
    cupy = pytest.importorskip("cupy")
    monkeypatch.setattr(cupy.cuda, "Event", Event)
    monkeypatch.setattr(setup_order, "_last", {})
    capturing = set()
    monkeypatch.setattr(graphs, "capturing", lambda ptr: ptr in capturing)
    return capturing


def test_a_setup_waits_for_the_modules_last_setup_on_another_stream(order):
    main, side, other = Stream("main", 0x10), Stream("side", 0x20), Stream("other", 0x30)
    launched = []
    kernel, other_kernel = ("k", 0), ("j", 0)
    setup_order.queue(kernel, main, lambda: launched.append("main 1"))
    setup_order.queue(kernel, main, lambda: launched.append("main 2"))
    assert main.waited == []                       # one stream: nothing waits
    setup_order.queue(kernel, side, lambda: launched.append("side 1"))
    assert side.waited == ["main"]                 # after main's last setup of the module
    setup_order.queue(other_kernel, other, lambda: launched.append("other kernel"))
    assert other.waited == []                      # another module's variable: no order needed
    setup_order.queue(kernel, main, lambda: launched.append("main 3"))
    assert main.waited == ["side"]
    assert launched == ["main 1", "main 2", "side 1", "other kernel", "main 3"]


def test_a_capturing_stream_neither_waits_nor_records(order):
    main, capture = Stream("main", 0x10), Stream("capture", 0x40)
    setup_order.queue(("k", 0), main, lambda: None)
    order.add(capture.ptr)
    setup_order.queue(("k", 0), capture, lambda: None)   # a wait on an event from outside the capture
    assert capture.waited == []
    setup_order.queue(("k", 0), main, lambda: None)
    assert main.waited == []                             # the capture recorded nothing
