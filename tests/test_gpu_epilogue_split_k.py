"""Issue 4 on the GPU: split-K (serial, parallel), fused epilogues (activations, bias,
alpha/beta/C), cs.linear, against float32 references. Marked gpu."""
import sys
from pathlib import Path

import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.describe import dtypes
from cutlass_sparse import reference

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_cases  # noqa: E402
from test_gpu_matmul import TOLERANCE, poisoned, random_operands  # noqa: E402

pytestmark = pytest.mark.gpu


def expect(w, x, alpha=1.0, beta=0.0, c=None, bias_full=None, activation="identity", slope=0.01):
    v = alpha * (reference.to_float32(w) @ reference.to_float32(x))
    if c is not None:
        v = v + beta * reference.to_float32(c)
    if bias_full is not None:
        v = v + bias_full
    return reference.activation(activation, v, slope)


def assert_close(y, ref, dtype):
    err = reference.relative_error(y, ref)
    assert err <= TOLERANCE[dtype], f"relative error {err:.3e}"


@pytest.mark.parametrize("mode", ["serial", "parallel"])
@pytest.mark.parametrize("splits", gpu_cases.SPLITS)
@pytest.mark.parametrize("shape", gpu_cases.SM80_SPLIT_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_sm80_split_k(shape, splits, mode):
    m, n, k = shape
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=splits)
    info = {}
    y = cs.matmul(sw, x, out=poisoned((m, n), np.float16), split_k=splits, split_k_mode=mode,
                  family="sm80", info=info)
    assert info["split_k"] == splits and (info["workspace_bytes"] > 0) == (splits > 1)
    assert_close(y, expect(w, x), "f16")
    # again on the same buffers: the serial semaphores must have been left usable
    y2 = cs.matmul(sw, x, out=y, split_k=splits, split_k_mode=mode, family="sm80")
    assert_close(y2, expect(w, x), "f16")


@pytest.mark.parametrize("mode", ["serial", "parallel"])
def test_sm80_split_k_with_epilogue_and_caller_workspace(mode):
    import cupy

    m, n, k = 200, 48, 1000
    w, sw, x = random_operands(m, n, k, "bf16", "col", seed=7)
    rng = cupy.random.default_rng(8)
    c = dtypes.from_float32(rng.standard_normal((m, n), dtype=cupy.float32), dtypes.bfloat16)
    bias = dtypes.from_float32(rng.standard_normal(m, dtype=cupy.float32), dtypes.bfloat16)
    need = cs.workspace_size(sw, x, split_k=3, split_k_mode=mode)
    workspace = cupy.empty(need, dtype=cupy.uint8)
    y = cs.matmul(sw, x, alpha=0.5, beta=2.0, c=c, bias=bias, activation="gelu", split_k=3, split_k_mode=mode,
                  workspace=workspace)
    bias_full = reference.to_float32(bias)[:, None]
    assert_close(y, expect(w, x, 0.5, 2.0, c, bias_full, "gelu"), "bf16")
    with pytest.raises(ValueError, match="workspace holds"):
        cs.matmul(sw, x, split_k=3, split_k_mode=mode, workspace=workspace[: need // 2])


@pytest.mark.parametrize("family", ["sm80", "sm90"])
@pytest.mark.parametrize("activation", gpu_cases.ACTIVATIONS)
def test_activations(activation, family):
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    m, n, k = 256, 64, 512
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=3, family=family)
    y = cs.matmul(sw, x, out=poisoned((m, n), np.float16), activation=activation, leaky_slope=0.2)
    assert_close(y, expect(w, x, activation=activation, slope=0.2), "f16")


@pytest.mark.parametrize("family", ["sm80", "sm90"])
@pytest.mark.parametrize("bias_shape", ["m", "m1", "1n"])
def test_bias(bias_shape, family):
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    m, n, k = 200, 64, 256
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=4, family=family)
    shape = {"m": (m,), "m1": (m, 1), "1n": (1, n)}[bias_shape]
    bias = cupy.random.default_rng(5).standard_normal(shape, dtype=cupy.float32).astype(cupy.float16)
    y = cs.matmul(sw, x, bias=bias, activation="relu")
    full = cupy.broadcast_to(bias.reshape(m, 1) if bias_shape != "1n" else bias, (m, n)).astype(cupy.float32)
    assert_close(y, expect(w, x, bias_full=full, activation="relu"), "f16")


def test_bad_epilogue_and_split_arguments():
    import cupy

    w, sw, x = random_operands(128, 32, 128, "f16", "row", seed=6)
    with pytest.raises(ValueError, match="activation 'swish' is not one of"):
        cs.matmul(sw, x, activation="swish")
    with pytest.raises(ValueError, match=r"bias of shape \(32,\) must be \[128\]"):
        cs.matmul(sw, x, bias=cupy.zeros(32, dtype=cupy.float16))
    with pytest.raises(TypeError, match="bias has dtype float32"):
        cs.matmul(sw, x, bias=cupy.zeros(128, dtype=cupy.float32))
    with pytest.raises(ValueError, match="split_k must be an integer >= 1"):
        cs.matmul(sw, x, split_k=0)
    with pytest.raises(ValueError, match="split_k_mode 'tree' must be"):
        cs.matmul(sw, x, split_k=2, split_k_mode="tree")
    with pytest.raises(ValueError, match="exceeds the 2 K tiles"):
        cs.matmul(sw, x, split_k=3, family="sm80")


@pytest.mark.parametrize("family", ["sm80", "sm90"])
def test_linear(family):
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    tokens, k, features = 40, 256, 192
    rng = cupy.random.default_rng(9)
    w = cs.prune_2to4(rng.standard_normal((features, k), dtype=cupy.float32).astype(cupy.float16))
    x = rng.standard_normal((tokens, k), dtype=cupy.float32).astype(cupy.float16)
    b = rng.standard_normal(features, dtype=cupy.float32).astype(cupy.float16)
    sw = cs.compress(w, layout=family)
    y = cs.linear(x, sw, bias=b, activation="silu")
    assert y.shape == (tokens, features)
    ref = reference.activation("silu", reference.to_float32(x) @ reference.to_float32(w).T + b.astype(cupy.float32))
    assert_close(y, ref, "f16")


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("shape", [(3, 200, 40, 100), (2, 256, 64, 512)], ids=lambda s: "x".join(map(str, s)))
def test_batched_shared_weight(shape, layout):
    import cupy

    batch, m, n, k = shape
    w, sw, _ = random_operands(m, n, k, "bf16", layout, seed=61)
    rng = cupy.random.default_rng(62)
    xs = dtypes.from_float32(rng.standard_normal((batch, k, n), dtype=cupy.float32), dtypes.bfloat16)
    if layout == "col":
        xs = cupy.ascontiguousarray(xs.transpose(0, 2, 1)).transpose(0, 2, 1)
    c = dtypes.from_float32(rng.standard_normal((batch, m, n), dtype=cupy.float32), dtypes.bfloat16)
    y = cs.matmul(sw, xs, alpha=2.0, beta=0.5, c=c, activation="tanh")
    assert y.shape == (batch, m, n)
    for i in range(batch):
        assert_close(y[i], expect(w, xs[i], 2.0, 0.5, c[i], activation="tanh"), "bf16")
    bias = dtypes.from_float32(rng.standard_normal(m, dtype=cupy.float32), dtypes.bfloat16)
    y = cs.matmul(sw, xs, bias=bias)
    for i in range(batch):
        assert_close(y[i], expect(w, xs[i], bias_full=reference.to_float32(bias)[:, None]), "bf16")
    with pytest.raises(ValueError, match="split_k cannot be combined with a batched x"):
        cs.matmul(sw, xs, split_k=2)
    with pytest.raises(ValueError, match="rows per batch"):
        cs.matmul(sw, xs[:, :-16])


def int8_operands(m, n, k, seed):
    import cupy

    rng = cupy.random.default_rng(seed)
    w = cs.prune_2to4(rng.integers(-128, 128, size=(m, k), dtype=cupy.int8))
    x = cupy.asfortranarray(rng.integers(-128, 128, size=(k, n), dtype=cupy.int8))
    return w, cs.compress(w, layout="sm80"), x


def exact_int_reference(w, x):
    import cupy

    return cupy.asarray(w.get().astype(np.int64) @ x.get().astype(np.int64))


@pytest.mark.parametrize("shape", [(256, 64, 512), (200, 40, 1000), (33, 8, 128), (1024, 128, 4096)],
                         ids=lambda s: "x".join(map(str, s)))
def test_int8_int32_output_is_exact(shape):
    import cupy

    m, n, k = shape
    w, sw, x = int8_operands(m, n, k, seed=71)
    assert sw.metadata.dtype == cupy.uint32
    y = cs.matmul(sw, x)
    assert y.dtype == cupy.int32
    cupy.testing.assert_array_equal(y, exact_int_reference(w, x))
    if k < 3 * 128:   # the int8 kernels' K tile is 128: fewer tiles than slices is refused
        with pytest.raises(ValueError, match="split_k=3 exceeds"):
            cs.matmul(sw, x, split_k=3)
        return
    y2 = cs.matmul(sw, x, split_k=3)                      # serial split-K keeps int32 partials: exact
    cupy.testing.assert_array_equal(y2, exact_int_reference(w, x))


def test_int8_output_scaled_and_clamped():
    import cupy

    m, n, k = 128, 64, 256
    w, sw, x = int8_operands(m, n, k, seed=72)
    scale = 1.0 / 512
    y = cs.matmul(sw, x, alpha=scale, out_dtype="s8")
    want = cupy.clip(cupy.rint(exact_int_reference(w, x).astype(cupy.float64) * scale), -128, 127)
    # float32 epilogue arithmetic: at most one unit of rounding away from the float64 answer
    assert int(cupy.abs(y.astype(cupy.int32) - want.astype(cupy.int32)).max()) <= 1
    assert y.dtype == cupy.int8


def test_int8_argument_rules():
    import cupy

    w, sw, x = int8_operands(128, 64, 256, seed=73)
    # a row-major x is staged K-major by the library: the same exact answer
    assert bool((cs.matmul(sw, cupy.ascontiguousarray(x)) == cs.matmul(sw, x)).all())
    with pytest.raises(ValueError, match="needs a floating-point output"):
        cs.matmul(sw, x, activation="relu")
    with pytest.raises(ValueError, match="int8 split-K: serial with an int32 output only"):
        cs.matmul(sw, x, split_k=2, split_k_mode="parallel")
    with pytest.raises(ValueError, match="out_dtype 'f16': s8 inputs give one of"):
        cs.matmul(sw, x, out_dtype="f16")
    assert cs.compress(w).layout == "sm80"    # int8 always compresses for the sm80 family


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("shape", [(256, 64, 512), (200, 40, 1000), (33, 8, 72)], ids=lambda s: "x".join(map(str, s)))
def test_tf32_one_of_two(shape, layout):
    import cupy

    m, n, k = shape
    rng = cupy.random.default_rng(81)
    w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32))      # 1:2 for float32
    x = rng.standard_normal((k, n), dtype=cupy.float32)
    if layout == "col":
        x = cupy.asfortranarray(x)
    sw = cs.compress(w)
    assert sw.layout == "sm80" and sw.element == "tf32"
    bias = rng.standard_normal(m, dtype=cupy.float32)
    y = cs.matmul(sw, x, bias=bias, activation="relu")
    assert y.dtype == cupy.float32
    assert reference.relative_error(y, cupy.maximum(w @ x + bias[:, None], 0)) <= 5e-3
    info = {}
    y = cs.matmul(sw, x, info=info)
    assert "tf32" in info["config"]
    err = reference.relative_error(y, w @ x)
    assert err <= 5e-3, f"relative error {err:.3e}"            # tf32: 10-bit mantissas
    y2 = cs.matmul(sw, x, split_k=2, split_k_mode="parallel", family="sm80")
    assert reference.relative_error(y2, w @ x) <= 5e-3


@pytest.mark.parametrize("per_batch_layout", ["row", "col"])
def test_sm90_batch_runs_as_one_wide_gemm(per_batch_layout):
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    batch, m, n, k = 3, 256, 64, 512
    w, sw, _ = random_operands(m, n, k, "f16", "row", seed=91, family="sm90")
    rng = cupy.random.default_rng(92)
    xs = rng.standard_normal((batch, k, n), dtype=cupy.float32).astype(cupy.float16)
    if per_batch_layout == "col":
        xs = cupy.ascontiguousarray(xs.transpose(0, 2, 1)).transpose(0, 2, 1)
    c = rng.standard_normal((batch, m, n), dtype=cupy.float32).astype(cupy.float16)
    y = cs.matmul(sw, xs, beta=1.0, c=c, activation="silu")
    assert y.shape == (batch, m, n)
    for i in range(batch):
        assert_close(y[i], expect(w, xs[i], 1.0, 1.0, c[i], activation="silu"), "f16")


@pytest.mark.parametrize("shared_x", [False, True])
def test_a_batch_of_weights(shared_x):
    import cupy

    batch, m, n, k = 3, 200, 48, 256
    rng = cupy.random.default_rng(101)
    ws = cs.prune_2to4(rng.standard_normal((batch, m, k), dtype=cupy.float32).astype(cupy.float16))
    sws = cs.compress(ws)
    xs = rng.standard_normal((k, n) if shared_x else (batch, k, n), dtype=cupy.float32).astype(cupy.float16)
    y = cs.matmul(sws, xs, activation="relu")
    assert y.shape == (batch, m, n)
    for i in range(batch):
        assert_close(y[i], expect(ws[i], xs if shared_x else xs[i], activation="relu"), "f16")
    with pytest.raises(ValueError, match=r"must be \[3, K, N\]"):
        cs.matmul(sws, cupy.stack([xs] * 2) if shared_x else xs[:2])
