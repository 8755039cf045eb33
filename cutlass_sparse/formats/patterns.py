"""2:4 (and tf32's 1:2) patterns: how each element type is pruned and described to the
sparse tensor cores, and the bit-level helpers every format shares. One implementation
serves NumPy and CuPy: written against the array module of its input (elementwise
integer logic and gathers only, no sorts), so the two agree bit for bit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import host
from ..describe import dtypes

ROW_GROUP = 32      # metadata rows are interleaved within groups of 32
K_MULTIPLE = 128    # stored K: a multiple of every threadblock K (and of two int8 metadata words)
LAYOUT_SM80 = "sm80"
LAYOUT_SM90 = "sm90"
LAYOUTS = (LAYOUT_SM80, LAYOUT_SM90)


@dataclass(frozen=True)
class Pattern:
    """How an element type is pruned and described to the sm80 sparse tensor cores."""

    group: int          # logical values per group along K: 4 (2:4) or 2 (1:2, 32-bit types)
    keep: int           # values kept per group
    word: type          # metadata word (CUTLASS's ElementE): uint16, or uint32 for 8-bit types

    @property
    def nibbles_per_word(self) -> int:
        return 2 * np.dtype(self.word).itemsize

    @property
    def logical_per_word(self) -> int:
        return self.nibbles_per_word * self.group

    @property
    def stored_per_word(self) -> int:
        return self.nibbles_per_word * self.keep

    @property
    def name(self) -> str:
        return f"{self.keep}:{self.group}"


# tf32: fp32 arrays; the tensor cores keep one of each pair (1:2) and read its nibble as
# the pair of 16-bit halves it occupies (0x4 for the first, 0xE for the second).
PATTERNS = {"f16": Pattern(4, 2, np.uint16), "bf16": Pattern(4, 2, np.uint16),
            "s8": Pattern(4, 2, np.uint32), "tf32": Pattern(2, 1, np.uint16)}
_SIGNLESS = {1: 0xFF, 2: 0x7FFF, 4: 0x7FFFFFFF}


class TooLarge(ValueError, MemoryError):
    """An input whose work cannot fit in the memory available, refused before allocating
    (a ValueError, and a MemoryError for code that catches that)."""


def _check_matrix(dense, what: str, batch: bool = False):
    """(array module, operand name) of a [M, K] (or, with batch, [batch, M, K]) operand,
    or a TypeError/ValueError naming `what` and the rule it breaks."""
    xp = dtypes.array_module(dense)
    if xp is np and (not isinstance(dense, np.ndarray) or isinstance(dense, np.ma.MaskedArray)):
        raise TypeError(f"{what} must be a numpy or cupy array, got {type(dense).__name__}")
    if dense.ndim != 2 and not (batch and dense.ndim == 3):
        want = "2-D [M, K] or 3-D [batch, M, K]" if batch else "2-D [M, K]"
        raise ValueError(f"{what} must be {want}, got shape {tuple(dense.shape)}")
    name = dtypes.operand_name(dense.dtype)
    if name not in dtypes.SM80_INPUT_NAMES:
        raise TypeError(f"{what} must be float16, bfloat16 (ml_dtypes.bfloat16), int8 or float32 (tf32) "
                        f"in native byte order, got {dense.dtype}")
    return xp, name


def is_broadcast_batch(dense) -> bool:
    """A 3-D array whose matrices are all one matrix (batch stride 0, as np.broadcast_to makes)."""
    return dense.ndim == 3 and dense.shape[0] > 1 and dense.strides[0] == 0


def available_bytes(dense) -> int | None:
    """Memory free for work on dense's side: the GPU's free memory plus CuPy's pooled free
    blocks for a cupy array; the host's free memory (host.available_bytes) for a numpy one.
    None when the platform does not say."""
    if dtypes.array_module(dense) is not np:
        import cupy

        with cupy.cuda.Device(dense.device.id):
            free, _ = cupy.cuda.runtime.memGetInfo()
        return free + cupy.get_default_memory_pool().free_bytes()
    return host.available_bytes()


def check_fits(dense, need: int, what: str, doing: str) -> None:
    """Refuse (TooLarge) work that needs more than the memory available, before allocating.
    Small work (under 64 MiB) is not checked: it always fits, and asking costs time."""
    if need < 2**26:
        return
    have = available_bytes(dense)
    if have is not None and need > have:
        side = "host" if dtypes.array_module(dense) is np else f"GPU {dense.device.id}"
        raise TooLarge(f"{what} of shape {tuple(dense.shape)} ({dense.dtype}) is too large: {doing} needs "
                       f"about {_gib(need)} and {_gib(have)} of {side} memory is available")


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB" if n >= 2**20 else f"{n} bytes"


def _bits(array):
    """The bit patterns as unsigned integers: all logic runs on these, so bf16 needs no
    float support from CuPy."""
    xp = dtypes.array_module(array)
    return array.view({1: xp.uint8, 2: xp.uint16, 4: xp.uint32}[array.dtype.itemsize])


# The largest bit pattern that is not NaN: inf (the exponent all ones, mantissa zero).
_INF = {"f16": 0x7C00, "bf16": 0x7F80, "tf32": 0x7F800000}


def _order_key(xp, bits, dtype_name: str):
    """An unsigned key per value that orders |x| exactly, from the bit patterns (integer
    logic only, so NumPy and CuPy agree bit for bit): the sign-free bits of an IEEE float
    grow with its magnitude; -0.0 is 0; inf is above every finite value; every NaN is one
    key above inf (payloads do not matter, so NaNs tie). int8: |x|, 128 for -128."""
    if dtype_name == "s8":
        return xp.abs(bits.view(xp.int8).astype(xp.int16)).view(xp.uint16)
    return xp.minimum(bits & _SIGNLESS[bits.dtype.itemsize], bits.dtype.type(_INF[dtype_name] + 1))


def _nonzero(xp, bits):
    """1 where a value is non-zero (-0.0 counts as zero), as int8 (a group's count fits)."""
    return ((bits & _SIGNLESS[bits.dtype.itemsize]) != 0).astype(xp.int8)

