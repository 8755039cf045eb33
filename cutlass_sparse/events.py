"""Whether a CUDA event has completed, asked so that no graph capture breaks. In torch's
default (global) capture mode, a potentially unsafe call such as an event query from ANY
thread is prohibited while a capture runs, and fails with that capture invalidated; a
thread in relaxed mode is exempt. The library asks after its own events (a copy of Params
landed, a conversion finished) from calls on any thread, so it asks in relaxed mode. (A
capture on the asking thread's own stream must still not ask at all: callers check that.)"""
from __future__ import annotations

_exchange = None


def done(event) -> bool:
    """event.done (a CuPy Event), asked in relaxed capture mode."""
    global _exchange
    if _exchange is None:
        from cuda.bindings import driver

        relaxed = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED

        def exchange(mode=relaxed):   # the driver's per-thread mode, which the runtime's calls obey
            return driver.cuThreadExchangeStreamCaptureMode(mode)[1]

        _exchange = exchange
    previous = _exchange()
    try:
        return event.done
    finally:
        _exchange(previous)
