"""torch in, torch out, on the CPU: prune_2to4 and compress take torch tensors without a
copy and give torch back; bf16 crosses as its bits. (CUDA tensors: tests/test_gpu_torch.py.)"""
import ml_dtypes
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.api import interop

torch = pytest.importorskip("torch")


def weight(dtype, m=64, k=128, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((m, k), dtype=np.float32)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_prune_and_compress_take_torch_cpu_tensors(dtype):
    w = weight(dtype)
    pruned = cs.prune_2to4(w)
    assert isinstance(pruned, torch.Tensor) and pruned.dtype == dtype and pruned.shape == w.shape
    as_numpy = interop.to_array(w)
    expected = cs.prune_2to4(as_numpy)
    assert np.array_equal(interop.to_array(pruned).view(np.uint16), expected.view(np.uint16))
    sw = cs.compress(pruned, layout="sm80")
    assert sw.dtype == as_numpy.dtype and sw.shape == (64, 128)
    assert np.array_equal(sw.to_dense().view(np.uint16), interop.to_array(pruned).view(np.uint16))


def test_views_share_memory_both_ways():
    t = torch.zeros(4, 8, dtype=torch.bfloat16)
    a = interop.to_array(t)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16)
    a[1, 2] = 3.0
    assert float(t[1, 2]) == 3.0                 # no copy: the array is the tensor's memory
    back = interop.to_tensor(a)
    back[0, 0] = -1.0
    assert float(t[0, 0]) == -1.0 and back.dtype == torch.bfloat16
    h = torch.arange(6, dtype=torch.float16).reshape(2, 3)
    assert interop.to_tensor(interop.to_array(h)).data_ptr() == h.data_ptr()


def test_torch_io_returns_the_callers_out_and_leaves_others_alone():
    @interop.torch_io
    def fill(x, *, out=None):
        assert isinstance(x, np.ndarray) and (out is None or isinstance(out, np.ndarray))
        if out is None:
            return x * 2
        out[...] = x * 2
        return out

    x = torch.ones(3, dtype=torch.float32)
    out = torch.zeros(3, dtype=torch.float32)
    assert fill(x, out=out) is out and out.tolist() == [2.0, 2.0, 2.0]
    y = fill(x)
    assert isinstance(y, torch.Tensor) and y.tolist() == [2.0, 2.0, 2.0]
    assert isinstance(fill(np.ones(3, dtype=np.float32)), np.ndarray)   # no torch in, no torch out
