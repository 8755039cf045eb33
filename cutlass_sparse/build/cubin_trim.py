"""Take out of a cubin the device variables nothing uses, before the driver loads it.

NVRTC's `-default-device` (which CUTLASS's unannotated host code needs) makes every namespace-
scope constexpr variable a device variable: CuTe's variable templates (`is_first_empty_v<...>`,
`rank_v<...>`, ...) come out as about 13,000 local globals in an sm90 GEMM's cubin, which no
instruction reads (no relocation names them). The driver sets each one up at every module load:
76-98 ms for the 4096^3 kernel's module on an H200, against 0.2 ms for the same code without them
(docs/module_load_h200_session36.log). So:
- their symbol-table entries are blanked (all-zero, like the table's own first one): the loader
  has nothing to set up (2.1 ms: docs/final_checks_h200_session36_call5.log), and every other
  symbol keeps its index, so relocations, `.nv.info` and section headers stay as they are;
- their names leave the string table (3.2 MB of the 3.6 MB file): the file shrinks to ~0.4 MB
  (28 KB packed in the cache, against 244 KB) and loads in 1.5 ms
  (docs/module_load_compacted_h200_session36_call9.log). What follows the table moves up by
  whole pages, so every section keeps its alignment; section and program headers get the new
  offsets.
The code, constants and data keep their bytes. Where ptxas lists the variables in its address
table (constant bank 4: a module with fewer of them), the table's relocations name them all,
and nothing is taken out.
"""
from __future__ import annotations

import struct

import numpy as np

from .cubin import SYMBOL as _SYMBOL, section_headers, sections

_SEGMENT = np.dtype([("type", "<u4"), ("flags", "<u4"), ("offset", "<u8"), ("vaddr", "<u8"), ("paddr", "<u8"),
                     ("filesz", "<u8"), ("memsz", "<u8"), ("align", "<u8")])
_STB_LOCAL, _STT_OBJECT = 0, 1
_SHT_SYMTAB, _SHT_NOBITS = 2, 8
_DATA_SECTIONS = (".nv.global", ".nv.global.init")   # a module's plain device variables
_PAGE = 4096   # the string table shrinks by whole pages: no section's alignment is larger


def without_unused_variables(cubin: bytes) -> bytes:
    """The cubin without its unreferenced local device variables (the same object when it has
    none and no names to drop): same code, constants and data."""
    blanked = _blanked(cubin)
    return _names_compacted(blanked if blanked is not None else cubin) or blanked or cubin


def _blanked(cubin: bytes) -> bytes | None:
    """The cubin with the unused variables' symbol entries zeroed, or None if there are none."""
    found = sections(cubin)
    symtab = found.get(".symtab")
    data_sections = [found[name][4] for name in _DATA_SECTIONS if name in found]
    if symtab is None or not data_sections:
        return None
    offset, size, _link, entsize, _index = symtab
    if entsize != _SYMBOL.itemsize:
        return None
    symbols = np.frombuffer(cubin, _SYMBOL, size // entsize, offset)
    referenced = np.zeros(len(symbols), dtype=bool)
    for name, (rel_offset, rel_size, _, rel_entsize, _) in found.items():
        if name.startswith(".rel") and rel_entsize:   # .rel* and .rela*: r_info's high word is the symbol
            info = np.ndarray(rel_size // rel_entsize, np.dtype("<u8"), cubin, rel_offset + 8, (rel_entsize,))
            referenced[(info >> np.uint64(32)).astype(np.int64)] = True
    unused = ((symbols["info"] >> 4) == _STB_LOCAL) & ((symbols["info"] & 0xF) == _STT_OBJECT) \
        & np.isin(symbols["shndx"], data_sections) & ~referenced
    if not unused.any():
        return None
    trimmed = symbols.copy()
    trimmed[unused] = np.zeros(1, _SYMBOL)
    out = bytearray(cubin)
    out[offset:offset + trimmed.nbytes] = trimmed.tobytes()
    return bytes(out)


def _names_compacted(cubin: bytes) -> bytes | None:
    """The cubin with a symbol string table of only the names its symbols use, or None where
    that saves less than a page (or the file is laid out otherwise than NVRTC writes it)."""
    heads, shstrndx = section_headers(cubin)
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phnum, = struct.unpack_from("<H", cubin, 0x38)
    tables = np.nonzero(heads["type"] == _SHT_SYMTAB)[0]
    if len(tables) != 1:
        return None
    symtab = int(tables[0])
    strtab = int(heads["link"][symtab])
    if strtab == shstrndx or (heads["link"] == strtab).sum() != 1:   # shared with other sections
        return None
    names_at, names_size = int(heads["offset"][strtab]), int(heads["size"][strtab])
    symbols = np.frombuffer(cubin, _SYMBOL, int(heads["size"][symtab]) // _SYMBOL.itemsize,
                            int(heads["offset"][symtab])).copy()
    names, placed = bytearray(b"\0"), {}
    for i in np.nonzero(symbols["name"])[0]:
        start = names_at + int(symbols["name"][i])
        name = cubin[start:cubin.index(b"\0", start)]
        if name not in placed:
            placed[name] = len(names)
            names += name + b"\0"
        symbols["name"][i] = placed[name]
    after = heads["offset"] > names_at
    if not (after & (heads["type"] != _SHT_NOBITS)).any():
        return None
    following = int(heads["offset"][after & (heads["type"] != _SHT_NOBITS)].min())
    if following < names_at + names_size:
        return None
    shift = (following - names_at - len(names)) // _PAGE * _PAGE
    if shift <= 0:
        return None
    out = bytearray(cubin[:names_at]) + names + bytes(following - shift - names_at - len(names)) + cubin[following:]
    heads["offset"][after] -= shift
    heads["size"][strtab] = len(names)
    segments = np.frombuffer(cubin, _SEGMENT, phnum, phoff).copy()
    segments["offset"][segments["offset"] >= following] -= shift
    phoff, shoff = (o - shift if o >= following else o for o in (phoff, shoff))
    struct.pack_into("<QQ", out, 0x20, phoff, shoff)
    out[shoff:shoff + heads.nbytes] = heads.tobytes()
    out[phoff:phoff + segments.nbytes] = segments.tobytes()
    table_at = int(heads["offset"][symtab])
    out[table_at:table_at + symbols.nbytes] = symbols.tobytes()
    return bytes(out)
