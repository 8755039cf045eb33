"""Read facts the compiler wrote into a cubin (ELF), with no GPU: a constant's value and a
kernel's parameter-block size. These are the compiler's own numbers, so the launcher
never re-derives CUTLASS's shared-memory arithmetic or trusts a Python layout blindly.
"""
from __future__ import annotations

import struct

import numpy as np

_EIATTR_CBANK_PARAM_SIZE = 0x19   # .nv.info.<kernel>: total bytes of the kernel's parameters
_EIATTR_KPARAM_INFO = 0x17        # .nv.info.<kernel>: one per parameter (ordinal, offset, size)
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


# ELF64 records as NumPy types: the section header table is read (and, in cubin_trim, rewritten) whole.
SECTION = np.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"), ("offset", "<u8"),
                    ("size", "<u8"), ("link", "<u4"), ("info", "<u4"), ("addralign", "<u8"), ("entsize", "<u8")])
SYMBOL = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"),
                   ("value", "<u8"), ("size", "<u8")])


class CubinError(ValueError):
    pass


def section_headers(data: bytes) -> tuple[np.ndarray, int]:
    """(a copy of the section header table, the index of the section holding their names)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a 64-bit little-endian ELF cubin")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize != SECTION.itemsize:
        raise CubinError(f"section headers of {shentsize} bytes, not ELF64's {SECTION.itemsize}")
    return np.frombuffer(data, SECTION, shnum, shoff).copy(), shstrndx


def sections(data: bytes) -> dict[str, tuple[int, int, int, int, int]]:
    """name -> (offset, size, link, entsize, index) for every section of an ELF64 little-endian file."""
    heads, shstrndx = section_headers(data)
    names_off = int(heads["offset"][shstrndx])
    out = {}
    for index, (name, offset, size, link, entsize) in enumerate(
            heads[["name", "offset", "size", "link", "entsize"]].tolist()):
        end = data.index(b"\0", names_off + name)
        out[data[names_off + name:end].decode()] = (offset, size, link, entsize, index)
    return out


def read_symbol(data: bytes, symbol: str) -> bytes:
    """The initial bytes of a global/constant variable named `symbol`."""
    found = sections(data)
    if ".symtab" not in found:
        raise CubinError("cubin has no symbol table")
    sym_off, sym_size, strtab_index, entsize, _ = found[".symtab"]
    by_index = {v[4]: v for v in found.values()}
    str_off = by_index[strtab_index][0]
    for pos in range(sym_off, sym_off + sym_size, entsize or 24):
        name, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, pos)
        end = data.index(b"\0", str_off + name)
        if data[str_off + name:end].decode() == symbol:
            section_offset = by_index[shndx][0]
            return data[section_offset + value:section_offset + value + size]
    raise CubinError(f"symbol {symbol!r} not found in cubin")


def read_int32(data: bytes, symbol: str) -> int:
    raw = read_symbol(data, symbol)
    if len(raw) != 4:
        raise CubinError(f"symbol {symbol!r} is {len(raw)} bytes, expected a 32-bit int")
    return struct.unpack("<i", raw)[0]


def _attributes(data: bytes, kernel: str):
    """(format, attribute, position) of each entry of `kernel`'s .nv.info section."""
    found = sections(data)
    key = f".nv.info.{kernel}"
    if key not in found:
        raise CubinError(f"kernel {kernel!r} not found in cubin")
    offset, size = found[key][:2]
    pos, end = offset, offset + size
    while pos < end:
        fmt, attr = data[pos], data[pos + 1]
        yield fmt, attr, pos
        pos += 4 + struct.unpack_from("<H", data, pos + 2)[0] if fmt == _EIFMT_SVAL else 4


def kernel_param_bytes(data: bytes, kernel: str) -> int:
    """Size of `kernel`'s parameter block, from its .nv.info attributes."""
    for fmt, attr, pos in _attributes(data, kernel):
        if attr == _EIATTR_CBANK_PARAM_SIZE and fmt == _EIFMT_HVAL:
            return struct.unpack_from("<H", data, pos + 2)[0]
    raise CubinError(f"no parameter-size attribute for kernel {kernel!r}")


def kernel_param_sizes(data: bytes, kernel: str) -> tuple[int, ...]:
    """Each of `kernel`'s parameters' size in bytes, in declaration order. (The block's total
    also holds alignment padding, which depends on where the parameter bank starts.)"""
    sizes = {}
    for fmt, attr, pos in _attributes(data, kernel):
        if attr == _EIATTR_KPARAM_INFO and fmt == _EIFMT_SVAL:
            _index, ordinal, _offset, flags = struct.unpack_from("<IHHI", data, pos + 4)
            sizes[ordinal] = flags >> 18   # the top 14 bits
    if sorted(sizes) != list(range(len(sizes))):
        raise CubinError(f"kernel {kernel!r} lists parameters {sorted(sizes)}")
    return tuple(sizes[i] for i in range(len(sizes)))
