"""Stream-K workspaces the library allocates for the tail twin (sm90_choice.tail_twin): one
per device, stream and size, shared by every twin launch on that stream.

Launches on one stream run one after another, and each zeroes its barriers before it runs
and writes its partial tiles before it reads them, so they can share one buffer; a launch
on another stream gets that stream's own (Sm90Plan keys such launches by stream). The size
is the most any shape of the kernel asks for (sm90_prepare.shared_workspace_bytes), so the
buffer never has to grow under Params already built around it: a serving loop over new N
holds one buffer per stream, not one per N (20-33 MB each at the H100's twin shapes).
"""
from __future__ import annotations

import threading

MAX_BUFFERS = 16   # (device, stream, size) kept; an evicted one lives on in the launches that hold it
_buffers: dict[tuple[int, int, int], object] = {}
_lock = threading.Lock()


def for_stream(device_id: int, stream, nbytes: int):
    """The shared workspace of `nbytes` for launches on `stream` (a CuPy stream) of this device."""
    key = (device_id, stream.ptr, nbytes)
    buffer = _buffers.get(key)
    if buffer is None:
        import cupy

        with cupy.cuda.Device(device_id), stream:   # from the stream's own pool
            made = cupy.empty(nbytes, dtype=cupy.uint8)
        with _lock:
            if len(_buffers) >= MAX_BUFFERS and key not in _buffers:
                _buffers.pop(next(iter(_buffers)))
            buffer = _buffers.setdefault(key, made)
    return buffer


def is_shared(buffer) -> bool:
    """Whether `buffer` is a stream's shared workspace (launches holding it hold no memory of their own)."""
    return any(kept is buffer for kept in list(_buffers.values()))
