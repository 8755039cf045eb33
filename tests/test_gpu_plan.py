"""Planned calls on the GPU: same answer as cs.matmul, CUDA graph capture and replay,
several threads, a second device. Marked gpu."""
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import cutlass_sparse as cs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gpu_epilogue_split_k import assert_close, expect  # noqa: E402
from test_gpu_matmul import captured_and_replayed, random_operands  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("family", ["sm80", "sm90"])
def test_plan_matches_matmul_and_checks_inputs(family):
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    m, n, k = 256, 64, 512
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=21, family=family)
    bias = cupy.random.default_rng(22).standard_normal(m, dtype=cupy.float32).astype(cupy.float16)
    p = cs.plan(sw, x, bias=bias, activation="relu")
    assert p.direct
    out = cupy.empty((m, n), dtype=cupy.float16)
    for seed in (23, 24):
        x2 = cupy.random.default_rng(seed).standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        y = p(x2, out=out)
        assert y is out
        assert_close(y, expect(w, x2, bias_full=bias.astype(cupy.float32)[:, None], activation="relu"), "f16")
    if p.direct:   # a direct plan checks x against what it was made for
        with pytest.raises(ValueError, match="make another plan"):
            p(cupy.asfortranarray(x))
    # an out of the planned strides but another shape or dtype is never written past its end
    for wrong in (cupy.empty((m - 1, n), dtype=cupy.float16), cupy.empty((m, n), dtype=cupy.int16)):
        with pytest.raises((ValueError, TypeError), match="out"):
            p(x, out=wrong)


@pytest.mark.parametrize("family", ["sm80", "sm90"])
def test_a_plan_keeps_the_weight_it_was_made_with(family):
    """Arrays swapped into the caller's matrix after planning reach no call of the plan,
    direct (Params hold the old pointers) or not: every call multiplies by the weight
    as planned."""
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    w, sw, x = random_operands(256, 64, 512, "f16", "row", seed=25, family=family)
    _, other, _ = random_operands(256, 64, 512, "f16", "row", seed=26, family=family)
    planned = cs.plan(sw, x)
    out = cupy.empty((256, 64), dtype=cupy.float16)
    planned(x, out=out)
    sw.values, sw.metadata = other.values, other.metadata
    for _ in range(3):
        out.fill(0)
        assert_close(planned(x, out=out), expect(w, x), "f16")
        assert_close(planned(x), expect(w, x), "f16")   # D allocated by the plan


@pytest.mark.parametrize("family,warm", [("sm80", False), ("sm90", False), ("sm90", True)])
def test_plan_in_a_cuda_graph(family, warm):
    import cupy

    if family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    m, n, k = 256, 64, 512
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=31, family=family)
    p = cs.plan(sw, x, activation="gelu")
    assert p.direct
    out = cupy.zeros((m, n), dtype=cupy.float16)
    cupy.cuda.Device().synchronize()   # x and out were filled on the default stream, which S does not wait for
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        if warm:   # sm90: Params for (x, out) built before capture, so the graph holds the GEMM alone
            p(x, out=out)
        stream.begin_capture()
        p(x, out=out)
        graph = stream.end_capture()
        x[...] = cupy.random.default_rng(32).standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        graph.launch(stream)
        stream.synchronize()
    assert_close(out, expect(w, x, activation="gelu"), "f16")


def test_plan_of_a_k64_tile_captured_from_its_first_call():
    # 2048^3 runs a tile of K 64, which reads metadata converted from the stored atom: the
    # plan converts it when made, so a graph captured from the first call holds no
    # conversion (and no allocation for it).
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    m, n, k = 2048, 2048, 2048
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=33, family="sm90")
    p = cs.plan(sw, x)
    assert p.direct and p.family_plan.atom_k == 64 and sw.atom_k == 128 and sw.holds_metadata_for(64)
    out = cupy.zeros((m, n), dtype=cupy.float16)
    captured_and_replayed(lambda: p(x, out=out))
    assert_close(out, expect(w, x), "f16")


def test_calls_from_several_threads():
    import cupy

    m, n, k = 256, 64, 512
    w, sw, x = random_operands(m, n, k, "f16", "row", seed=41)
    want = expect(w, x)
    errors = []

    def work():
        try:
            with cupy.cuda.Stream(non_blocking=True) as s:
                for _ in range(20):
                    y = cs.matmul(sw, x)
                s.synchronize()
                assert_close(y, want, "f16")
        except Exception as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_staged_calls_from_several_threads_on_one_stream():
    """An odd N with a row-major x and an out stages both through buffers kept per stream,
    thread and role (launch.staging.KeptBuffers): four threads issuing on the same
    (default) stream, each its own x, never read one another's, and x's buffer is never
    D's (M == K gives them one size)."""
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    torch = pytest.importorskip("torch")
    m, n, k = 512, 7, 512   # M == K: the x and D staging buffers have one size
    w, sw, _ = random_operands(m, n, k, "f16", "row", seed=43, family="sm90")
    xs = [cupy.random.default_rng(50 + i).standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
          for i in range(4)]
    wants = [expect(w, x) for x in xs]
    results, errors = {}, []

    def work(i):   # torch tensors with an out of N = 7: the eager path stages x and D (launch_staged)
        try:
            x, out = torch.as_tensor(xs[i], device="cuda"), torch.empty((m, n), dtype=torch.float16, device="cuda")
            for _ in range(20):
                results[i] = cupy.asarray(cs.matmul(sw, x, out=out))
        except Exception as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    cupy.cuda.Device().synchronize()
    for i in range(4):
        assert_close(results[i], wants[i], "f16")


@pytest.mark.parametrize("family", ["sm80", "sm90"])
def test_second_device_gets_its_own_modules(family):
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    if family == "sm90" and cupy.cuda.Device(1).compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    w, sw, x = random_operands(128, 32, 128, "f16", "row", seed=51, family=family)
    with cupy.cuda.Device(1):
        w1 = cupy.asarray(w)
        x1 = cupy.asarray(x)
        sw1 = cs.compress(w1, layout=family)
        y1 = cs.matmul(sw1, x1)
    assert y1.device.id == 1
    np.testing.assert_array_equal(y1.get(), cs.matmul(sw, x).get())
