"""TMA descriptors for the sm90 kernels, encoded by the driver from CuTe's own recipes.

The patched CuTe header (nvrtc_headers.py) writes into each descriptor slot exactly
what CuTe would have passed to cuTensorMapEncodeTiled. The first setup of a kernel on a
device leaves those recipes in place; the host encodes each one here into a template
descriptor (the static fields: type, rank, box, element strides, swizzle) and every
later setup copies the template and replaces address, sizes and strides on the device.
"""
from __future__ import annotations

import numpy as np

MAGIC = 0x50435241544D5343   # "CSTMARCP", as in nvrtc_headers.RECIPE_HOOK

RECIPE = np.dtype([
    ("magic", np.uint64), ("address", np.uint64), ("strides", np.uint64, 4),
    ("dims", np.uint32, 5), ("box", np.uint32, 5), ("elem", np.uint32, 5),
    ("dtype", np.uint8), ("rank", np.uint8), ("swizzle_bits", np.uint8), ("swizzle_base", np.uint8),
    ("unused", np.uint8, 16),
])
assert RECIPE.itemsize == 128


def _swizzle(bits: int, base: int):
    from cuda.bindings import driver

    s = driver.CUtensorMapSwizzle
    table = {(0, 0): s.CU_TENSOR_MAP_SWIZZLE_NONE, (1, 0): s.CU_TENSOR_MAP_SWIZZLE_32B,
             (2, 0): s.CU_TENSOR_MAP_SWIZZLE_64B, (3, 0): s.CU_TENSOR_MAP_SWIZZLE_128B,
             (3, 1): s.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B,
             (3, 2): s.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B,
             (3, 3): s.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B}
    try:
        return table[(bits, base)]
    except KeyError:
        raise ValueError(f"TMA recipe has an unknown swizzle (bits {bits}, base {base})") from None


def encode(recipe: np.void) -> bytes:
    """The 128-byte CUtensorMap the driver makes from one recipe."""
    import ctypes

    from cuda.bindings import driver

    if int(recipe["magic"]) != MAGIC:
        raise ValueError("not a TMA recipe slot")
    if int(recipe["dtype"]) == 255:
        raise ValueError("TMA recipe has an element type cutlass_sparse does not map")
    rank = int(recipe["rank"])
    err, tensor_map = driver.cuTensorMapEncodeTiled(
        driver.CUtensorMapDataType(int(recipe["dtype"])), rank, int(recipe["address"]),
        [driver.cuuint64_t(int(v)) for v in recipe["dims"][:rank]],
        [driver.cuuint64_t(int(v)) for v in recipe["strides"][:rank - 1]],
        [driver.cuuint32_t(int(v)) for v in recipe["box"][:rank]],
        [driver.cuuint32_t(int(v)) for v in recipe["elem"][:rank]],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        _swizzle(int(recipe["swizzle_bits"]), int(recipe["swizzle_base"])),
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({err.name}) for recipe "
                           f"dims {recipe['dims'][:rank]} box {recipe['box'][:rank]}")
    return ctypes.string_at(tensor_map.getPtr(), 128)


def templates(recipes: bytes, slots: int) -> np.ndarray:
    """Encoded descriptors for the first `slots` recipes, as one uint8 array."""
    parsed = np.frombuffer(recipes, dtype=RECIPE, count=slots)
    return np.frombuffer(b"".join(encode(r) for r in parsed), dtype=np.uint8)
