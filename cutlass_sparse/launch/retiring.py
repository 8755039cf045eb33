"""Device buffers that kernels queued on other streams may still read, kept until those
kernels are done. A buffer from a stream's memory pool, once freed, is reused in that
stream's order only: a kernel on another stream that reads it must finish first."""
from __future__ import annotations

import threading

from .. import events
from . import graphs


class Retiring:
    """Held objects, each behind an event recorded on every stream that read it."""

    def __init__(self):
        # (held, device, {stream ptr: event, None until recorded}), in the order added
        self._entries: list[tuple[object, int, dict]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, held, stream_ptrs, device: int | None = None) -> None:
        """Keep `held` until the work queued so far on each of these streams (of `device`,
        default the current one) is done."""
        stream_ptrs = tuple(stream_ptrs)
        if device is None and stream_ptrs:
            import cupy

            device = cupy.cuda.runtime.getDevice()
        with self._lock:
            self._entries.append((held, device, dict.fromkeys(stream_ptrs)))
        self.drop_done()

    def drop_done(self) -> None:
        """Record the events not recorded yet (not into a graph a stream captures: later),
        then let go of what no queued kernel reads any more. Never waits. A stream's events
        complete in the order recorded, so once one is not done, later ones on that stream
        are not asked about."""
        if not self._entries:
            return
        with self._lock:
            busy: set[int] = set()
            kept = []
            for entry in self._entries:
                waits = entry[2]
                for ptr, event in waits.items():
                    if event is None:
                        waits[ptr] = _recorded(ptr, entry[1])
                done = True
                for ptr, event in waits.items():
                    if ptr in busy or event is None or not (event is _NOTHING_QUEUED or events.done(event)):
                        busy.add(ptr)
                        done = False
                if not done:
                    kept.append(entry)
            self._entries[:] = kept   # by identity: held objects (arrays) may not compare


_NOTHING_QUEUED = object()   # a destroyed stream's stand-in event: nothing can be queued there


def _recorded(stream_ptr: int, device: int):
    """An event recorded on the stream now (on its device); None while the stream captures
    a graph (ask again later)."""
    import cupy

    try:
        if graphs.capturing(stream_ptr):
            return None
        with cupy.cuda.Device(device):
            event = cupy.cuda.Event(disable_timing=True)
            cupy.cuda.runtime.eventRecord(event.ptr, stream_ptr)
        return event
    except cupy.cuda.runtime.CUDARuntimeError:   # a destroyed stream: nothing queued there
        return _NOTHING_QUEUED
