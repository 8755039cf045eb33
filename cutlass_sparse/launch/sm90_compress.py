"""CUTLASS's sm90 2:4 compressor on the GPU: a dense [M, K] matrix into the layout the
sm90 mainloop reads."""
from __future__ import annotations

from ..build import kernels
from ..describe.arith import cdiv, round_up
from ..describe.helper_kernels import CompressorConfig
from ..emit.sm90_compressor import COMPRESS
from . import device, modules


def compress(dense, element: str, atom_k: int):
    """values and metadata of a 2:4 [M, K] cupy matrix in CUTLASS's sm90 layout, the
    metadata in atoms of K atom_k (formats.sm90_layout)."""
    import cupy

    m, k = dense.shape
    if k % 16:
        raise ValueError(f"dense has K = {k}: the sm90 layout needs K a multiple of 16 "
                         f"(pad K, or use layout='sm80', which takes any K)")
    device_id = dense.device.id
    compiled = kernels.get(CompressorConfig(element, atom_k=atom_k), device.sm90_target(device.facts(device_id)[0], device_id))
    c = compiled.constants
    # The compressor works in whole atoms (max_align_m rows by max_align_k columns); the
    # buffers are sized to whole atoms so that none of its writes can leave them.
    m_atoms, k_atoms = round_up(m, c["max_align_m"]), round_up(k, c["max_align_k"])
    values = cupy.zeros(m_atoms * (k_atoms // c["a_sparsity"]), dtype=dense.dtype)
    metadata = cupy.zeros(m_atoms * (k_atoms // c["e_sparsity"]), dtype=cupy.uint8)
    dense = cupy.ascontiguousarray(dense)
    block = COMPRESS.new_block()
    f = block[0]
    f["dense"], f["values"], f["metadata"] = dense.data.ptr, values.data.ptr, metadata.data.ptr
    f["ld_dense"], f["m"], f["k"] = k, m, k
    grid = (cdiv(m_atoms, c["atom_m"]), cdiv(k_atoms, c["atom_k"]), 1)
    with cupy.cuda.Device(device_id):
        modules.load(compiled).launch(device_id, grid, block)
    return values, metadata
