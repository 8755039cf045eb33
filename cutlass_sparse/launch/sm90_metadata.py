"""The metadata a sm90 kernel reads, for a launch on a stream. A matrix stores the atom
of tile K 128; a tile-K-64 kernel reads another layout, converted once on the stream of
the call that first needs it and kept in the matrix (SparseMatrix.metadata_for), which
has a call on another stream wait for the conversion until it is seen done. A stream
being captured in a CUDA graph can neither wait on nor query an event recorded outside
the capture, and what a capture converts exists only when the graph replays: so until the
kept conversion is seen done, a capture converts into a buffer of its own, kept by the
graph (one more small kernel in that graph)."""
from __future__ import annotations

from ..formats import sm90_layout
from . import graphs


def for_kernel(sw, atom_k: int, stream=None):
    """sw's metadata in the atom_k layout for a launch on `stream` (a CuPy stream;
    default the current one)."""
    if atom_k == sw.atom_k:   # the stored atom (tile K 128 and up): every call but tile K 64's
        return sw.metadata
    if sw.holds_metadata_for(atom_k):
        return sw.metadata_for(atom_k)
    if stream is None:
        import cupy

        stream = cupy.cuda.get_current_stream()
    if not graphs.capturing(stream.ptr):
        return sw.metadata_for(atom_k, stream)
    m, k = sw.shape
    out = graphs.held_empty(sm90_layout.metadata_bytes(m, k, atom_k), stream)
    with stream:
        return sm90_layout.convert(sw.metadata, m, k, sw.atom_k, atom_k, out=out)


def settled_ptr(sw, atom_k: int) -> int:
    """The address of sw's metadata in the atom_k layout where a launch on any stream reads
    it as it is (nothing to convert or wait for); 0 where a conversion is still to run or
    to be seen done."""
    if atom_k == sw.atom_k:
        return sw.metadata.data.ptr
    return sw.metadata_for(atom_k).data.ptr if sw.holds_metadata_for(atom_k) else 0
