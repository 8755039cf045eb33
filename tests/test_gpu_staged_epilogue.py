"""The sm90 kernels whose epilogue is our staged store (SparseGemmConfig.staged_store:
D = alpha * acc through swizzled shared-memory chunks stored by TMA,
emit.sm90_staged_epilogue), against a float32 dense reference. Marked gpu: skipped without a GPU; skipped on GPUs other than sm_90."""
import sys
from pathlib import Path

import pytest

import cutlass_sparse as cs
from cutlass_sparse.describe import dtypes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_cases  # noqa: E402
from test_gpu_matmul import check, poisoned, random_operands  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_sm90")]


@pytest.mark.parametrize("shape", gpu_cases.STAGED_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_staged_epilogue_matches_dense(shape):
    m, n, k = shape
    for config, layout_d in gpu_cases.sm90_staged_cases():
        assert config.stores_staged and "_epi_staged_" in config.name
        w, sw, x = random_operands(m, n, k, config.element, config.layout_b, seed=m + n + k, family="sm90")
        out = poisoned((m, n), dtypes.numpy_dtype(config.element_out), "F" if layout_d == "col" else "C")
        info = {}
        y = cs.matmul(sw, x, out=out, out_dtype=config.element_out, alpha=0.75, config=config, info=info)
        assert info["config"] == config.name, (info["config"], config.name)
        assert y is out   # written in place, in D's own layout
        check(out, w, x, config.element, alpha=0.75)
