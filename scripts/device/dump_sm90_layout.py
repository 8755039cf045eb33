#!/usr/bin/env python3
"""CUTLASS's sm90 compressor output for a few 2:4 matrices (GPU machine), saved as .npz, so
the sm90 layout's encoder and decoder in formats/sm90_layout.py can be checked byte for
byte on a machine without a GPU (tests/data). Matrices: pruned random values, groups
with one or no non-zero, both 16-bit types, M and K not multiples of the atoms."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import cutlass_sparse as cs  # noqa: E402


def matrix(rng, m, k, dtype):
    dense = rng.standard_normal((m, k)).astype(np.float32)
    dense[rng.random((m, k)) < 0.3] = 0.0          # groups with fewer than two non-zeros
    dense[: m // 7, : k // 5] = 0.0                # whole zero groups
    return cs.prune_2to4(dense.astype(dtype))


def main(out_path):
    import ml_dtypes
    rng = np.random.default_rng(7)
    saved = {}
    for dtype in (np.float16, ml_dtypes.bfloat16):
        for m, k in ((64, 128), (128, 256), (100, 48), (192, 384), (70, 16), (130, 400)):
            dense = matrix(rng, m, k, dtype)
            sw = cs.compress(cupy.asarray(dense), layout="sm90")
            tag = f"{np.dtype(dtype).name}_{m}x{k}"
            saved[f"{tag}_dense"] = dense.view(np.uint16)
            saved[f"{tag}_values"] = cupy.asnumpy(sw.values).view(np.uint16)
            saved[f"{tag}_metadata"] = cupy.asnumpy(sw.metadata)
            print(tag, sw.values.shape, sw.metadata.shape, sw.atom_k, flush=True)
    np.savez_compressed(out_path, **saved)


if __name__ == "__main__":
    main(sys.argv[1])
