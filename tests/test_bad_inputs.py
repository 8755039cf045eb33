"""Bad and odd library inputs to prune_2to4, compress and SparseMatrix: each gets a result
or a clear error (TypeError/ValueError naming the argument and the rule, RuntimeError for
a missing GPU), quickly and before allocating. cs.matmul, linear, plan, workspace_size and
the quantize calls refuse bad arguments the same way, before anything touches CUDA. CPU only."""
import contextlib
import dataclasses
import re
import signal
import sys
import time
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.formats import patterns, prune, sm80_layout
from cutlass_sparse.launch import graphs
from conftest import HAS_GPU

NAN, INF = np.nan, np.inf
FLOATS = [np.float16, ml_dtypes.bfloat16, np.float32]


@contextlib.contextmanager
def within(seconds):
    """Fail if the block takes longer than `seconds`; an alarm stops a runaway at 20 s."""
    def stop(*_):
        raise AssertionError("still running after 20 s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    start = time.perf_counter()
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert time.perf_counter() - start < seconds


def survivors(pruned, group):
    """Non-zero values per group (NaN counts: it is not zero)."""
    bits = pruned.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[pruned.dtype.itemsize])
    signless = bits & (np.iinfo(bits.dtype).max >> 1)
    return (signless != 0).reshape(pruned.shape[0], -1, group).sum(axis=-1)


# ---- 1. NaN and inf: exactly `keep` per group; NaN above inf; ties to the lower index

ROWS_2TO4 = [  # (group, expected); "n" is NaN
    ([NAN, 1, 2, 3], [NAN, 0, 0, 3]),
    ([1, INF, -INF, 2], [0, INF, -INF, 0]),
    ([NAN, NAN, NAN, NAN], [NAN, NAN, 0, 0]),
    ([1, NAN, INF, NAN], [0, NAN, 0, NAN]),
    ([-INF, 5, NAN, 1], [-INF, 0, NAN, 0]),
    ([INF, INF, INF, INF], [INF, INF, 0, 0]),
    ([-NAN, 7, -INF, 0], [-NAN, 0, -INF, 0]),
    ([0, NAN, 0, 0], [0, NAN, 0, 0]),
]
ROWS_1TO2 = [([NAN, INF], [NAN, 0]), ([INF, NAN], [0, NAN]), ([-INF, 1], [-INF, 0]),
             ([NAN, NAN], [NAN, 0]), ([2, -INF], [0, -INF]), ([NAN, 0], [NAN, 0])]


@pytest.mark.parametrize("dtype", FLOATS)
def test_prune_with_nan_and_inf_keeps_exactly_keep_per_group(dtype):
    rows = ROWS_1TO2 if dtype == np.float32 else ROWS_2TO4
    group, keep = (2, 1) if dtype == np.float32 else (4, 2)
    dense = np.array([sum((r for r, _ in rows), [])], dtype=np.float32).astype(dtype)
    expected = np.array([sum((e for _, e in rows), [])], dtype=np.float32)
    pruned = cs.prune_2to4(dense)
    got = pruned.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.nan_to_num(got, nan=7.5), np.nan_to_num(expected, nan=7.5))
    full = [i for i, (r, _) in enumerate(rows) if np.count_nonzero(r) >= keep]
    assert (survivors(pruned, group)[0, full] == keep).all()
    sw = cs.compress(pruned)
    np.testing.assert_array_equal(sw.to_dense().view(np.uint8), pruned.view(np.uint8))


@pytest.mark.parametrize("dtype", FLOATS)
def test_prune_random_nan_inf_every_full_group_keeps_exactly_keep(dtype):
    rng = np.random.default_rng(4)
    dense = rng.choice(np.array([NAN, -NAN, INF, -INF, 1.0, -2.0, 3.0], dtype=np.float32), size=(33, 64))
    dense = dense.astype(dtype)
    group, keep = (2, 1) if dtype == np.float32 else (4, 2)
    pruned = cs.prune_2to4(dense)
    assert (survivors(pruned, group) == keep).all()
    # The rule written out: NaN above inf above finite by |x|, ties to the lower index.
    values = dense.astype(np.float32).reshape(33, -1, group)
    for r, g in np.ndindex(values.shape[:2]):
        v = values[r, g]
        order = sorted(range(group), key=lambda i: (-int(np.isnan(v[i])), -np.nan_to_num(abs(v[i]), nan=0), i))
        kept = np.flatnonzero(pruned.reshape(33, -1, group)[r, g].astype(np.float32) != 0)
        assert sorted(order[:keep]) == kept.tolist(), (r, g, v)
    cs.compress(pruned)
    cs.compress(cs.prune_2to4(np.stack([dense, dense[::-1]])))   # batches too


def test_nan_in_too_full_group_is_counted_by_the_not_2to4_check():
    dense = np.array([[NAN, 1, 0, 2]], dtype=np.float16)
    with pytest.raises(ValueError, match="row 0, columns 0..3 hold 3 non-zeros"):
        cs.compress(dense)


# ---- 2. broadcast batches and sizes that cannot fit

def test_compress_refuses_a_broadcast_batch_quickly():
    w = cs.prune_2to4(np.random.default_rng(0).standard_normal((64, 128)).astype(np.float16))
    with within(1.0), pytest.raises(ValueError, match=r"batch stride 0.*cs\.compress\(dense\[0\]\)"):
        cs.compress(np.broadcast_to(w, (1000, 64, 128)))
    huge = np.broadcast_to(np.zeros((1, 1), np.float16), (10**6, 4096, 4096))
    with within(1.0), pytest.raises(ValueError, match="broadcast"):
        cs.compress(huge)
    one = cs.compress(np.broadcast_to(w, (1, 64, 128)))   # a batch of one is just a batch
    np.testing.assert_array_equal(one.values[0], cs.compress(w).values)


def test_prune_of_a_broadcast_batch_prunes_once_and_broadcasts():
    w = np.random.default_rng(1).standard_normal((8, 4096)).astype(np.float16)
    with within(1.0):
        pruned = cs.prune_2to4(np.broadcast_to(w, (10**6, 8, 4096)))
    assert pruned.shape == (10**6, 8, 4096) and pruned.strides[0] == 0
    np.testing.assert_array_equal(pruned[-1], cs.prune_2to4(w))


@pytest.mark.parametrize("call", [cs.prune_2to4, cs.compress])
def test_too_large_is_refused_before_allocating(call):
    huge = np.broadcast_to(np.ones((1, 1), np.float16), (2**20, 2**20))   # 2 TiB logical
    with within(1.0), pytest.raises(ValueError, match=r"dense of shape \(1048576, 1048576\).*too large.*"
                                    r"GiB of host memory is available") as caught:
        call(huge)
    assert isinstance(caught.value, MemoryError)


@pytest.mark.parametrize("call", [cs.prune_2to4, cs.compress])
def test_size_check_runs_before_any_allocation(call, monkeypatch):
    monkeypatch.setattr(patterns, "available_bytes", lambda dense: 2**20)
    dense = np.zeros((4096, 2048), np.float16)
    tracemalloc.start()
    try:
        with pytest.raises(patterns.TooLarge, match=r"dense of shape \(4096, 2048\) \(float16\) is too large: "
                           r"(prune_2to4|compress) needs about 0.\d+ GiB and 0.000977 GiB of host memory"):
            call(dense)
        assert tracemalloc.get_traced_memory()[1] < dense.nbytes // 8   # no copy of dense
    finally:
        tracemalloc.stop()
    with pytest.raises(patterns.TooLarge):
        cs.compress(np.zeros((64, 1024, 1024), np.float16))


@pytest.mark.parametrize("dtype", FLOATS + [np.int8])
def test_estimates_cover_the_measured_peak(dtype):
    rng = np.random.default_rng(2)
    element = {np.float32: "tf32", np.int8: "s8"}.get(dtype, "f16")
    dense = (rng.integers(-9, 9, (300, 1000)) if dtype == np.int8 else rng.standard_normal((300, 1000)))
    dense = np.asfortranarray(dense.astype(dtype))   # a view to copy: the worst case
    group = patterns.PATTERNS[element].group
    for call, estimate in [(cs.prune_2to4, prune.work_bytes(dense.shape, dense.dtype.itemsize, group)),
                           (cs.compress, sm80_layout.work_bytes(300, 1000, element))]:
        arg = dense if call is cs.prune_2to4 else cs.prune_2to4(dense)
        tracemalloc.start()
        call(arg)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak <= estimate <= 3 * peak, (call.__name__, peak, estimate)


# ---- 3. no GPU

@pytest.mark.skipif(HAS_GPU, reason="needs a machine without a GPU")
def test_to_device_without_a_gpu_says_so():
    sw = cs.compress(np.zeros((4, 8), np.float16))
    with pytest.raises(RuntimeError, match="no CUDA GPU is visible: SparseMatrix.to_device"):
        sw.to_device()


def test_to_device_without_cupy_says_so(monkeypatch):
    sw = cs.compress(np.zeros((4, 8), np.float16))
    monkeypatch.setitem(sys.modules, "cupy", None)   # import cupy -> ImportError
    with pytest.raises(RuntimeError, match="no CUDA GPU is visible: .*needs CuPy, which cannot be imported"):
        sw.to_device()
    assert sw.to_host() is sw


# ---- 4. shapes, types and views

def masked():
    return np.ma.masked_array(np.zeros((4, 8), np.float16), mask=False)


BAD = [  # (what, make the input, exception, message)
    ("1-D", lambda: np.zeros(8, np.float16), ValueError, r"dense must be 2-D \[M, K\] or 3-D \[batch, M, K\]"),
    ("4-D", lambda: np.zeros((2, 2, 4, 8), np.float16), ValueError, r"2-D \[M, K\] or 3-D .*got shape \(2, 2, 4, 8\)"),
    ("0-D", lambda: np.array(1.0, np.float16), ValueError, r"must be 2-D .*got shape \(\)"),
    ("list", lambda: [[1.0, 0.0, 0.0, 0.0]], TypeError, "dense must be a numpy or cupy array, got list"),
    ("None", lambda: None, TypeError, "numpy or cupy array, got NoneType"),
    ("float", lambda: 1.5, TypeError, "numpy or cupy array, got float"),
    ("masked", masked, TypeError, "numpy or cupy array, got MaskedArray"),
    ("int16", lambda: np.zeros((4, 8), np.int16), TypeError, r"float16, bfloat16 .*got int16"),
    ("float64", lambda: np.zeros((4, 8)), TypeError, "got float64"),
    ("complex64", lambda: np.zeros((4, 8), np.complex64), TypeError, "got complex64"),
    ("complex128", lambda: np.zeros((4, 8), np.complex128), TypeError, "got complex128"),
    ("bool", lambda: np.zeros((4, 8), bool), TypeError, "got bool"),
    ("object", lambda: np.zeros((4, 8), object), TypeError, "got object"),
    ("big-endian", lambda: np.zeros((4, 8), ">f2"), TypeError, "native byte order, got >f2"),
    ("uint8", lambda: np.zeros((4, 8), np.uint8), TypeError, "got uint8"),
]


@pytest.mark.parametrize("call", [cs.prune_2to4, cs.compress])
@pytest.mark.parametrize("what,make,error,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_gets_a_clear_error(call, what, make, error, message):
    with pytest.raises(error, match=message):
        call(make())


EMPTY = [(0, 8), (4, 0), (0, 0), (0, 4, 8), (2, 0, 8), (2, 4, 0)]


@pytest.mark.parametrize("shape", EMPTY)
def test_empty_compress_refused_prune_returns_empty(shape):
    dense = np.zeros(shape, np.float16)
    with pytest.raises(ValueError, match=r"dense must be (a )?non-empty"):
        cs.compress(dense)
    pruned = cs.prune_2to4(dense)
    assert pruned.shape == shape and pruned.dtype == dense.dtype


def test_bad_layouts():
    dense = np.zeros((4, 8), np.float16)
    with pytest.raises(ValueError, match="layout 'sm70' must be one of"):
        cs.compress(dense, layout="sm70")
    with pytest.raises(ValueError, match="layout 80 must be one of"):
        cs.compress(dense, layout=80)
    with pytest.raises(ValueError, match="a batch of matrices compresses for layout 'sm80'"):
        cs.compress(np.zeros((2, 4, 8), np.float16), layout="sm90")


VIEWS = {"transposed": lambda a: a.T.copy().T, "every other column": lambda a: np.repeat(a, 2, 1)[:, ::2],
         "reversed rows": lambda a: a[::-1].copy()[::-1], "fortran": np.asfortranarray,
         "offset slice": lambda a: np.pad(a, ((1, 0), (3, 0)))[1:, 3:]}


@pytest.mark.parametrize("dtype", FLOATS + [np.int8])
@pytest.mark.parametrize("view", VIEWS)
def test_non_contiguous_views_work_like_the_contiguous_copy(dtype, view):
    rng = np.random.default_rng(6)
    dense = (rng.integers(-50, 50, (37, 70)) if dtype == np.int8 else rng.standard_normal((37, 70))).astype(dtype)
    odd = VIEWS[view](dense)
    assert not odd.flags.c_contiguous and np.array_equal(odd, dense)
    pruned = cs.prune_2to4(odd)
    np.testing.assert_array_equal(pruned.view(np.uint8), cs.prune_2to4(dense).view(np.uint8))
    a, b = cs.compress(VIEWS[view](pruned)), cs.compress(pruned)
    np.testing.assert_array_equal(a.values.view(np.uint8), b.values.view(np.uint8))
    np.testing.assert_array_equal(a.metadata, b.metadata)


@pytest.mark.parametrize("shape", [(1, 1), (3, 6), (5, 130), (33, 4097)])
def test_k_not_a_multiple_of_the_group_is_padded(shape):
    rng = np.random.default_rng(7)
    for dtype in FLOATS:
        pruned = cs.prune_2to4(rng.standard_normal(shape).astype(dtype))
        sw = cs.compress(pruned)
        assert sw.shape == shape and sw.padded_shape[1] % 128 == 0
        np.testing.assert_array_equal(sw.to_dense().view(np.uint8), pruned.view(np.uint8))


# ---- 5. cs.matmul and the other device calls: every rule that needs no GPU is checked
# before anything touches CUDA (on a machine without a GPU, the clear error, not CuPy's
# cudaErrorInsufficientDriver from inside the launch path)

def device_array(shape, dtype):
    """A CuPy array: zeros on a GPU; without one, a view of memory never read (the calls
    below must refuse it before touching CUDA)."""
    import cupy

    if HAS_GPU:
        return cupy.zeros(shape, dtype)
    dtype = np.dtype(dtype)
    memory = cupy.cuda.UnownedMemory(0x10000, max(int(np.prod(shape)) * dtype.itemsize, 1), None, 0)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))


def device_weight(m=64, k=128, dtype=np.float16, batch=None):
    host = cs.compress(np.zeros((m, k) if batch is None else (batch, m, k), dtype), layout="sm80")
    if HAS_GPU:
        return host.to_device() if batch is None else dataclasses.replace(
            host, values=device_array(host.values.shape, host.values.dtype),
            metadata=device_array(host.metadata.shape, host.metadata.dtype))
    return dataclasses.replace(host, values=device_array(host.values.shape, host.values.dtype),
                               metadata=device_array(host.metadata.shape, host.metadata.dtype))


@pytest.fixture
def before_cuda(monkeypatch):
    """cs.matmul's first CUDA work (graphs.Temporaries: the current stream) fails the test,
    so a check that comes after it fails here on a machine with a GPU too."""
    def touched(*_, **__):
        raise AssertionError("cs.matmul reached graphs.Temporaries (CUDA) before refusing the call")
    monkeypatch.setattr(graphs, "Temporaries", touched)


MATMUL_BAD = [  # (id, sw (None: a device weight), x (None: a device [128, 8]), options, error, message)
    ("sw None", lambda: None, None, {}, TypeError, r"sw must be a cutlass_sparse\.SparseMatrix .*got NoneType"),
    ("sw ndarray", lambda: np.zeros((64, 128), np.float16), None, {}, TypeError,
     r"sw must be a cutlass_sparse\.SparseMatrix .*got ndarray"),
    ("sw on the host", lambda: cs.compress(np.zeros((64, 128), np.float16)), None, {}, TypeError,
     r"sw holds host \(numpy\) arrays; call sw\.to_device\(\)"),
    ("x numpy", None, lambda: np.zeros((128, 8), np.float16), {}, TypeError,
     r"x is a numpy array in host memory; matmul needs a device array"),
    ("x None", None, lambda: None, {}, TypeError, r"x must be a device array .*got NoneType"),
    ("x list", None, lambda: [[1.0]], {}, TypeError, r"x must be a device array .*got list"),
    ("wrong K", None, lambda: device_array((64, 8), np.float16), {}, ValueError,
     r"x has 64 rows, but sw has K = 128 columns \(x must be \[K, N\] = \[128, N\]\)"),
    ("wrong K 3-D", None, lambda: device_array((2, 64, 8), np.float16), {}, ValueError,
     r"x has 64 rows per batch, but sw has K = 128 columns \(x must be \[batch, 128, N\]\)"),
    ("wrong dtype", None, lambda: device_array((128, 8), np.float32), {}, TypeError,
     "x has dtype float32, but sw is float16"),
    ("x 1-D", None, lambda: device_array((128,), np.float16), {}, ValueError, r"x must be 2-D \[K, N\]"),
    ("x N=0", None, lambda: device_array((128, 0), np.float16), {}, ValueError, "x has N = 0 columns"),
    ("x batch 0", None, lambda: device_array((0, 128, 8), np.float16), {}, ValueError, "x has a batch of 0"),
    ("split_k -1", None, None, {"split_k": -1}, ValueError, "split_k must be an integer >= 1, got -1"),
    ("split_k 0", None, None, {"split_k": 0}, ValueError, "split_k must be an integer >= 1, got 0"),
    ("split_k 1.5", None, None, {"split_k": 1.5}, ValueError, r"split_k must be an integer >= 1, got 1\.5"),
    ("split_k_mode", None, None, {"split_k": 2, "split_k_mode": "tree"}, ValueError,
     "split_k_mode 'tree' must be 'serial' or 'parallel'"),
    ("split_k batched", None, lambda: device_array((2, 128, 8), np.float16), {"split_k": 2}, ValueError,
     "split_k cannot be combined with a batched x"),
    ("activation", None, None, {"activation": "nope"}, ValueError, "activation 'nope' is not one of"),
    ("activation list", None, None, {"activation": []}, ValueError, r"activation \[\] is not one of"),
    ("leaky_slope str", None, None, {"activation": "leaky_relu", "leaky_slope": "0.1"}, TypeError,
     "leaky_slope must be a real number, got str"),
    ("leaky_slope nan", None, None, {"activation": "leaky_relu", "leaky_slope": NAN}, ValueError,
     "leaky_slope must be finite"),
    ("out_dtype", None, None, {"out_dtype": "nope"}, ValueError,
     r"out_dtype 'nope' is not a dtype the kernels write: f16 inputs give one of \('f16', 'f32'\)"),
    ("out_dtype list", None, None, {"out_dtype": []}, ValueError, r"out_dtype \[\] is not a dtype"),
    ("out_dtype bf16", None, None, {"out_dtype": "bf16"}, ValueError, "out_dtype 'bf16': f16 inputs give one of"),
    ("family", None, None, {"family": "sm70"}, ValueError, "family 'sm70' must be 'sm80' or 'sm90'"),
    ("family of the other layout", None, None, {"family": "sm90"}, ValueError,
     r"sw is compressed in the 'sm80' layout; .*sw\.to_layout\('sm90'\)"),
    ("config", None, None, {"config": "nope"}, ValueError, "config: no configuration named 'nope' in catalog 'sm80'"),
    ("config int", None, None, {"config": 3}, TypeError, "config must be a configuration name .*got int"),
    ("info", None, None, {"info": []}, TypeError, "info must be a dict .*got list"),
    ("alpha", None, None, {"alpha": "2"}, TypeError, "alpha must be a real number, got str"),
    ("beta", None, None, {"beta": None}, TypeError, "beta must be a real number, got NoneType"),
    ("beta without c", None, None, {"beta": 1.0}, ValueError, "beta is non-zero but c is None"),
    ("c numpy", None, None, {"beta": 1.0, "c": np.zeros((64, 8), np.float16)}, TypeError,
     r"c is a numpy array in host memory; matmul needs a device array .*cupy\.asarray\(c\)"),
    ("c shape", None, None, {"beta": 1.0, "c": lambda: device_array((64, 9), np.float16)}, ValueError,
     r"c must be \[64, 8\] of dtype float16, got \(64, 9\) float16"),
    ("out shape", None, None, {"out": lambda: device_array((8, 64), np.float16)}, ValueError,
     r"out must be \[64, 8\] of dtype float16, got \(8, 64\) float16"),
    ("out dtype", None, None, {"out": lambda: device_array((64, 8), np.float32)}, ValueError,
     r"out must be \[64, 8\] of dtype float16, got \(64, 8\) float32"),
    ("out numpy", None, None, {"out": np.zeros((64, 8), np.float16)}, TypeError, "out is a numpy array in host memory"),
    ("bias shape", None, None, {"bias": lambda: device_array((65,), np.float16)}, ValueError,
     r"bias of shape \(65,\) must be \[64\] or \[64, 1\] \(one per output row\) or \[1, 8\]"),
    ("bias dtype", None, None, {"bias": lambda: device_array((64,), np.float32)}, TypeError,
     "bias has dtype float32; it must have the output dtype float16"),
    ("workspace numpy", None, None, {"workspace": np.zeros(64, np.uint8)}, TypeError,
     "workspace is a numpy array in host memory"),
    ("x of a batch of weights", lambda: device_weight(batch=2), lambda: device_array((3, 128, 8), np.float16), {},
     ValueError, r"must be \[2, K, N\] \(one per matrix of sw\)"),
]


@pytest.mark.parametrize("what,make_sw,make_x,options,error,message", MATMUL_BAD, ids=[b[0] for b in MATMUL_BAD])
def test_matmul_refuses_bad_arguments_before_cuda(before_cuda, what, make_sw, make_x, options, error, message):
    sw = device_weight() if make_sw is None else make_sw()
    x = device_array((128, 8), np.float16) if make_x is None else make_x()
    options = {k: v() if callable(v) else v for k, v in options.items()}
    with within(1.0), pytest.raises(error, match=message):
        cs.matmul(sw, x, **options)


def test_matmul_checks_sw_then_x_then_options(before_cuda):
    host_x = np.zeros((128, 8), np.float16)
    with pytest.raises(TypeError, match="sw must be a cutlass_sparse.SparseMatrix"):
        cs.matmul(None, host_x, split_k=-1, activation="nope")
    with pytest.raises(TypeError, match="x is a numpy array"):
        cs.matmul(device_weight(), host_x, split_k=-1, activation="nope")
    with pytest.raises(ValueError, match="x has 64 rows"):
        cs.matmul(device_weight(), device_array((64, 8), np.float16), split_k=-1)
    with pytest.raises(ValueError, match="split_k must be"):
        cs.matmul(device_weight(), device_array((128, 8), np.float16), split_k=-1, info=[])


def test_plan_and_workspace_size_refuse_bad_options_before_cuda(before_cuda):
    sw, x = device_weight(), device_array((128, 8), np.float16)
    with pytest.raises(ValueError, match="activation 'nope' is not one of"):
        cs.plan(sw, x, activation="nope")
    with pytest.raises(ValueError, match="split_k must be an integer >= 1"):
        cs.workspace_size(sw, x, split_k=0)
    with pytest.raises(ValueError, match="config: no configuration named 'nope'"):
        cs.workspace_size(sw, x, config="nope")


def test_torch_cpu_tensors_are_named_where_a_device_array_is_needed(before_cuda):
    torch = pytest.importorskip("torch")
    sw = device_weight()
    x = torch.zeros(128, 8, dtype=torch.float16)
    rule = r"\(a torch CUDA tensor, a cupy\.ndarray, or any __cuda_array_interface__ / DLPack GPU array\): use x\.cuda\(\)"
    with pytest.raises(TypeError, match="x is a torch tensor on the CPU; matmul needs a device array " + rule):
        cs.matmul(sw, x)
    for lead in [(8,), (2, 4)]:
        with pytest.raises(TypeError, match="x is a torch tensor on the CPU; linear needs a device array " + rule):
            cs.linear(torch.zeros(*lead, 128, dtype=torch.float16), sw)
    with pytest.raises(TypeError, match="x is a torch tensor on the CPU; plan needs"):
        cs.plan(sw, x)
    with pytest.raises(TypeError, match="x is a torch tensor on the CPU; workspace_size needs"):
        cs.workspace_size(sw, x)
    with pytest.raises(TypeError, match=r"bias is a torch tensor on the CPU; matmul needs .*use bias\.cuda\(\)"):
        cs.matmul(sw, device_array((128, 8), np.float16), bias=torch.zeros(64, dtype=torch.float16))
    with pytest.raises(TypeError, match="sw must be a cutlass_sparse.SparseMatrix"):   # sw first
        cs.matmul(None, x)


# ---- 6. the quantize calls name their argument, their own function and the rule

@pytest.mark.parametrize("call", [cs.quantize_fp8, cs.quantize_int8])
def test_quantize_weight_refuses_host_arrays_naming_w(call):
    torch = pytest.importorskip("torch")
    w = cs.prune_2to4(np.random.default_rng(8).standard_normal((64, 128)).astype(np.float16))
    name = call.__name__
    with pytest.raises(TypeError, match=rf"w is a torch tensor on the CPU; {name} needs a device array \(a torch "
                                        r"CUDA tensor, a cupy\.ndarray.*use w\.cuda\(\)"):
        call(torch.from_numpy(w))
    with pytest.raises(TypeError, match=rf"w is a numpy array in host memory; {name} needs a device array .*"
                                        r"cupy\.asarray\(w\)"):
        call(w)
    with pytest.raises(TypeError, match=r"w must be a device array .*got NoneType"):
        call(None)


@pytest.mark.parametrize("call", [cs.quantize_activations_fp8, cs.quantize_activations_int8])
def test_quantize_activations_name_their_own_function(call):
    x = np.zeros((8, 128), np.float16)
    with pytest.raises(TypeError, match=rf"x is a numpy array in host memory; {call.__name__} needs a device array"):
        call(x)
    with pytest.raises(TypeError, match=rf"x is a numpy array in host memory; {call.__name__} needs"):
        call(x.reshape(2, 4, 128))   # [..., K]
    with pytest.raises(TypeError, match=r"x must be a device array .*got list"):
        call([[1.0]])


# ---- 7. layouts and configurations: the argument and the values allowed

@pytest.mark.parametrize("layout", ["sm70", None, "", "SM80", 80])
def test_to_layout_names_the_layouts_allowed(layout):
    sw = cs.compress(np.zeros((4, 16), np.float16), layout="sm80")
    with pytest.raises(ValueError, match=rf"layout {re.escape(repr(layout))} must be one of \('sm80', 'sm90'\)"):
        sw.to_layout(layout)
    assert sw.to_layout("sm80") is sw


@pytest.mark.parametrize("layout", ["", "auto", "SM80", 80, "sm70"])
@pytest.mark.parametrize("shape", [(4, 16), (2, 4, 16)])
def test_compress_refuses_a_layout_that_is_not_one(layout, shape):
    with pytest.raises(ValueError, match=rf"layout {re.escape(repr(layout))} must be one of \('sm80', 'sm90'\), "
                                         r"or None for the default"):
        cs.compress(np.zeros(shape, np.float16), layout=layout)
    assert cs.compress(np.zeros(shape, np.float16), layout=None).layout == "sm80"   # None: the default


def test_compress_sm90_names_the_type_it_refuses():
    with pytest.raises(TypeError, match=r"layout 'sm90' takes fp16/bf16, not tf32 \(float32\): compress this "
                                        r"matrix for layout='sm80'"):
        cs.compress(np.zeros((4, 16), np.float32), layout="sm90")


@pytest.mark.parametrize("config", [None, 123, b"f16", ["f16"]])
def test_emit_source_names_config(config):
    with pytest.raises(TypeError, match=rf"config must be a SparseGemmConfig or a configuration's procedural name "
                                        rf"\(str\), got {type(config).__name__}"):
        cs.emit_source(config)
    with pytest.raises(ValueError, match="config: no configuration named 'nope'"):
        cs.emit_source("nope")


def test_alpha_beta_and_leaky_slope_take_any_real_number_as_before():
    """0-d arrays (and NumPy scalars) of a real type were taken through float() before session
    37's checks: they still are; bools, strings, complex numbers and larger arrays are not."""
    from cutlass_sparse.api.options import check_number

    for value in (1, 1.5, np.float32(2), np.int64(3), np.array(0.5), np.array(2, dtype=np.uint8)):
        check_number(value, "alpha")
    for value in (True, np.bool_(False), np.array(True), "1.5", 1j, np.array([1.0]), None):
        with pytest.raises(TypeError, match="alpha must be a real number"):
            check_number(value, "alpha")
