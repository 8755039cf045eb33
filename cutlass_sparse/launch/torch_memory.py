"""CuPy allocations drawn from torch's caching allocator.

Inside a torch call, what the library allocates for itself (a padded D it returns, a
staged operand, a folded bias, a split-K workspace) comes from torch's allocator on
torch's current stream, as torch's own operations allocate: torch's memory statistics
count it, `torch.cuda.empty_cache()` releases it, and no second caching pool (CuPy's)
keeps blocks torch cannot reuse. Under torch's graph capture, torch serves the capture
from the graph's own pool (its capture mode forbids cudaMalloc).
"""
from __future__ import annotations

import sys

_allocators: dict[tuple, object] = {}   # (device, stream pointer or None) -> allocator


def allocator(device: int, stream_ptr: int | None = None):
    """A CuPy allocator (nbytes -> MemoryPointer) drawing on torch's for one device: for
    torch's current stream, or for the stream at stream_ptr. torch's allocator hands a
    block freed on a stream to the next allocation on that stream at once, while kernels
    queued there may still use it, which is safe only for work on that stream: work on
    another stream (build_ahead's side stream) takes its blocks for that stream."""
    found = _allocators.get((device, stream_ptr))
    if found is None:
        import cupy
        import torch

        if stream_ptr is None:
            def allocate(nbytes: int):
                tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
                return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(tensor.data_ptr(), nbytes, tensor, device), 0)
        else:
            stream = torch.cuda.ExternalStream(stream_ptr, device=torch.device("cuda", device))

            def allocate(nbytes: int):
                with torch.cuda.stream(stream):
                    tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
                return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(tensor.data_ptr(), nbytes, tensor, device), 0)

        # one allocator per key even where threads race here: for_stream tells torch's
        # current-stream allocator by identity
        found = _allocators.setdefault((device, stream_ptr), allocate)
    return found


def for_stream(device: int, stream_ptr: int):
    """`with for_stream(device, ptr):` where a torch call's allocator is in effect (using),
    CuPy allocations come from torch's for the stream at ptr instead of torch's current
    one; elsewhere nothing changes (CuPy's pool keeps blocks per stream)."""
    import contextlib

    import cupy

    if cupy.cuda.get_allocator() is not _allocators.get((device, None)):
        return contextlib.nullcontext()
    return cupy.cuda.using_allocator(allocator(device, stream_ptr))


def using(device: int):
    """`with using(device):` this thread's CuPy allocations come from torch's allocator."""
    import cupy

    return cupy.cuda.using_allocator(allocator(device))


def capture_allocator():
    """torch's allocator, if torch is capturing a graph on its current stream; else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_current_stream_capturing():
        return None
    return allocator(torch.cuda.current_device())
