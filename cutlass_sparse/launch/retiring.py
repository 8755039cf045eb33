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
        self._entries: list[tuple[object, dict]] = []   # (held, {stream ptr: event, None until recorded})
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, held, stream_ptrs) -> None:
        """Keep `held` until the work queued so far on each of these streams is done."""
        with self._lock:
            self._entries.append((held, dict.fromkeys(stream_ptrs)))
        self.drop_done()

    def drop_done(self) -> None:
        """Record the events not recorded yet (not into a graph a stream captures: later),
        then let go of what no queued kernel reads any more. Never waits."""
        if not self._entries:
            return
        import cupy

        with self._lock:
            for entry in list(self._entries):
                waits = entry[1]
                for ptr, event in waits.items():
                    if event is None and not graphs.capturing(ptr):
                        event = cupy.cuda.Event(disable_timing=True)
                        try:
                            cupy.cuda.runtime.eventRecord(event.ptr, ptr)
                        except cupy.cuda.runtime.CUDARuntimeError:   # a destroyed stream: nothing queued there
                            pass
                        waits[ptr] = event
                if all(e is not None and events.done(e) for e in waits.values()):
                    self._entries.remove(entry)
