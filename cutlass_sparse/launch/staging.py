"""Staging copies: an operand into an aligned buffer, a padded result back into the
caller's array, as single strided copies (cudaMemcpy2DAsync, a few microseconds of host
time, where an elementwise CuPy copy costs tens) on the current stream; and the small
staging buffers a plan keeps."""
from __future__ import annotations

import threading

from . import graphs

# Staging buffers up to this size are kept (a decode step's x is a few KB); larger ones
# come from the stream's memory pool at each call.
KEEP_BYTES = 1 << 20
MAX_KEPT = 16


def copy_lines(dst_ptr: int, dst_pitch: int, src_ptr: int, src_pitch: int, width: int, lines: int,
               stream=None) -> None:
    """`lines` runs of `width` bytes from src to dst, each pointer advancing by its pitch,
    on `stream` (a CuPy stream; default the current one)."""
    import cupy

    runtime = cupy.cuda.runtime
    # a single line may report any pitch; 2-D copies want pitches of at least its width
    runtime.memcpy2DAsync(dst_ptr, max(dst_pitch, width), src_ptr, max(src_pitch, width), width, lines,
                          runtime.memcpyDeviceToDevice, (stream or cupy.cuda.get_current_stream()).ptr)


def stage(array, ld: int, layout: str, n_k: int):
    """A copy of a 2-D [R, N] array (row- or column-major, as `layout` says) in a fresh
    buffer with leading dimension `ld` (elements), seen as [R, n_k]: row-major in [R, ld],
    column-major in [n_k, ld].T. Columns past N are left unwritten: column j of x (or C)
    reaches only column j of D, and D's columns past N are dropped."""
    import cupy

    rows, cols = array.shape
    item = array.dtype.itemsize
    if layout == "row":
        buffer = cupy.empty((rows, ld), dtype=array.dtype)
        view, lines, width, pitch = buffer[:, :n_k], rows, cols * item, array.strides[0]
    else:
        buffer = cupy.empty((n_k, ld), dtype=array.dtype)
        view, lines, width, pitch = buffer[:, :rows].T, cols, rows * item, array.strides[1]
    copy_lines(buffer.data.ptr, ld * item, array.data.ptr, pitch, width, lines)
    return view


def copy_rows(dst, src) -> None:
    """dst[...] = src for two row-major [R, C] arrays of one dtype (any leading dimensions)."""
    rows, cols = src.shape
    item = src.dtype.itemsize
    copy_lines(dst.data.ptr, dst.strides[0], src.data.ptr, src.strides[0], cols * item, rows)


class KeptBuffers:
    """Small staging buffers kept per stream, thread and role: a repeated call reuses its own
    (stream order makes that safe: the next copy into it runs after the kernel that read
    it), so it neither allocates nor brings new pointers whose launch must be built. Each
    thread gets its own, so two threads issuing on one stream never share one. A stream
    capturing a CUDA graph never gets a kept one: replays would share it with eager calls
    and outlive its eviction."""

    def __init__(self):
        self._buffers: dict[tuple, object] = {}

    def get(self, nbytes: int, stream, role: str, allocate=None):
        """A device buffer of nbytes for work on `stream` (a CuPy stream); `role` ("x",
        "d") keeps the buffers one launch uses apart when their sizes are equal. allocate:
        a CuPy allocator to draw new buffers from (torch's, for a torch call), else the
        stream's pool."""
        if graphs.capturing(stream.ptr):   # a graph being captured gets buffers of its own, which it keeps
            return graphs.held_empty(nbytes, stream)
        if nbytes > KEEP_BYTES:
            return _new(nbytes, stream, allocate)
        key = (stream.ptr, threading.get_ident(), nbytes, role)
        found = self._buffers.get(key)
        if found is None:
            if len(self._buffers) >= MAX_KEPT:
                self._buffers = {}
            found = self._buffers[key] = _new(nbytes, stream, allocate)
        return found


def _new(nbytes: int, stream, allocate=None):
    import cupy

    if allocate is not None:
        return cupy.ndarray(nbytes, dtype=cupy.uint8, memptr=allocate(nbytes))
    with stream:
        return cupy.empty(nbytes, dtype=cupy.uint8)
