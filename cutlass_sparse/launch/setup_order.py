"""The sm90 setup entry's launches: two setups of one module never run at once.

The setup entry hands its launch's nonce to CuTe's TMA recipe hook through a `__device__`
variable of its module (emit.sm90, emit.nvrtc_headers.RECIPE_HOOK): it stores the nonce
first and the hook reads it back thousands of instructions later (the 128x256x64 kernels'
SASS). Two setups of one module running at once on two streams overwrite each other's nonce;
the one that loses finds none of its own recipes, so its Params keep raw recipes where TMA
descriptors belong, and the GEMM that reads them stops at its first TMA load with an illegal
instruction, a sticky error that ends the process's CUDA context (the intermittent fault of
sessions 32 and 34; session 35 reproduced it in four of four processes with
scripts/device/stress_first_calls.py, and GPU core dumps placed it at a multicast TMA load).

A hook with a nonce of the launch's own (a `__shared__` variable: the setup is one thread)
would end this, but recompiles every sm90 kernel; until a release recompiles them anyway, the
launches are ordered instead, per module copy (modules.LoadedKernel.function's `copy`):
- build-ahead's setups (sm90_params.build_ahead, on its one side stream per device) run in a
  copy of their own (AHEAD): their stream orders them, and no other stream uses the copy;
- setups captured in a graph run in another copy (CAPTURED): a graph replays them in no order
  with eager setups, so they must not share the eager setups' variable; within one capture,
  each waits for the capture's last setup of the module on any of its streams (an event
  recorded in the capture: an edge of the graph);
- every other setup waits for the module's last eager setup (one event per module, recorded
  after each; waiting on it from its own stream costs a call and nothing on the device).
The wait is stream-ordered: a setup on stream B also waits for what stream A had queued before
its last setup (once per new pointer set or shape, never in a by-value launch).
What stays unordered: two graphs that captured setups of one kernel, replayed at once.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from .. import events

AHEAD = 1      # build-ahead's setups' module copy (0: the module of eager launches)
CAPTURED = 2   # setups captured in a graph
CAPTURE_SLOTS = 1024   # (capture, module) slots kept; a finished capture's are dead weight

# (kernel key, device, copy, capture id or 0) -> (lock, [event recorded after the last setup]):
# eager setups' by module, captured ones' by capture and module (the oldest captures' go first)
_eager: dict[tuple, tuple] = {}
_captured: OrderedDict[tuple, tuple] = OrderedDict()
_slots_lock = threading.Lock()


def capture_id(stream_ptr: int) -> int | None:
    """The id of the capture `stream_ptr` takes part in, or None (a query capture allows)."""
    from cuda.bindings import driver

    err, status, capture, *_ = driver.cuStreamGetCaptureInfo(driver.CUstream(stream_ptr))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuStreamGetCaptureInfo failed: {err.name}")
    return int(capture) if status == driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE else None


def preload(loaded, device_id: int) -> None:
    """Load the setup entry of both copies now (at a kernel's first setup, which synchronizes
    anyway), so that no module loads inside a capture or at a range's first call."""
    for copy in (AHEAD, CAPTURED):
        loaded.function(device_id, f"{loaded.compiled.symbol}_setup", copy=copy)


def queue(loaded, device_id: int, stream, block, ahead: bool = False) -> None:
    """Queue the setup entry of `loaded` (a modules.LoadedKernel) with the argument `block` on
    `stream` (a CuPy stream of that device), in the module copy and order the docstring gives."""
    capture = None if ahead else capture_id(stream.ptr)
    copy = AHEAD if ahead else CAPTURED if capture is not None else 0
    setup = loaded.function(device_id, f"{loaded.compiled.symbol}_setup", copy=copy)
    if ahead:   # its one stream orders them
        setup((1, 1, 1), (1, 1, 1), (block,), 0, stream)
        return
    lock, slot = _slot((loaded.compiled.key, device_id, copy, capture or 0), capture is not None)
    with lock:   # another thread's setup of the slot must see this one as the last
        if slot[0] is not None:
            stream.wait_event(slot[0])
        setup((1, 1, 1), (1, 1, 1), (block,), 0, stream)
        if slot[0] is None:
            import cupy

            with cupy.cuda.Device(device_id), events.relaxed():   # an event creation inside a capture
                slot[0] = cupy.cuda.Event(disable_timing=True)
        slot[0].record(stream)


def _slot(key: tuple, captured: bool) -> tuple[threading.Lock, list]:
    """(lock, [event or None]) of one module copy's order (one capture's, for a captured one)."""
    table = _captured if captured else _eager
    with _slots_lock:
        found = table.get(key)
        if found is None:
            found = table[key] = (threading.Lock(), [None])
            if captured and len(table) > CAPTURE_SLOTS:
                table.popitem(last=False)
        return found
