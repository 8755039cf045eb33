"""Layers take x [..., K] as torch.nn.Linear does (api.tokens): what needs no GPU. The
folding helpers on NumPy and torch CPU arrays, quantize_activations on torch CPU tensors
of three dimensions, and the refusals (an out= D beside a [..., K] x; scales or an out
that do not match x's leading dimensions)."""
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.api import tokens


@pytest.mark.parametrize("shape", [(2, 3, 8), (4, 8), (8,), (2, 1, 3, 8)])
def test_fold_and_unfold_are_views_that_keep_the_rows(shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    flat, lead = tokens.folded(x)
    assert flat.shape[-1] == 8 and flat.ndim == 2 and np.shares_memory(flat, x)
    assert (lead is None) == (len(shape) == 2)
    y = flat * 2   # a [tokens, features] result
    back = tokens.unfolded(y, lead)
    assert back.shape == (shape if lead is not None else y.shape)
    np.testing.assert_array_equal(back, x * 2)
    if lead is not None:   # a transposed (Fortran-ordered) result, as cs.linear returns, unfolds without a copy
        yt = np.asfortranarray(y)
        unfolded = tokens.unfolded(yt, lead)
        assert unfolded.shape == shape[:-1] + (8,) and np.shares_memory(unfolded, yt)


def test_scales_and_out_must_match_the_leading_dimensions():
    lead = (2, 3)
    assert tokens.folded_scales(np.ones((2, 3), np.float32), lead).shape == (6,)
    assert tokens.folded_scales(np.ones((2, 3, 1), np.float32), lead).shape == (6,)
    assert tokens.folded_scales(0.5, lead) == 0.5
    assert tokens.folded_scales(np.float32(0.5), lead) == np.float32(0.5)   # one scale for the whole tensor
    with pytest.raises(ValueError, match=r"x_scales must be \[2, 3\]"):
        tokens.folded_scales(np.ones(5, np.float32), lead)
    out = np.empty((2, 3, 16), np.float32)
    view = tokens.folded_out(out, lead)
    assert view.shape == (6, 16) and np.shares_memory(view, out)
    with pytest.raises(ValueError, match=r"out must be \[2, 3, features\]"):
        tokens.folded_out(np.empty((3, 2, 16), np.float32), lead)
    with pytest.raises(ValueError, match="out must be contiguous"):
        tokens.folded_out(np.empty((2, 3, 32), np.float32)[:, :, ::2], lead)


def test_quantize_activations_keeps_leading_dimensions():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 5, 64) * 3
    for element in ("e4m3", "s8"):
        values, scales = cs.api.quantized.quantize_activations(x, element)
        flat_values, flat_scales = cs.api.quantized.quantize_activations(x.reshape(10, 64), element)
        assert tuple(values.shape) == (2, 5, 64) and tuple(scales.shape) == (2, 5)
        assert torch.equal(values.reshape(10, 64).view(torch.uint8), flat_values.view(torch.uint8))
        assert torch.equal(scales.reshape(10), flat_scales)


def test_linear_refuses_out_beside_a_batched_x():
    sw = cs.SparseMatrix((16, 32), np.dtype(np.float16), np.zeros((16, 16), np.float16), np.zeros(64, np.uint8),
                         "sm90")
    with pytest.raises(ValueError, match=r"out= .* takes a 2-D x only"):
        cs.linear(np.zeros((2, 3, 32), np.float16), sw, out=np.zeros((16, 6), np.float16))
    # out=None is no out: the folded call goes on to the usual checks (here: x in host memory)
    with pytest.raises(TypeError, match="x is a numpy array in host memory"):
        cs.linear(np.zeros((2, 3, 32), np.float16), sw, out=None)
