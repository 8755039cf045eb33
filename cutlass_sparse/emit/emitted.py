"""What an emitter hands the compiler: the source and what its cubin must contain."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Emitted:
    source: str
    # extern "C" symbol -> the parameter bytes it must take: the block's total, or a tuple of
    # each parameter's size, where a constant's name stands for a size only the compiler knows
    entries: dict[str, int | tuple[int | str, ...]]
    constants: tuple[str, ...]                  # __constant__ ints f"{name}_{constant}" read back
    headers: tuple[tuple[str, str], ...] = ()   # in-memory headers (patched CUTLASS files)
    options: tuple[str, ...] = ()               # NVRTC options beyond compiler.BASE_OPTIONS
