"""launch.setup_order: two setups of one sm90 module never run at once (the nonce race behind
session 35's illegal instruction), with stand-in streams, events and modules (no GPU): which
module copy each setup runs in, and what it waits for, in the order the driver sees the calls."""
import contextlib
import types

import pytest

from cutlass_sparse.launch import setup_order


class Log(list):
    pass


class Event:
    def __init__(self, log):
        self.log, self.last = log, None

    def record(self, stream):
        self.last = stream.name
        self.log.append(("record", stream.name))


class Stream:
    def __init__(self, log, name, ptr):
        self.log, self.name, self.ptr = log, name, ptr

    def wait_event(self, event):   # a wait takes the record made before it
        self.log.append(("wait", self.name, event.last))


class Loaded:
    """A LoadedKernel stand-in: each entry launch logs its stream and module copy."""

    def __init__(self, log, key="k"):
        self.log = log
        self.compiled = types.SimpleNamespace(key=key, symbol=f"kernel_{key}")
        self.loads = []

    def function(self, device_id, symbol, shared_bytes=0, copy=0):
        assert symbol == f"{self.compiled.symbol}_setup"
        self.loads.append((device_id, copy))

        def launch(grid, block, args, shared, stream):
            self.log.append(("launch", stream.name, self.compiled.key, device_id, copy))
        return launch


@pytest.fixture
def log(monkeypatch):
    cupy = pytest.importorskip("cupy")
    log = Log()
    monkeypatch.setattr(cupy.cuda, "Event", lambda disable_timing=True: Event(log))
    monkeypatch.setattr(cupy.cuda, "Device", lambda device_id: contextlib.nullcontext())
    monkeypatch.setattr(setup_order.events, "relaxed", contextlib.nullcontext)
    monkeypatch.setattr(setup_order, "_eager", {})
    monkeypatch.setattr(setup_order, "_captured", setup_order.OrderedDict())
    log.captures = {}   # stream ptr -> capture id
    monkeypatch.setattr(setup_order, "capture_id", lambda ptr: log.captures.get(ptr))
    return log


def test_an_eager_setup_waits_for_the_modules_last_one_before_it_launches(log):
    kernel = Loaded(log)
    main, side = Stream(log, "main", 0x10), Stream(log, "side", 0x20)
    setup_order.queue(kernel, 0, main, b"", False)
    setup_order.queue(kernel, 0, main, b"", False)
    setup_order.queue(kernel, 0, side, b"", False)
    setup_order.queue(kernel, 0, main, b"", False)
    assert log == [
        ("launch", "main", "k", 0, 0), ("record", "main"),
        ("wait", "main", "main"), ("launch", "main", "k", 0, 0), ("record", "main"),   # its own: a no-op
        ("wait", "side", "main"), ("launch", "side", "k", 0, 0), ("record", "side"),
        ("wait", "main", "side"), ("launch", "main", "k", 0, 0), ("record", "main")]


def test_other_modules_and_devices_are_not_ordered_against_it(log):
    main, other = Stream(log, "main", 0x10), Stream(log, "other", 0x30)
    setup_order.queue(Loaded(log, "k"), 0, main, b"", False)
    setup_order.queue(Loaded(log, "j"), 0, other, b"", False)   # another kernel's variable
    setup_order.queue(Loaded(log, "k"), 1, other, b"", False)   # the same kernel's module on device 1
    assert [entry for entry in log if entry[0] == "wait"] == []


def test_build_ahead_runs_in_its_own_copy_and_waits_for_nothing(log):
    kernel = Loaded(log)
    main, side = Stream(log, "main", 0x10), Stream(log, "side", 0x20)
    setup_order.queue(kernel, 0, main, b"", False)
    setup_order.queue(kernel, 0, side, b"", True)
    setup_order.queue(kernel, 0, main, b"", False)
    assert log == [
        ("launch", "main", "k", 0, 0), ("record", "main"),
        ("launch", "side", "k", 0, setup_order.AHEAD),
        ("wait", "main", "main"), ("launch", "main", "k", 0, 0), ("record", "main")]


def test_a_captures_setups_are_ordered_within_it_in_their_own_copy(log):
    """Setups on two streams of one capture (a forked capture) wait for each other through an
    event recorded in the capture (an edge of the graph); another capture and the eager
    setups are apart."""
    kernel = Loaded(log)
    main, fork, later = Stream(log, "main", 0x10), Stream(log, "fork", 0x40), Stream(log, "later", 0x50)
    log.captures.update({0x10: 7, 0x40: 7, 0x50: 8})
    setup_order.queue(kernel, 0, main, b"", False)
    setup_order.queue(kernel, 0, fork, b"", False)
    setup_order.queue(kernel, 0, later, b"", False)   # another capture: its own order
    log.captures.clear()
    setup_order.queue(kernel, 0, main, b"", False)    # eager again: no captured event to wait on
    captured = setup_order.CAPTURED
    assert log == [
        ("launch", "main", "k", 0, captured), ("record", "main"),
        ("wait", "fork", "main"), ("launch", "fork", "k", 0, captured), ("record", "fork"),
        ("launch", "later", "k", 0, captured), ("record", "later"),
        ("launch", "main", "k", 0, 0), ("record", "main")]


def test_a_plans_setups_go_through_the_order(log, monkeypatch):
    """Sm90Plan.queue_setup (every setup: a call's, build-ahead's, the first setup's and the
    pointer map's) hands its stream, block and ahead flag to setup_order.queue."""
    from cutlass_sparse.launch.sm90 import Sm90Plan

    seen = []
    monkeypatch.setattr(setup_order, "queue", lambda loaded, device, stream, block, ahead: seen.append(
        (loaded, device, stream.name, block, ahead)))
    plan = Sm90Plan.__new__(Sm90Plan)
    plan.loaded, plan.problem = "loaded", types.SimpleNamespace(device_id=3)
    stream = Stream(log, "s", 0x10)
    plan.queue_setup(b"block", stream)
    plan.queue_setup(b"ahead", stream, ahead=True)
    assert seen == [("loaded", 3, "s", b"block", False), ("loaded", 3, "s", b"ahead", True)]


def test_preload_loads_both_copies(log):
    kernel = Loaded(log)
    setup_order.preload(kernel, 2)
    assert kernel.loads == [(2, setup_order.AHEAD), (2, setup_order.CAPTURED)]
