"""fp8 (e4m3) 2:4 weights on an sm_90 GPU (issue 15): cs.quantize_fp8, quantize
activations, cs.linear_fp8 with per-feature and per-token scales in the epilogue,
against the dequantized operands' product in float32. Marked gpu.

Tolerance: the operands are exact after dequantization and accumulate in float32, so the
error is the output's rounding: bf16 keeps 8 significant bits (relative 2^-9 per element
after round to nearest), f16 11; a norm-wise relative error of 1e-2 (bf16) and 2e-3
(f16, f32) leaves room for the accumulation order."""
import pytest

import cutlass_sparse as cs

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_sm90")]
# (features, tokens, K): a prefill block, a decode step (odd token count), small layers
CASES = [(512, 256, 1024), (4096, 7, 4096), (256, 16, 256), (256, 16, 384), (256, 16, 640)]   # 384, 640: the last K tile part-filled
TOLERANCE = {"bf16": 1e-2, "f16": 2e-3, "f32": 2e-3}



def dequantized_reference(sw, xq, x_scales, w_bytes):
    from cutlass_sparse.formats.quantize import decode_e4m3

    return decode_e4m3(xq, x_scales[:, None]) @ decode_e4m3(w_bytes, sw.scales[:, None]).T


def quantized_layer(m, n, k, w_seed):
    """(sw, xq, x_scales, the dequantized operands' product) of a 2:4 [m, k] weight and n
    tokens of x, both quantized to e4m3."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import quantize_e4m3

    w = weight(m, k, seed=w_seed)
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
    x = cupy.random.default_rng(n).standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_fp8(x)
    return sw, xq, x_scales, dequantized_reference(sw, xq, x_scales, w_bytes)


def weight(m, k, seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    return cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))


@pytest.mark.parametrize("out_dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "x".join(map(str, s)))
def test_linear_fp8_matches_the_dequantized_product(shape, out_dtype):
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import quantize_e4m3

    m, n, k = shape
    w = weight(m, k, seed=m + n)
    sw = cs.quantize_fp8(w)
    w_bytes, w_scales = quantize_e4m3(reference.to_float32(w), axis=1)   # what sw holds, for the reference
    assert bool((cupy.asarray(w_scales).ravel() == sw.scales).all())
    x = cupy.random.default_rng(n).standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_fp8(x)
    y = cs.linear_fp8(xq, x_scales, sw, out_dtype=out_dtype)
    assert y.shape == (n, m)
    ref = dequantized_reference(sw, xq, x_scales, w_bytes)
    assert reference.relative_error(y, ref) <= TOLERANCE[out_dtype]
    # and near the unquantized product (e4m3 keeps 3 mantissa bits)
    assert reference.relative_error(ref, reference.to_float32(x) @ reference.to_float32(w).T) < 0.1


def test_a_prefill_that_selection_rasterizes_along_m():
    # 3072 features, 4096 tokens, K 13824: waves re-read less along M (selection.sm90_raster)
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.describe import selection
    from cutlass_sparse.formats.quantize import quantize_e4m3

    m, n, k = 3072, 4096, 13824
    assert selection.config_for_shape(m, n, k, "e4m3", "bf16", "col", 132, "sm90").raster == selection.ALONG_M
    w = weight(m, k, seed=3)
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
    x = cupy.random.default_rng(5).standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_fp8(x)
    info = {}
    y = cs.linear_fp8(xq, x_scales, sw, info=info)
    assert info["raster"] == selection.ALONG_M   # the plan that ran
    assert reference.relative_error(y, dequantized_reference(sw, xq, x_scales, w_bytes)) <= TOLERANCE["bf16"]


def test_any_feature_count_and_a_strided_x():
    """250 features (bf16 rows not whole 16-byte vectors: D staged), xq a view with padded
    rows (copied once): the same answer as the direct path."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import quantize_e4m3

    m, n, k = 250, 16, 256
    w = weight(m, k, seed=5)
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
    xq, x_scales = cs.quantize_activations_fp8(cupy.random.default_rng(2).standard_normal((n, k), dtype=cupy.float32))
    padded = cupy.zeros((n, k + 16), dtype=xq.dtype)
    padded[:, :k] = xq
    y = cs.linear_fp8(padded[:, :k], x_scales, sw)
    assert y.shape == (n, m)
    assert reference.relative_error(y, dequantized_reference(sw, xq, x_scales, w_bytes)) <= TOLERANCE["bf16"]


def test_linear_fp8_activation_and_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import decode_e4m3, quantize_e4m3

    m, n, k = 512, 64, 512
    w = cs.prune_2to4(torch.randn(m, k, device="cuda", dtype=torch.float16) * 0.05)
    sw = cs.quantize_fp8(w)
    x = torch.randn(n, k, device="cuda", dtype=torch.float16)
    xq, x_scales = cs.quantize_activations_fp8(x)
    assert xq.dtype == torch.float8_e4m3fn and x_scales.dtype == torch.float32 and x_scales.shape == (n,)
    y = cs.linear_fp8(xq, x_scales, sw, activation="silu")
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16 and y.shape == (n, m)
    w_bytes, w_scales = quantize_e4m3(cupy.from_dlpack(w.float()), axis=1)
    x_deq = decode_e4m3(cupy.from_dlpack(xq.view(torch.uint8)), cupy.from_dlpack(x_scales)[:, None])
    product = x_deq @ decode_e4m3(w_bytes, w_scales).T
    ref = product / (1 + cupy.exp(-product))   # silu
    assert reference.relative_error(cupy.from_dlpack(y.float()), ref) <= TOLERANCE["bf16"]


def test_fp8_inputs_are_checked():
    import cupy

    sw = cs.quantize_fp8(weight(128, 64, seed=1))
    xq, x_scales = cs.quantize_activations_fp8(cupy.ones((8, 64), dtype=cupy.float16))
    with pytest.raises(ValueError, match="x_scales must be a contiguous float32"):
        cs.linear_fp8(xq, x_scales[:4], sw)
    with pytest.raises(ValueError, match=r"xq must be a \[tokens, 64\] array"):
        cs.linear_fp8(xq[:, :32], x_scales, sw)
    with pytest.raises(ValueError, match="not 2:4 sparse"):
        cs.quantize_fp8(cupy.ones((16, 64), dtype=cupy.float16))


@pytest.mark.parametrize("shape", [(512, 256, 1024), (4096, 7, 4096)], ids=lambda s: "x".join(map(str, s)))
def test_fp8_output_for_a_following_fp8_layer(shape):
    """out_dtype e4m3: y / out_scale rounded to e4m3 (3 mantissa bits: within 2^-4 of each
    normal value, so norm-wise too), saturated to +-448 rather than overflowing to NaN."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import E4M3_MAX, decode_e4m3

    m, n, k = shape
    sw, xq, x_scales, ref = quantized_layer(m, n, k, w_seed=5)
    out_scale = float(cupy.abs(ref).max()) / E4M3_MAX
    y = cs.linear_fp8(xq, x_scales, sw, out_dtype="e4m3", out_scale=out_scale)
    assert y.dtype == cupy.uint8 and y.shape == (n, m)
    assert reference.relative_error(decode_e4m3(y, out_scale), ref) <= 2.0 ** -4
    saturated = decode_e4m3(cs.linear_fp8(xq, x_scales, sw, out_dtype="e4m3", out_scale=out_scale / 4))
    assert bool(cupy.isfinite(saturated).all()) and float(cupy.abs(saturated).max()) == E4M3_MAX


def test_one_scale_for_all_tokens():
    """x_scales as one number (a static per-tensor scale): folded into the epilogue's
    scalar, with the weight's per-row scales still applied."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import decode_e4m3, quantize_e4m3

    m, n, k = 512, 256, 1024
    w = weight(m, k, seed=9)
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
    x = cupy.random.default_rng(3).standard_normal((n, k), dtype=cupy.float32)
    xq, x_scale = quantize_e4m3(x, axis=None)
    y = cs.linear_fp8(xq, float(x_scale), sw)
    ref = decode_e4m3(xq, float(x_scale)) @ decode_e4m3(w_bytes, sw.scales[:, None]).T
    assert reference.relative_error(y, ref) <= TOLERANCE["bf16"]
    with pytest.raises(ValueError, match="positive finite number"):
        cs.linear_fp8(xq, -1.0, sw)


def test_bias_and_an_activation_before_the_output_scale():
    """bias (one per feature; float32 is read in place, f16 converted) is added before the
    activation, and out_scale divides after it: silu(y + b) / s, which is not silu((y + b) / s)."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import E4M3_MAX, decode_e4m3, quantize_e4m3

    m, n, k = 512, 64, 512
    w = weight(m, k, seed=11)
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
    x = cupy.random.default_rng(4).standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_fp8(x)
    bias = cupy.random.default_rng(5).standard_normal(m, dtype=cupy.float32)
    product = dequantized_reference(sw, xq, x_scales, w_bytes) + bias[None, :]
    ref = product / (1 + cupy.exp(-product))   # silu
    for b in (bias, bias.astype(cupy.float16)):
        y = cs.linear_fp8(xq, x_scales, sw, bias=b, activation="silu")
        assert reference.relative_error(y, ref) <= TOLERANCE["bf16"]
    out_scale = float(cupy.abs(ref).max()) / E4M3_MAX
    y8 = cs.linear_fp8(xq, x_scales, sw, bias=bias, activation="silu", out_dtype="e4m3", out_scale=out_scale)
    assert reference.relative_error(decode_e4m3(y8, out_scale), ref) <= 2.0 ** -4
    scaled_first = product / out_scale   # the other order, for scale: far from the answer
    assert reference.relative_error(scaled_first / (1 + cupy.exp(-scaled_first)) * out_scale, ref) > 0.1
    with pytest.raises(ValueError, match=r"bias must be an f16, bf16 or f32 \[512\] array"):
        cs.linear_fp8(xq, x_scales, sw, bias=bias[:8])


@pytest.mark.parametrize("element", ["e4m3", "s8"])
def test_k_not_a_multiple_of_16(element):
    """K = 200 (8-bit sm90 kernels want multiples of 32): the weight gets zero columns up to
    224 when quantized, x the same zero columns at each call; the same answer as the
    dequantized product of the unpadded operands."""
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import decode, quantize

    m, n, k = 256, 16, 200
    w = weight(m, k, seed=21)
    sw = cs.quantize_fp8(w) if element == "e4m3" else cs.quantize_int8(w)
    assert sw.shape == (m, k) and sw.padded_k == 224
    wq, w_scales = quantize(reference.to_float32(w), element, axis=1)
    x = cupy.random.default_rng(7).standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    quantize_x = cs.quantize_activations_fp8 if element == "e4m3" else cs.quantize_activations_int8
    linear = cs.linear_fp8 if element == "e4m3" else cs.linear_int8
    xq, x_scales = quantize_x(x)
    y = linear(xq, x_scales, sw)
    ref = decode(xq, element, x_scales[:, None]) @ decode(wq, element, w_scales).T
    assert reference.relative_error(y, ref) <= TOLERANCE["bf16"]


# e5m2 activations beside an e4m3 weight: x keeps 2 mantissa bits (a relative rounding
# error of up to 2^-3 per element), so the product is further from the unquantized one
# than with e4m3 x; against the dequantized operands' product the tolerance is the
# output's, as above.
E5M2_CASES = [(512, 256, 1024), (4096, 7, 4096), (4096, 512, 4096)]


@pytest.mark.parametrize("shape", E5M2_CASES, ids=lambda s: "x".join(map(str, s)))
def test_e5m2_activations_beside_an_e4m3_weight(shape):
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import decode, quantize_e4m3

    m, n, k = shape
    w = weight(m, k, seed=m + n + 1)
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
    x = cupy.random.default_rng(n + 1).standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_fp8(x, "e5m2")
    info = {}
    y = cs.linear_fp8(xq, x_scales, sw, x_element="e5m2", info=info)
    assert "_e4m3_e5m2_" in info["config"]
    ref = decode(xq, "e5m2", x_scales[:, None]) @ decode(w_bytes, "e4m3", sw.scales[:, None]).T
    assert reference.relative_error(y, ref) <= TOLERANCE["bf16"]
    assert reference.relative_error(ref, reference.to_float32(x) @ reference.to_float32(w).T) < 0.15
    # the same bytes read as e4m3 are other numbers: the kernel reads B as e5m2
    as_e4m3 = cs.linear_fp8(xq, x_scales, sw)
    assert reference.relative_error(as_e4m3, ref) > 0.5


def test_e5m2_torch_tensors_are_read_as_e5m2():
    torch = pytest.importorskip("torch")
    import cupy

    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import decode, quantize_e4m3

    m, n, k = 512, 64, 512
    w = cs.prune_2to4(torch.randn(m, k, device="cuda", dtype=torch.float16) * 0.05)
    sw = cs.quantize_fp8(w)
    xq, x_scales = cs.quantize_activations_fp8(torch.randn(n, k, device="cuda", dtype=torch.float16), "e5m2")
    assert xq.dtype == torch.float8_e5m2
    y = cs.linear_fp8(xq, x_scales, sw)   # the tensor's dtype says e5m2
    w_bytes, w_scales = quantize_e4m3(cupy.from_dlpack(w.float()), axis=1)
    ref = decode(cupy.from_dlpack(xq.view(torch.uint8)), "e5m2", cupy.from_dlpack(x_scales)[:, None]) @ \
        decode(w_bytes, "e4m3", w_scales).T
    assert reference.relative_error(cupy.from_dlpack(y.float()), ref) <= TOLERANCE["bf16"]
    with pytest.raises(TypeError, match="holds e5m2 values, but x_element is 'e4m3'"):
        cs.linear_fp8(xq, x_scales, sw, x_element="e4m3")


def test_leading_dimensions_of_quantized_activations():
    """x [batch, tokens, K] through quantize_activations_fp8 and linear_fp8 (scales
    [batch, tokens], out [batch, tokens, features]) as the same call on [batch*tokens, K]."""
    import cupy

    m, k = 256, 512
    sw = cs.quantize_fp8(weight(m, k, seed=9))
    x = cupy.random.default_rng(9).standard_normal((2, 3, k), dtype=cupy.float32).astype(cupy.float16)
    xq, x_scales = cs.quantize_activations_fp8(x)
    assert xq.shape == (2, 3, k) and x_scales.shape == (2, 3)
    flat = cs.linear_fp8(xq.reshape(6, k), x_scales.reshape(6), sw)
    y = cs.linear_fp8(xq, x_scales, sw)
    assert y.shape == (2, 3, m) and bool((y.reshape(6, m) == flat).all())
    out = cupy.empty((2, 3, m), dtype=flat.dtype)
    assert cs.linear_fp8(xq, x_scales, sw, out=out) is out and bool((out.reshape(6, m) == flat).all())
    with pytest.raises(ValueError, match=r"x_scales must be \[2, 3\]"):
        cs.linear_fp8(xq, x_scales.reshape(6), sw)


# 4608 features, K 8192, at token counts whose last wave of 128x256 tiles is part-empty
TWIN_CASES = [(4608, 2048, 8192), (4608, 1280, 8192), (4608, 1792, 8192)]


@pytest.mark.parametrize("shape", TWIN_CASES, ids=lambda s: "x".join(map(str, s)))
def test_a_part_empty_last_wave_runs_the_fp8_stream_k_twin_where_it_gains(shape):
    """4608 features, K 8192: 2048 tokens (2.18 waves of 128x256 tiles) and 1280 (1.36) run the
    128x256x128 tile's stream-K twin (selection.TAIL_TWINS, the 8-bit rule), 1792 (1.91 waves:
    CUTLASS would not split the tail) the persistent kernel; each result checked, three calls
    each (the second and third take Params by value on the stream's shared workspace)."""
    from cutlass_sparse import reference

    m, tokens, k = shape
    sw, xq, x_scales, ref = quantized_layer(m, tokens, k, w_seed=11)
    for _ in range(3):
        info = {}
        y = cs.linear_fp8(xq, x_scales, sw, info=info)
        assert ("_streamk_" in info["config"]) == (tokens != 1792), info["config"]
        assert "128x256x128_2x1x1" in info["config"]
        assert reference.relative_error(y, ref) <= TOLERANCE["bf16"]
