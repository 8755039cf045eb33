"""Staging copies: an operand into an aligned buffer, a padded result back into the
caller's array, as one launch of the staging copy kernel (emit.line_copy) on the given
stream; and the small staging buffers a plan keeps.

A kernel, not cudaMemcpy2DAsync: the copy engine moves a decode step's x (4096 lines of
14 bytes) in about 7 us and every switch between it and the compute engine costs more
again, where the kernel takes a few, and a copy between two programmatic launches would
end their overlap. Where the kernel cannot be had (compiling forbidden and not in the
cache) the 2-D memcpy does the copy.
"""
from __future__ import annotations

import ctypes
import threading

from . import graphs

# Staging buffers up to this size are kept (a decode step's x is a few KB); larger ones
# come from the stream's memory pool at each call.
KEEP_BYTES = 1 << 20
MAX_KEPT = 16
# Blocks of the copy kernel at most (grid-stride beyond): 4 of 256 threads per H100 SM
# leave room beside them for the GEMM that launches programmatically after the copy.
MAX_BLOCKS = 528


def copy_lines(dst_ptr: int, dst_pitch: int, src_ptr: int, src_pitch: int, width: int, lines: int,
               stream=None, device_id: int | None = None) -> None:
    """`lines` runs of `width` bytes from src to dst, each pointer advancing by its pitch,
    on `stream` (a CuPy stream; default the current one) of device `device_id` (default:
    the current device)."""
    import cupy

    stream = stream or cupy.cuda.get_current_stream()
    if width <= 0 or lines <= 0:
        return
    device_id = cupy.cuda.runtime.getDevice() if device_id is None else device_id
    copier = _copiers.get(device_id, _UNASKED)
    if copier is _UNASKED:   # loading a module is no work for a stream capturing a graph
        copier = None if graphs.capturing(stream.ptr) else _copier(device_id)
    if copier is not None:
        copier(dst_ptr, dst_pitch, src_ptr, src_pitch, width, lines, stream)
        return
    runtime = cupy.cuda.runtime
    # a single line may report any pitch; 2-D copies want pitches of at least its width
    runtime.memcpy2DAsync(dst_ptr, max(dst_pitch, width), src_ptr, max(src_pitch, width), width, lines,
                          runtime.memcpyDeviceToDevice, stream.ptr)


class _LineCopier:
    """The staging copy kernel's entries on one device, launched from a packed argument
    block (launch.pdl.Entry: programmatic, after whatever the stream ran last)."""

    def __init__(self, device_id: int, compiled):
        from ..describe.helper_kernels import LineCopyConfig
        from ..emit.arguments import LINE_COPY
        from . import modules, pdl

        loaded = modules.load(compiled)
        config = LineCopyConfig()
        self._entries = {unit: pdl.Entry(loaded.function(device_id, config.entry(unit)), (compiled.threads, 1, 1), 0)
                         for unit in config.UNITS}
        self._threads = compiled.threads
        self._pack_into, self._size = LINE_COPY.packer.pack_into, LINE_COPY.packer.size
        self._kernel_params = pdl.kernel_params
        self._scratch = threading.local()   # each thread's block and kernelParams (the driver copies them)

    def _block(self):
        block = ctypes.create_string_buffer(self._size)
        params = self._kernel_params(block)
        self._scratch.made = found = (block, ctypes.addressof(params), params)
        return found

    def __call__(self, dst_ptr, dst_pitch, src_ptr, src_pitch, width, lines, stream) -> None:
        # the widest access (up to 16 bytes) that divides both addresses, the width and,
        # where there is more than one line, both pitches
        bits = dst_ptr | src_ptr | width | 16 | ((dst_pitch | src_pitch) if lines > 1 else 0)
        block, params_address, _ = getattr(self._scratch, "made", None) or self._block()
        self._pack_into(block, 0, dst_ptr, src_ptr, dst_pitch, src_pitch, width, lines)
        unit = bits & -bits
        units = width // unit * lines
        # a thread a unit up to MAX_BLOCKS (a small copy's latency is one round), then
        # rounds of emit.line_copy.PER_THREAD units a thread
        grid = (min(-(-units // self._threads), MAX_BLOCKS), 1, 1)
        self._entries[unit](grid, params_address, stream, True)


_copiers: dict[int, _LineCopier | None] = {}
_UNASKED = object()
_copiers_lock = threading.Lock()


def _copier(device_id: int) -> _LineCopier | None:
    """The device's staging copy kernel, or None where it cannot be had (compiling
    forbidden and not in the cache; asked once per device and process)."""
    try:
        return _copiers[device_id]
    except KeyError:
        pass
    from ..build import compiler, kernels
    from ..describe.helper_kernels import LineCopyConfig
    from . import device

    with _copiers_lock:
        if device_id not in _copiers:
            try:
                compiled = kernels.get(LineCopyConfig(), device.sm90_target(device.facts(device_id)[0], device_id))
                _copiers[device_id] = _LineCopier(device_id, compiled)
            except (compiler.CompileError, ValueError):   # no kernel (or not an sm_90 device): the 2-D memcpy
                _copiers[device_id] = None
    return _copiers[device_id]


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
    copy_lines(buffer.data.ptr, ld * item, array.data.ptr, pitch, width, lines, device_id=array.device.id)
    return view


def copy_rows(dst, src) -> None:
    """dst[...] = src for two row-major [R, C] arrays of one dtype (any leading dimensions)."""
    rows, cols = src.shape
    item = src.dtype.itemsize
    copy_lines(dst.data.ptr, dst.strides[0], src.data.ptr, src.strides[0], cols * item, rows,
               device_id=dst.device.id)


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
