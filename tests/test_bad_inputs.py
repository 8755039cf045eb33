"""Bad and odd library inputs to prune_2to4, compress and SparseMatrix: each gets a result
or a clear error (TypeError/ValueError naming the argument and the rule, RuntimeError for
a missing GPU), quickly and before allocating. CPU only."""
import contextlib
import signal
import sys
import time
import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.formats import patterns, prune, sm80_layout
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
