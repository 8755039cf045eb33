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

_allocators: dict[int, object] = {}


def allocator(device: int):
    """A CuPy allocator (nbytes -> MemoryPointer) drawing on torch's for one device."""
    found = _allocators.get(device)
    if found is None:
        import cupy
        import torch

        def allocate(nbytes: int):
            tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=device)
            return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(tensor.data_ptr(), nbytes, tensor, device), 0)

        found = _allocators[device] = allocate
    return found


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
