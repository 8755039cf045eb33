"""Staging copies: an operand into an aligned buffer, a padded result back into the
caller's array, as single strided copies (cudaMemcpy2DAsync, a few microseconds of host
time, where an elementwise CuPy copy costs tens) on the current stream."""
from __future__ import annotations


def copy_lines(dst_ptr: int, dst_pitch: int, src_ptr: int, src_pitch: int, width: int, lines: int) -> None:
    """`lines` runs of `width` bytes from src to dst, each pointer advancing by its pitch."""
    import cupy

    runtime = cupy.cuda.runtime
    # a single line may report any pitch; 2-D copies want pitches of at least its width
    runtime.memcpy2DAsync(dst_ptr, max(dst_pitch, width), src_ptr, max(src_pitch, width), width, lines,
                          runtime.memcpyDeviceToDevice, cupy.cuda.get_current_stream().ptr)


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
