"""cs.matmul with the sm80 family (CUTLASS 2.x) on the GPU against a float32 dense
reference. Marked gpu: skipped without one."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.describe import dtypes
from cutlass_sparse import reference

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_cases  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
# Relative Frobenius error against the float32 reference (f32 accumulation in both).
TOLERANCE = {"f16": 2e-3, "bf16": 1.2e-2, "f32": 2e-3}


def cp():
    import cupy

    return cupy


def random_operands(m, n, k, dtype, layout, seed, family="sm80"):
    """Fresh random 2:4 weight (pruned and compressed on the GPU for `family`) and x in the given layout."""
    cupy = cp()
    rng = cupy.random.default_rng(seed)
    np_dtype = dtypes.numpy_dtype(dtype)
    w = cs.prune_2to4(dtypes.from_float32(rng.standard_normal((m, k), dtype=cupy.float32), np_dtype))
    x = dtypes.from_float32(rng.standard_normal((k, n), dtype=cupy.float32), np_dtype)
    if layout == "col":
        x = cupy.asfortranarray(x)
    return w, cs.compress(w, layout=family), x


def check(y, w, x, dtype, alpha=1.0, beta=0.0, c=None):
    ref = alpha * (reference.to_float32(w) @ reference.to_float32(x))
    if c is not None:
        ref = ref + beta * reference.to_float32(c)
    err = reference.relative_error(y, ref)
    assert err <= TOLERANCE[dtype], f"relative error {err:.3e}"


NAN_BITS = {"f16": (0x7E00, "uint16"), "bf16": (0x7FC0, "uint16"), "f32": (0x7FC00000, "uint32")}


def captured_and_replayed(call):
    """call() captured into a CUDA graph on a non-blocking stream (which does not wait for
    the default stream, so the device is synchronized first), the graph replayed once and
    waited for."""
    import cupy

    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        call()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()


def poisoned(shape, np_dtype, order="C"):
    """An output buffer full of NaN: any element the kernel fails to write shows up."""
    cupy = cp()
    bits, view = NAN_BITS[dtypes.name_of(np_dtype)]
    out = cupy.empty(shape, dtype=np_dtype, order=order)
    out.view(view)[...] = bits
    assert bool(cupy.isnan(reference.to_float32(out)).all())
    return out


@pytest.mark.parametrize("layout", gpu_cases.LAYOUTS)
@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
@pytest.mark.parametrize("shape", gpu_cases.SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_matches_dense(shape, dtype, layout):
    m, n, k = shape
    w, sw, x = random_operands(m, n, k, dtype, layout, seed=hash((shape, dtype, layout)) % 2**31)
    # odd N with a row-major x: the library stages x column-major
    out = poisoned((m, n), dtypes.numpy_dtype(dtype))
    y = cs.matmul(sw, x, out=out)
    assert y is out
    check(y, w, x, dtype)
    fresh = cs.matmul(sw, x)
    assert fresh.shape == (m, n) and fresh.flags.c_contiguous
    check(fresh, w, x, dtype)


@pytest.mark.parametrize("m", [96, 50])   # 50: ragged M, c copied into a padded buffer
def test_alpha_beta_with_c(m):
    cupy = cp()
    w, sw, x = random_operands(m, 40, 128, "f16", "row", seed=5)
    c = cupy.random.default_rng(6).standard_normal((m, 40), dtype=cupy.float32).astype(cupy.float16)
    y = cs.matmul(sw, x, alpha=0.5, beta=-2.0, c=c, out=poisoned((m, 40), np.dtype(np.float16)))
    check(y, w, x, "f16", alpha=0.5, beta=-2.0, c=c)
    # beta = 0 ignores c entirely, even a NaN one.
    y0 = cs.matmul(sw, x, alpha=2.0, beta=0.0, c=poisoned((m, 40), np.dtype(np.float16)))
    check(y0, w, x, "f16", alpha=2.0)


@pytest.mark.parametrize("dtype, layout", [("f16", "row"), ("bf16", "col")])
def test_f32_output(dtype, layout):
    w, sw, x = random_operands(96, 40, 128, dtype, layout, seed=7)
    y = cs.matmul(sw, x, out_dtype="f32", out=poisoned((96, 40), np.dtype(np.float32)))
    assert y.dtype == np.float32
    check(y, w, x, "f32" if dtype == "f16" else "bf16")


def test_views_without_copies():
    cupy = cp()
    w, sw, x = random_operands(200, 64, 256, "f16", "row", seed=8)
    xt = cupy.ascontiguousarray(x.T)              # [N, K] row-major
    check(cs.matmul(sw, xt.T), w, x, "f16")        # its transpose is a column-major [K, N] view
    wide = poisoned((200, 100), np.dtype(np.float16))
    view = wide[:, 8:72]                           # row stride 100, 16-byte aligned start
    y = cs.matmul(sw, x, out=view)
    check(y, w, x, "f16")
    assert bool(cupy.isnan(wide[:, :8]).all()) and bool(cupy.isnan(wide[:, 72:]).all())
    ragged_out = poisoned((50, 64), np.dtype(np.float16))
    w2, sw2, x2 = random_operands(50, 64, 256, "f16", "col", seed=9)
    check(cs.matmul(sw2, x2, out=ragged_out), w2, x2, "f16")


@pytest.mark.parametrize("dtype", gpu_cases.DTYPES)
def test_gpu_compression_matches_numpy_bit_for_bit(dtype):
    cupy = cp()
    rng = np.random.default_rng(10)
    w = rng.standard_normal((77, 200)).astype(np.float32).astype(dtypes.numpy_dtype(dtype))
    pruned_host = cs.prune_2to4(w)
    pruned_dev = cs.prune_2to4(cupy.asarray(w))
    np.testing.assert_array_equal(pruned_dev.get().view(np.uint16), pruned_host.view(np.uint16))
    host, dev = cs.compress(pruned_host), cs.compress(pruned_dev, layout="sm80")
    np.testing.assert_array_equal(dev.values.get().view(np.uint16), host.values.view(np.uint16))
    np.testing.assert_array_equal(dev.metadata.get(), host.metadata)
    np.testing.assert_array_equal(dev.to_dense().get().view(np.uint16), pruned_host.view(np.uint16))
    # A host-compressed matrix moved to the device computes the same product.
    x = cupy.asarray(rng.standard_normal((200, 32)).astype(np.float32).astype(w.dtype))
    check(cs.matmul(host.to_device(), x), cupy.asarray(pruned_host), x, dtype)


def test_second_process_loads_from_cache_and_computes(tmp_path):
    """A fresh process with compiling disabled still runs: the kernel came from compiled_cache.db."""
    w, sw, x = random_operands(128, 32, 64, "f16", "row", seed=11)
    cs.matmul(sw, x)   # make sure this process compiled or loaded it into the cache
    script = """
import sys, time, cupy, numpy as np
import cutlass_sparse as cs
from cutlass_sparse import reference
rng = cupy.random.default_rng(12)
w = cs.prune_2to4(rng.standard_normal((128, 64), dtype=cupy.float32).astype(cupy.float16))
x = rng.standard_normal((64, 32), dtype=cupy.float32).astype(cupy.float16)
info = {}
t = time.perf_counter()
y = cs.matmul(cs.compress(w, layout="sm80"), x, info=info)
cupy.cuda.get_current_stream().synchronize()
err = reference.relative_error(y, reference.to_float32(w) @ reference.to_float32(x))
print(info["from_cache"], err, (time.perf_counter() - t) * 1e3)
"""
    env = dict(os.environ, CUTLASS_SPARSE_NO_COMPILE="1", PYTHONPATH=os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    from_cache, err, millis = result.stdout.split()
    assert from_cache == "True" and float(err) < 2e-3


def test_torch_tensor_through_dlpack():
    torch = pytest.importorskip("torch")
    w, sw, x = random_operands(128, 32, 64, "f16", "row", seed=13)
    x_t = torch.from_dlpack(x)
    y = cs.matmul(sw, x_t)
    assert isinstance(y, torch.Tensor)           # torch in, torch out
    check(cp().from_dlpack(y), w, x, "f16")


# -- bad input: a clear exception naming the argument, never a kernel fault ---------

def test_bad_inputs_raise_clear_errors():
    cupy = cp()
    w, sw, x = random_operands(64, 48, 128, "f16", "row", seed=14)
    with pytest.raises(TypeError, match="x has dtype float32, but sw is float16"):
        cs.matmul(sw, x.astype(cupy.float32))
    with pytest.raises(ValueError, match="x has 64 rows, but sw has K = 128"):
        cs.matmul(sw, x[:64])
    with pytest.raises(TypeError, match="x is a numpy array in host memory"):
        cs.matmul(sw, x.get())
    with pytest.raises(TypeError, match="sw holds host"):
        cs.matmul(sw.to_host(), x)
    with pytest.raises(TypeError, match="SparseMatrix"):
        cs.matmul(w, x)
    with pytest.raises(ValueError, match="out must be"):
        cs.matmul(sw, x, out=cupy.zeros((64, 47), dtype=cupy.float16))
    with pytest.raises(ValueError, match="beta is non-zero but c is None"):
        cs.matmul(sw, x, beta=1.0)
    with pytest.raises(ValueError, match="out_dtype"):
        cs.matmul(sw, x, out_dtype="bf16")
    with pytest.raises(ValueError, match="not 2:4 sparse: row"):
        cs.compress(cupy.ones((32, 16), dtype=cupy.float16), layout="sm80")
    cupy.cuda.get_current_stream().synchronize()   # nothing faulted on the device


def test_wrong_device_raises():
    cupy = cp()
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    w, sw, x = random_operands(64, 48, 128, "f16", "row", seed=15)
    with cupy.cuda.Device(1):
        x1 = cupy.asarray(x)
    with pytest.raises(ValueError, match="on device"):
        cs.matmul(sw, x1)
