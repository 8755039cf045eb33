"""Whether a CUDA event has completed, asked so that no graph capture breaks. In torch's
default (global) capture mode, a potentially unsafe call such as an event query from ANY
thread is prohibited while a capture runs, and fails with that capture invalidated; a
thread in relaxed mode is exempt. The library asks after its own events (a copy of Params
landed, a conversion finished) from calls on any thread, so it asks in relaxed mode. (A
capture on the asking thread's own stream must still not ask at all: callers check that.)"""
from __future__ import annotations

import contextlib

_exchange = None


def _exchanger():
    """The function that swaps this thread's capture mode (the driver's per-thread mode, which
    the runtime's calls obey), made once."""
    global _exchange
    if _exchange is None:
        from cuda.bindings import driver

        relaxed_mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED

        def exchange(mode=relaxed_mode):
            return driver.cuThreadExchangeStreamCaptureMode(mode)[1]

        _exchange = exchange
    return _exchange


def done(event) -> bool:
    """event.done (a CuPy Event), asked in relaxed capture mode (no context manager: eager
    calls ask this)."""
    exchange = _exchange or _exchanger()
    previous = exchange()
    try:
        return event.done
    finally:
        exchange(previous)


@contextlib.contextmanager
def relaxed():
    """This thread in relaxed capture mode for the block: its potentially unsafe calls (a
    module load, say) break no capture."""
    exchange = _exchange or _exchanger()
    previous = exchange()
    try:
        yield
    finally:
        exchange(previous)
