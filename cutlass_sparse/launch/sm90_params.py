"""Params by value for the sm90 kernels: a call with new pointers launches once.

The setup entry builds a kernel's Params on the device. Params depend on the operands'
pointers only through a few 8-byte words: the pointers themselves and the address field
of each TMA descriptor. Those words are found once per kernel and device, by running the
setup with each pointer moved (PointerMap). A plan then copies the first Params it builds
back to the host without waiting (Template: a pinned buffer and an event); once the copy
has landed, a call with other pointers patches that copy and launches the kernel's
by-value entry, with no setup launch and no device buffer.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

DELTA = 1 << 20          # how far the mapping setups move each pointer (any 16-byte multiple)
POINTERS = 5             # a, e, b, c, d: the setup block's operand pointers, in order
_WORD = struct.Struct("<Q")
_MASK = (1 << 64) - 1


@dataclass(frozen=True)
class PointerMap:
    """Words of Params that hold a pointer: (byte offset, pointer index, right shift)."""

    words: tuple[tuple[int, int, int], ...]


def pointer_map(run_setup, params_bytes: int, base: tuple[int, ...]) -> PointerMap | None:
    """Where each pointer lands in Params, from setups with base pointers and with each one
    moved by DELTA (run_setup(pointers) -> a device array of Params; this synchronizes).
    None when some change is not a word moving by DELTA >> shift: no by-value launches then."""
    if params_bytes % 8:
        return None
    runs = [run_setup(base)] + [run_setup(tuple(p + DELTA if j == i else p for j, p in enumerate(base)))
                                for i in range(POINTERS)]
    words = [run.get().view(np.uint64) for run in runs]
    found, taken = [], set()
    for i in range(POINTERS):
        for w in np.nonzero(words[i + 1] != words[0])[0]:
            delta = (int(words[i + 1][w]) - int(words[0][w])) & _MASK
            shift = next((s for s in range(8) if DELTA >> s == delta), None)
            if shift is None or int(w) in taken:
                return None
            taken.add(int(w))
            found.append((int(w) * 8, i, shift))
    return PointerMap(tuple(found)) if found else None


class Template:
    """The Params a plan built for some pointers, on their way to the host."""

    def __init__(self, params, pointers: tuple[int, ...], stream):
        import cupy

        self.nbytes = params.nbytes
        self.host = cupy.cuda.alloc_pinned_memory(self.nbytes)
        self.pointers = pointers
        runtime = cupy.cuda.runtime
        stream = stream or cupy.cuda.get_current_stream()
        runtime.memcpyAsync(self.host.ptr, params.data.ptr, self.nbytes, runtime.memcpyDeviceToHost, stream.ptr)
        self.event = cupy.cuda.Event(disable_timing=True)
        self.event.record(stream)
        self.bytes = None     # the Params, once the copy has landed

    def arrived(self) -> bool:
        if self.bytes is None and self.event.done:
            self.bytes = bytes(np.frombuffer(self.host, dtype=np.uint8, count=self.nbytes))
        return self.bytes is not None

    def patched(self, mapping: PointerMap, pointers: tuple[int, ...]) -> np.ndarray | None:
        """Params for `pointers`, as the opaque record a launch passes by value (None for a
        move the shifted field cannot hold exactly)."""
        block = bytearray(self.bytes)
        old = self.pointers
        for offset, i, shift in mapping.words:
            moved = pointers[i] - old[i]
            if moved:
                if moved & ((1 << shift) - 1):
                    return None
                value = _WORD.unpack_from(block, offset)[0]
                _WORD.pack_into(block, offset, (value + (moved >> shift)) & _MASK)
        return np.frombuffer(block, dtype=np.dtype((np.void, self.nbytes)))
