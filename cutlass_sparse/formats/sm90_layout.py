"""The sm90 metadata layouts: where each byte of 2:4 metadata sits, per layout atom.

CUTLASS's sm90 mainloop reads metadata laid out in atoms of 64 rows by `atom_k` logical
columns (Sm90GemmSparseConfig, 16-bit types), atom_k = min(tile K, 128): a tile of K 64
and a tile of K 128 read different layouts of the same metadata. A byte holds the
metadata of 8 consecutive logical elements of one row in both, so converting between
them is a byte gather, done here on the GPU from the two layouts' index functions.
"""
from __future__ import annotations

from ..describe.arith import round_up

ATOM_M = 64
ATOMS_K = (64, 128)
# The atom cs.compress stores; kernels of the other atom get a conversion, made once.
STORED_ATOM_K = 128


def metadata_bytes(m: int, k: int, atom_k: int) -> int:
    """Size of the metadata of an [m, k] matrix (whole atoms, as the compressor writes it)."""
    return round_up(m, ATOM_M) * round_up(k, atom_k) // 8


def byte_index(rows, groups, m: int, atom_k: int):
    """Byte offsets of the metadata of (row, 8-column group) in the atom_k layout of an
    [m, *] matrix: CuTe's fill_layoutE with the 16-bit atom
    ((8,2,4),(16,2,atom_k/32)) ordered ((3,1,5),(0,4,2)), one byte per 8 logical elements."""
    if atom_k not in ATOMS_K:
        raise ValueError(f"atom_k {atom_k} must be one of {ATOMS_K}")
    num_k = atom_k // 32
    k = groups * 8
    m_in, m_block = rows % ATOM_M, rows // ATOM_M
    k_in, k_block = k % atom_k, k // atom_k
    offset = ((k_in % 16) + 16 * ((m_in // 8) % 2) + 32 * (k_in // 32) + 32 * num_k * (m_in % 8)
              + 256 * num_k * ((k_in // 16) % 2) + 512 * num_k * (m_in // 16)
              + ATOM_M * atom_k * m_block + round_up(m, ATOM_M) * atom_k * k_block)
    return offset // 8


def convert(metadata, m: int, k: int, from_atom: int, to_atom: int):
    """The metadata of an [m, k] matrix re-laid for another atom (cupy in, cupy out)."""
    import cupy

    if from_atom == to_atom:
        return metadata
    out = cupy.zeros(metadata_bytes(m, k, to_atom), dtype=cupy.uint8)
    rows = cupy.arange(round_up(m, ATOM_M), dtype=cupy.int64)[:, None]
    groups = cupy.arange(round_up(k, 16) // 8, dtype=cupy.int64)[None, :]   # K is a multiple of 16
    out[byte_index(rows, groups, m, to_atom)] = metadata[byte_index(rows, groups, m, from_atom)]
    return out
