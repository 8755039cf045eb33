"""One random f16 problem for the sm90 sweeps: a pruned weight compressed for sm90, x,
the float32 reference, an output buffer and x's leading dimension."""
import cupy

import cutlass_sparse as cs
from cutlass_sparse import reference
from cutlass_sparse.api.operands import matrix_layout


def sm90_problem(m: int, n: int, k: int, rng):
    w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
    x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
    ref = reference.to_float32(w) @ reference.to_float32(x)
    _, ldb = matrix_layout(x, "x")
    return cs.compress(w, layout="sm90"), x, ref, cupy.empty((m, n), dtype=cupy.float16), ldb
