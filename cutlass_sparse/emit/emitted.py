"""What an emitter hands the compiler: the source and what its cubin must contain."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Emitted:
    source: str
    entries: dict[str, int]                     # extern "C" symbol -> parameter bytes it must take
    constants: tuple[str, ...]                  # __constant__ ints f"{name}_{constant}" read back
    headers: tuple[tuple[str, str], ...] = ()   # in-memory headers (patched CUTLASS files)
    options: tuple[str, ...] = ()               # NVRTC options beyond compiler.BASE_OPTIONS
