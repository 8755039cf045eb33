"""Take out of a cubin the device variables nothing uses, before the driver loads it.

NVRTC's `-default-device` (which CUTLASS's unannotated host code needs) makes every namespace-
scope constexpr variable a device variable: CuTe's variable templates (`is_first_empty_v<...>`,
`rank_v<...>`, ...) come out as about 13,000 local globals in an sm90 GEMM's cubin, which no
instruction reads (no relocation names them). The driver sets each one up at every module load:
76-98 ms for the 4096^3 kernel's module on an H200, against 0.2 ms for the same code without them
(docs/module_load_h200_session36.log). So the symbol-table entries of those variables are
blanked (all-zero entries, like the table's own first one): the loader then has nothing to set
up (2.6 ms: docs/module_load_trimmed_h200_session36_call4.log), and the code, constants,
sections and every other symbol keep their bytes and their indices. Where ptxas lists the
variables in its address table (constant bank 4: a module with fewer of them), the table's
relocations name them all, and nothing is taken out.
"""
from __future__ import annotations

import numpy as np

from .cubin import sections

_SYMBOL = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                    ("value", "<u8"), ("size", "<u8")])
_STB_LOCAL, _STT_OBJECT = 0, 1
_DATA_SECTIONS = (".nv.global", ".nv.global.init")   # a module's plain device variables


def without_unused_variables(cubin: bytes) -> bytes:
    """The cubin with its unreferenced local device variables blanked (unchanged when it has
    none): same size, same layout, same code."""
    found = sections(cubin)
    symtab = found.get(".symtab")
    data_sections = [found[name][4] for name in _DATA_SECTIONS if name in found]
    if symtab is None or not data_sections:
        return cubin
    offset, size, _link, entsize, _index = symtab
    if entsize != _SYMBOL.itemsize:
        return cubin
    symbols = np.frombuffer(cubin, _SYMBOL, size // entsize, offset)
    referenced = np.zeros(len(symbols), dtype=bool)
    for name, (rel_offset, rel_size, _, rel_entsize, _) in found.items():
        if name.startswith(".rel") and rel_entsize:   # .rel* and .rela*: r_info's high word is the symbol
            info = np.ndarray(rel_size // rel_entsize, np.dtype("<u8"), cubin, rel_offset + 8, (rel_entsize,))
            referenced[(info >> np.uint64(32)).astype(np.int64)] = True
    unused = ((symbols["info"] >> 4) == _STB_LOCAL) & ((symbols["info"] & 0xF) == _STT_OBJECT) \
        & np.isin(symbols["shndx"], data_sections) & ~referenced
    if not unused.any():
        return cubin
    trimmed = symbols.copy()
    trimmed[unused] = np.zeros(1, _SYMBOL)
    out = bytearray(cubin)
    out[offset:offset + trimmed.nbytes] = trimmed.tobytes()
    return bytes(out)
