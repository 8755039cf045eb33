"""2:4 (and tf32's 1:2) patterns: how each element type is pruned and described to the
sparse tensor cores, and the bit-level helpers every format shares. One implementation
serves NumPy and CuPy: written against the array module of its input (elementwise
integer logic and gathers only, no sorts), so the two agree bit for bit."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def _check_matrix(dense, what: str):
    xp = dtypes.array_module(dense)
    if xp is np and not isinstance(dense, np.ndarray):
        raise TypeError(f"{what} must be a numpy or cupy array, got {type(dense).__name__}")
    if dense.ndim != 2:
        raise ValueError(f"{what} must be 2-D [M, K], got shape {tuple(dense.shape)}")
    name = dtypes.operand_name(dense.dtype)
    if name not in dtypes.SM80_INPUT_NAMES:
        raise TypeError(f"{what} must be float16, bfloat16 (ml_dtypes.bfloat16), int8 or float32 (tf32), "
                        f"got {dense.dtype}")
    return xp, name


def _bits(array):
    """The bit patterns as unsigned integers: all logic runs on these, so bf16 needs no
    float support from CuPy."""
    xp = dtypes.array_module(array)
    return array.view({1: xp.uint8, 2: xp.uint16, 4: xp.uint32}[array.dtype.itemsize])


def _magnitude(xp, bits, dtype_name: str):
    """|x| as float32 from the bit patterns (exact for every operand type)."""
    if dtype_name == "bf16":
        return ((bits & 0x7FFF).astype(xp.uint32) << 16).view(xp.float32)
    if dtype_name == "s8":
        return xp.abs(bits.view(xp.int8).astype(xp.float32))
    if dtype_name == "tf32":
        return (bits & 0x7FFFFFFF).view(xp.float32)
    return (bits & 0x7FFF).view(xp.float16).astype(xp.float32)


def _nonzero(xp, bits):
    """1 where a value is non-zero (-0.0 counts as zero)."""
    return ((bits & _SIGNLESS[bits.dtype.itemsize]) != 0).astype(xp.int32)

