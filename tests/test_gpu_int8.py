"""int8 2:4 weights on an sm_90 GPU (issue 15, the sm90_s8 catalog): cs.quantize_int8,
int8 activations with one scale per token, cs.linear_int8 with the scales in the
epilogue, against the dequantized operands' product in float32; the int32 output against
the exact integer product. Marked gpu.

Tolerance: the dequantized operands are exact and int8 products accumulate exactly in
int32, so a scaled output's error is its own rounding after one float32 multiply per
scale: bf16 keeps 8 significant bits (relative 2^-9 per element), f16 11, f32 24; the
norm-wise bounds below (1e-2, 2e-3, 1e-5) leave room for that. An int8 output is
round(y / out_scale), saturated: within one step of the float reference. int32 is exact."""
import numpy as np
import pytest

import cutlass_sparse as cs

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_sm90")]
# (features, tokens, K): a prefill block, a decode step (odd token count), small layers
CASES = [(512, 256, 1024), (4096, 7, 4096), (256, 16, 256), (256, 16, 384)]   # 384: a K tile of 256 half filled
TOLERANCE = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-5}



def operands(m, n, k, seed):
    """(sw, int8 weight values, xq, x_scales) for a random 2:4 weight and activations."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import quantize

    rng = cupy.random.default_rng(seed)
    w = cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))
    sw = cs.quantize_int8(w)
    wq, w_scales = quantize(reference.to_float32(w), "s8", axis=1)   # what sw holds, for the reference
    assert bool((cupy.asarray(w_scales).ravel() == sw.scales).all())
    x = rng.standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_int8(x)
    assert xq.dtype == cupy.int8 and x_scales.shape == (n,)
    return sw, wq, xq, x_scales


@pytest.mark.parametrize("out_dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "x".join(map(str, s)))
def test_linear_int8_matches_the_dequantized_product(shape, out_dtype):
    from cutlass_sparse import reference

    m, n, k = shape
    sw, wq, xq, x_scales = operands(m, n, k, seed=m + n)
    y = cs.linear_int8(xq, x_scales, sw, out_dtype=out_dtype)
    assert y.shape == (n, m)
    ref = (xq.astype("float32") @ wq.astype("float32").T) * x_scales[:, None] * sw.scales[None, :]
    assert reference.relative_error(y, ref) <= TOLERANCE[out_dtype]


@pytest.mark.parametrize("shape", CASES, ids=lambda s: "x".join(map(str, s)))
def test_int32_output_is_the_exact_integer_product(shape):
    import cupy

    m, n, k = shape
    sw, wq, xq, _ = operands(m, n, k, seed=3 * m + n)
    y = cs.linear_int8(xq, None, sw, out_dtype="s32")
    assert y.dtype == cupy.int32 and y.shape == (n, m)
    exact = xq.astype(cupy.int64) @ wq.astype(cupy.int64).T   # integer matmul, no float rounding
    assert bool((y == exact).all())


def test_int32_output_is_exact_past_float_precision():
    """Every product 127 * 127 along K = 2048 (1024 kept): 16.5 M, and sums that float32
    (24 bits) could not hold exactly once it is 2^24 and beyond."""
    import cupy

    m, n, k = 128, 32, 4096
    w = cupy.zeros((m, k), dtype=cupy.float16)
    w[:, 0::4] = 1.0
    w[:, 1::4] = 1.0
    w[0, 0] = -1.0          # breaks the symmetry of row 0: a sum ending in an odd number
    sw = cs.quantize_int8(w)
    xq = cupy.full((n, k), 127, dtype=cupy.int8)
    xq[:, 5] = 3
    y = cs.linear_int8(xq, None, sw, out_dtype="s32")
    wq = cupy.where(w != 0, cupy.sign(w) * 127, 0).astype(cupy.int64)
    exact = xq.astype(cupy.int64) @ wq.T
    assert int(exact.max()) > 2 ** 24 and bool((y == exact).all())


def test_requantized_int8_output():
    import cupy

    m, n, k = 256, 64, 512
    sw, wq, xq, x_scales = operands(m, n, k, seed=11)
    ref = (xq.astype("float32") @ wq.astype("float32").T) * x_scales[:, None] * sw.scales[None, :]
    out_scale = float(cupy.abs(ref).max()) / 100   # some values beyond 127 * out_scale would saturate
    y = cs.linear_int8(xq, x_scales, sw, out_dtype="s8", out_scale=out_scale / 1.5)
    expected = cupy.clip(cupy.rint(ref / (out_scale / 1.5)), -128, 127)
    assert y.dtype == cupy.int8
    assert int(cupy.abs(y.astype(cupy.int32) - expected).max()) <= 1
    assert int((y == 127).sum()) > 0   # saturated, not wrapped


def test_linear_int8_activation_and_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import quantize

    m, n, k = 512, 64, 512
    w = cs.prune_2to4(torch.randn(m, k, device="cuda", dtype=torch.float16) * 0.05)
    sw = cs.quantize_int8(w)
    x = torch.randn(n, k, device="cuda", dtype=torch.float16)
    xq, x_scales = cs.quantize_activations_int8(x)
    assert xq.dtype == torch.int8 and x_scales.dtype == torch.float32 and x_scales.shape == (n,)
    y = cs.linear_int8(xq, x_scales, sw, activation="silu")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (n, m)
    wq, w_scales = quantize(cupy.from_dlpack(w.float()), "s8", axis=1)
    product = (cupy.from_dlpack(xq).astype(cupy.float32) * cupy.from_dlpack(x_scales)[:, None]) @ \
        (wq.astype(cupy.float32) * w_scales).T
    ref = product / (1 + cupy.exp(-product))   # silu
    assert reference.relative_error(cupy.from_dlpack(y.float()), ref) <= TOLERANCE["bf16"]
    raw = cs.linear_int8(xq, None, sw, out_dtype="s32")
    assert raw.dtype == torch.int32 and bool((cupy.from_dlpack(raw) == cupy.from_dlpack(xq).astype(cupy.int64)
                                              @ wq.astype(cupy.int64).T).all())


@pytest.mark.parametrize("out_dtype", ["s32", "bf16"])
def test_any_feature_count_a_strided_x_and_an_offset_out(out_dtype):
    """Features whose output rows are not whole 16-byte vectors, xq a view with padded rows,
    out one element past an aligned address: the library stages what TMA cannot take."""
    import cupy

    from cutlass_sparse import reference

    m, n, k = 250, 7, 256
    sw, wq, xq, x_scales = operands(m, n, k, seed=11)
    padded = cupy.zeros((n, k + 32), dtype=cupy.int8)
    padded[:, 16:16 + k] = xq
    x_view = padded[:, 16:16 + k]
    dtype = cupy.int32 if out_dtype == "s32" else cs.bfloat16
    out = cupy.zeros(n * m + 1, dtype=dtype)[1:].reshape(n, m)
    scales = None if out_dtype == "s32" else x_scales
    y = cs.linear_int8(x_view, scales, sw, out_dtype=out_dtype, out=out)
    assert y is out
    if out_dtype == "s32":
        assert bool((out == xq.astype(cupy.int64) @ wq.astype(cupy.int64).T).all())
    else:
        ref = (xq.astype("float32") @ wq.astype("float32").T) * x_scales[:, None] * sw.scales[None, :]
        assert reference.relative_error(out, ref) <= TOLERANCE[out_dtype]
    bits = cupy.int32 if out_dtype == "s32" else cupy.uint16
    again = cs.linear_int8(xq, scales, sw, out_dtype=out_dtype)   # no out, x in place: bit for bit the same
    assert bool((again.view(bits) == out.view(bits)).all())


def test_int8_inputs_are_checked():
    import cupy

    m, n, k = 128, 8, 64
    sw, _, xq, x_scales = operands(m, n, k, seed=1)
    with pytest.raises(TypeError, match="xq must hold int8"):
        cs.linear_int8(xq.astype(cupy.uint8), x_scales, sw)
    with pytest.raises(TypeError, match="int8 SparseMatrix from cs.quantize_int8"):
        cs.linear_int8(xq, x_scales, cs.quantize_fp8(cs.prune_2to4(cupy.ones((m, k), dtype=cupy.float16))))
    with pytest.raises(ValueError, match="raw integer accumulator"):
        cs.linear_int8(xq, x_scales, sw, out_dtype="s32", activation="relu")
    with pytest.raises(ValueError, match="out_scale must be a positive"):
        cs.linear_int8(xq, x_scales, sw, out_dtype="s8", out_scale=0.0)
    assert np.dtype(cs.linear_int8(xq, x_scales, sw).dtype) == np.dtype(cs.bfloat16)


def test_bias_with_requantized_and_activated_outputs():
    """The bias goes in before the activation and before requantizing: int8 out of
    (y + bias) / out_scale within one step of the float reference; bf16 out of
    silu(y + bias), with a torch bf16 bias (converted)."""
    import cupy
    torch = pytest.importorskip("torch")

    from cutlass_sparse import reference

    m, n, k = 256, 64, 512
    sw, wq, xq, x_scales = operands(m, n, k, seed=13)
    bias = cupy.random.default_rng(6).standard_normal(m, dtype=cupy.float32)
    product = (xq.astype("float32") @ wq.astype("float32").T) * x_scales[:, None] * sw.scales[None, :] + bias
    out_scale = float(cupy.abs(product).max()) / 120
    y = cs.linear_int8(xq, x_scales, sw, bias=bias, out_dtype="s8", out_scale=out_scale)
    expected = cupy.clip(cupy.rint(product / out_scale), -128, 127)
    assert int(cupy.abs(y.astype(cupy.int32) - expected).max()) <= 1
    torch_bias = torch.from_dlpack(bias).to(torch.bfloat16)
    y = cs.linear_int8(xq, x_scales, sw, bias=torch_bias, activation="silu", out_dtype="bf16")
    ref = product / (1 + cupy.exp(-product))
    assert reference.relative_error(y, ref) <= TOLERANCE["bf16"]
    with pytest.raises(ValueError, match="no bias"):
        cs.linear_int8(xq, None, sw, bias=bias, out_dtype="s32")


def test_a_first_setup_after_other_kernels_setups():
    """Params' padding can hold TMA recipes that an earlier setup left in local memory (it
    made a raw int32 setup take two stale slots after a scaled setup); a setup takes only
    recipes with its own nonce. A scaled call, the shape caches cleared, then first setups
    of the raw int32 kernel and of an f16 kernel: both exact / within f16 rounding."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.launch import sm90_prepare
    from cutlass_sparse.plan import plans

    m, n, k = 512, 256, 1024
    sw, wq, xq, x_scales = operands(m, n, k, seed=17)
    cs.linear_int8(xq, x_scales, sw)   # a scaled kernel's setups
    sm90_prepare._prepared.clear()
    sm90_prepare._templates.clear()
    plans.clear()
    y = cs.linear_int8(xq, None, sw, out_dtype="s32")
    assert bool((y == xq.astype(cupy.int64) @ wq.astype(cupy.int64).T).all())
    rng = cupy.random.default_rng(3)
    w = cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))
    x = rng.standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    got = cs.linear(x, cs.compress(w))
    assert reference.relative_error(got, reference.to_float32(x) @ reference.to_float32(w).T) <= 2e-3
