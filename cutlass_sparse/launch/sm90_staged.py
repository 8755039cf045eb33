"""Runs of an sm90 plan whose operands the kernel cannot read in place: x copied into an
aligned buffer of a padded leading dimension, D written to one and copied out (or returned
as an [M, N] view of it), C staged like x. Sm90Plan decides what is staged (launch.sm90_choice);
this is the running of it, from arrays (run) or the caller's pointers (launch_staged).
"""
from __future__ import annotations

from ..describe import dtypes
from .sm90_params import NO_VECTORS
from .staging import copy_lines, copy_rows, stage


class StagedRuns:
    """Sm90Plan's runs that stage operands (needs the plan's stage_*, kernel_problem, ldd,
    ldc, layout_c, n_k, _staging, ready, launch and launch_direct)."""

    def run(self, sw, x, out, c, workspace, scales=NO_VECTORS):
        """Launch on the current stream; returns D as [M, N] (`out` when given). scales:
        a scaled kernel's vectors (NO_VECTORS)."""
        import cupy

        p, k = self.problem, self.kernel_problem
        if self.stage_x:
            x = stage(x, k.x.ld, p.layout_b, self.n_k)
        if not self.stage_out:
            d = out
        elif self.layout_c == "row":
            d = cupy.empty((p.m, self.ldd), dtype=dtypes.numpy_dtype(p.element_out))
        else:
            d = cupy.empty((self.n_k, self.ldd), dtype=dtypes.numpy_dtype(p.element_out)).T
        if not p.epilogue.reads_c:
            c = d
        elif self.stage_c:
            c = stage(c, self.ldc, self.layout_c, self.n_k)
        if c is d and workspace is None:
            self.launch_direct(sw, x.data.ptr, d.data.ptr, None, scales)
        else:
            self.launch(self.ready(sw, (x.data.ptr, c.data.ptr, d.data.ptr), workspace, None, scales))
        if d is out:
            return out
        # D allocated here as [M, N] already needs no slice (a CuPy slice costs about 1 us of host time)
        y = d if d.shape == (p.m, p.n) else d[:p.m, :p.n]
        if out is None:
            return y
        # out has D's layout (the Problem says so): one strided copy
        copy_rows(out, y) if self.layout_c == "row" else copy_rows(out.T, y.T)
        return out

    def launch_staged(self, sw, x_ptr: int, d_ptr: int, stream=None, scales=NO_VECTORS, allocate=None) -> None:
        """run() from the caller's pointers, x and D laid out as the Problem says (C
        unread), on `stream` (default: the current one): x copied into an aligned buffer,
        D written to one and copied out, as the plan stages them. Where the Problem has no
        out (the library allocates D), d_ptr is D in rows of the plan's leading dimension,
        written in place. Decode-sized buffers are kept per stream and thread
        (staging.KeptBuffers), larger ones come from the stream's pool (or `allocate`, a
        CuPy allocator: torch's for a torch call): either way a repeated call gets the same
        ones and finds its Params built."""
        import cupy

        stream = stream or cupy.cuda.get_current_stream()
        p, k = self.problem, self.kernel_problem
        item, out_item = dtypes.numpy_dtype(p.element).itemsize, dtypes.numpy_dtype(p.element_out).itemsize
        x_row, d_row = p.layout_b == "row", self.layout_c == "row"
        if self.stage_x:   # rows of N (row-major) or columns of K, in pitch k.x.ld
            lines, width = (p.k, p.n * item) if x_row else (p.n, p.k * item)
            x_buffer = self._staging.get((p.k if x_row else self.n_k) * k.x.ld * item, stream, "x", allocate)
            copy_lines(x_buffer.data.ptr, k.x.ld * item, x_ptr, p.x.ld * item, width, lines, stream, p.device_id)
            x_ptr = x_buffer.data.ptr
        kernel_d = d_ptr
        if self.stage_out and p.out is not None:
            d_buffer = self._staging.get((p.m if d_row else self.n_k) * self.ldd * out_item, stream, "d", allocate)
            kernel_d = d_buffer.data.ptr
        self.launch(self.ready(sw, (x_ptr, kernel_d, kernel_d), None, stream, scales), stream)
        if kernel_d != d_ptr:
            lines, width = (p.m, p.n * out_item) if d_row else (p.n, p.m * out_item)
            copy_lines(d_ptr, p.out.ld * out_item, kernel_d, self.ldd * out_item, width, lines, stream, p.device_id)
