"""Stream-K workspaces the library allocates for the tail twin (sm90_choice.tail_twin): one
per device, stream and size, shared by every twin launch on that stream.

Launches on one stream run one after another, and each zeroes its barriers before it runs
and writes its partial tiles before it reads them, so they can share one buffer; a launch
on another stream gets that stream's own (Sm90Plan keys such launches by `identity`; a
graph captures a workspace of its own). The size is the most any shape of the kernel asks
for (sm90_prepare.shared_workspace_bytes), so the buffer never has to grow under Params
already built around it: a serving loop over new N holds one buffer per stream, not one
per N (20-26 MB each at the H100's twin shapes).

A buffer lives as long as a launch that holds it (the launches Sm90Plan and cs.plan keep,
a graph that captured one): the table only finds it for the next launch on its stream, so
there is never more than one per stream and size, however many streams come and go (a
least-recently-used table made a new one for a stream it had dropped while that stream's
kept launches still held the old: 20-26 MB more per churn).
"""
from __future__ import annotations

import threading
import weakref

from . import graphs

# cudaStreamPerThread: one handle for every thread's own default stream (CuPy's
# CUPY_CUDA_PER_THREAD_DEFAULT_STREAM), which run concurrently
PER_THREAD_STREAM = 2
# (device, stream identity, size) -> the buffer, while some launch holds it
_buffers: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_lock = threading.Lock()


def identity(stream) -> tuple[int, int]:
    """What tells a stream's launches apart from every other stream's: its handle, and the
    thread where the handle is the per-thread default stream."""
    return stream.ptr, threading.get_ident() if stream.ptr == PER_THREAD_STREAM else 0


def for_stream(device_id: int, stream, nbytes: int):
    """The shared workspace of `nbytes` for launches on `stream` (a CuPy stream) of this device."""
    key = (device_id, identity(stream), nbytes)
    with _lock:
        buffer = _buffers.get(key)
        if buffer is not None:
            return buffer
    import cupy

    with cupy.cuda.Device(device_id), stream:   # from the stream's own pool
        made = cupy.empty(nbytes, dtype=cupy.uint8)
    with _lock:
        return _buffers.setdefault(key, made)


def for_launch(device_id: int, stream, nbytes: int, shared_bytes: int) -> tuple[object, bool]:
    """(workspace, shared) for a launch the caller gave none: its stream's shared one of
    `shared_bytes` (a tail twin's; 0: none) where that holds `nbytes`; else, and under
    capture, a new one from the launching stream's pool (freed, it is reused in that
    stream's order) or the graph's."""
    if nbytes <= shared_bytes and not graphs.capturing(stream.ptr):
        return for_stream(device_id, stream, shared_bytes), True
    return graphs.empty(nbytes, stream), False


def held_in_capture(ready, stream) -> bool:
    """Whether a kept launch (a launch.sm90_ready.Ready) runs on its stream's shared workspace
    while `stream` captures a graph: the graph, replayed on any stream, needs one of its own."""
    return ready.shared_workspace and stream is not None and graphs.capturing(stream.ptr)


def clear() -> None:
    """Forget every shared workspace (launches that hold one keep it until they go; the next
    launch on its stream gets a new one)."""
    with _lock:
        _buffers.clear()
