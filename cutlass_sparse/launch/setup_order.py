"""One sm90 setup at a time per loaded module: setups on two streams never overlap.

The setup entry hands its launch's nonce to the TMA recipe hook inside CuTe through a
`__device__` variable of its module (emit.sm90, emit.nvrtc_headers.RECIPE_HOOK): it stores
the nonce first and the hook reads it back thousands of instructions later (in the
128x256x64 kernels' SASS). Two setups of one module running at once on two streams
overwrite each other's nonce; the one that loses finds none of its own recipes, so its
Params keep raw recipes where TMA descriptors belong, and the GEMM that reads them stops at
its first TMA load with an illegal instruction, a sticky error that ends the process's CUDA
context (the intermittent fault of sessions 32 and 34; session 35 reproduced it in four of
four processes with scripts/device/stress_first_calls.py, and GPU core dumps placed it at a
multicast TMA load of the range's other kernel right after the range was built ahead).

Fixing the hook would recompile every sm90 kernel; ordering the launches does not
(Sm90Plan.queue_setup picks the module):
- build-ahead's setups (sm90_params.build_ahead, on its side stream) run in a module copy of
  their own (LoadedKernel.function(..., copy=AHEAD)), whose variable no other stream touches;
- setups captured in a graph run in another copy (CAPTURED): a graph replays them in no
  order with any stream's setups, so they must not share the eager calls' variable;
- every other setup of a module waits, on its stream, for the module's last setup on another
  stream (an event; on one stream, nothing waits).
What stays unordered: two graphs holding setups of one kernel, replayed at once on two streams.
"""
from __future__ import annotations

import threading

from . import graphs
from .stream_workspaces import identity

# Module copies (0: the module every other launch uses)
AHEAD = 1      # build-ahead's setups
CAPTURED = 2   # setups captured in a graph

# (kernel key, device) -> [identity of the stream of the module's last setup, an event
# recorded after it (re-recorded each time: a wait takes the record made before it)]
_last: dict[tuple, list] = {}
_lock = threading.Lock()


def queue(key: tuple, stream, launch) -> None:
    """launch(), which queues setups of one module (key: kernel key, device) on `stream` (a
    CuPy stream), after that module's last setup on any other stream."""
    if graphs.capturing(stream.ptr):   # no event from outside a capture can order it (queue_setup's copy does)
        launch()
        return
    import cupy

    me = identity(stream)
    with _lock:   # another thread's setup of the module must see this one as the last
        last = _last.get(key)
        if last is not None and last[0] != me:
            stream.wait_event(last[1])
        launch()
        if last is None:
            last = _last[key] = [me, cupy.cuda.Event(disable_timing=True)]
        last[0] = me
        last[1].record(stream)
