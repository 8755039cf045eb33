"""Programmatic dependent launch of the sm90 GEMM (launch.pdl) on the GPU: a GEMM
that reads what the GEMM before it wrote gets the same bits whether it may start early
or not, eagerly and replayed from a CUDA graph. Marked gpu."""
import sys
from pathlib import Path

import pytest

import cutlass_sparse as cs
from cutlass_sparse.launch import pdl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gpu_epilogue_split_k import assert_close, expect  # noqa: E402
from test_gpu_matmul import random_operands  # noqa: E402

pytestmark = pytest.mark.gpu


def _sm90_or_skip():
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")


def _chain(n: int):
    """up [512, 256] then down [256, 512] on up's output, planned; Params by value from the
    second call on (the first's setup has landed)."""
    import cupy

    w_up, sw_up, x = random_operands(512, n, 256, "f16", "row", seed=31, family="sm90")
    w_down, sw_down, _ = random_operands(256, n, 512, "f16", "row", seed=32, family="sm90")
    h = cupy.empty((512, n), dtype=cupy.float16)
    y = cupy.empty((256, n), dtype=cupy.float16)
    up, down = cs.plan(sw_up, x, activation="relu"), cs.plan(sw_down, h)
    up(x, out=h)
    down(h, out=y)
    cupy.cuda.Device().synchronize()
    return (w_up, w_down), x, h, y, lambda: (up(x, out=h), down(h, out=y))


@pytest.mark.parametrize("n", [16, 64])
def test_dependent_gemms_give_the_same_bits_with_programmatic_launch(n):
    import cupy

    _sm90_or_skip()
    (w_up, w_down), x, h, y, step = _chain(n)
    rng = cupy.random.default_rng(33)
    try:
        for _ in range(20):
            x[...] = rng.standard_normal(x.shape, dtype=cupy.float32).astype(cupy.float16)
            results = []
            for enabled in (False, True):
                pdl.ENABLED = enabled
                h.fill(0)
                y.fill(float("nan"))
                step()
                results.append(y.copy())
            cupy.testing.assert_array_equal(results[0], results[1])
    finally:
        pdl.ENABLED = True
    hidden = expect(w_up, x, activation="relu").astype(cupy.float16)
    assert_close(y, expect(w_down, hidden), "f16")


def test_programmatic_chain_replayed_from_a_cuda_graph():
    import cupy

    _sm90_or_skip()
    assert pdl.ENABLED
    (w_up, w_down), x, h, y, step = _chain(16)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        step()   # Params for these pointers built before capture: the graph holds the GEMMs alone
        stream.synchronize()
        stream.begin_capture()
        step()
        graph = stream.end_capture()
    rng = cupy.random.default_rng(34)
    for _ in range(3):
        with stream:   # the fills in the replay's stream order (a non-blocking stream skips the default one)
            x[...] = rng.standard_normal(x.shape, dtype=cupy.float32).astype(cupy.float16)
            h.fill(0)
            y.fill(float("nan"))
            graph.launch(stream)
        stream.synchronize()
        hidden = expect(w_up, x, activation="relu").astype(cupy.float16)
        assert_close(y, expect(w_down, hidden), "f16")


def test_only_launches_with_params_by_value_start_early():
    """A launch on Params the setup entry wrote reads them from global memory before the
    kernel's wait on the previous grid: it goes in plain stream order. A launch on a host
    copy passes them by value and may start early."""
    import cupy

    from cutlass_sparse.launch import sm90

    _sm90_or_skip()
    w, sw, x = random_operands(256, 32, 512, "f16", "row", seed=35, family="sm90")
    planned = cs.plan(sw, x)
    fam = planned.family_plan
    out = cupy.empty((256, 32), dtype=cupy.float16)
    pointers = (sw.values.data.ptr, sw.metadata_for(fam.atom_k).data.ptr, x.data.ptr, out.data.ptr, out.data.ptr)
    built = fam._build(pointers, None)
    assert not built.by_value
    cupy.cuda.Device().synchronize()   # the host copy of this shape's Params has landed
    copied = fam._from_host(pointers, sm90.NO_VECTORS, None)
    assert copied is not None and copied.by_value
    for ready in (built, copied):
        out.fill(float("nan"))
        fam.launch(ready)
        assert_close(out, expect(w, x), "f16")


def test_repeated_pointers_move_to_params_by_value():
    """The same pointers again leave the launch whose Params the first call's setup wrote
    on the device for Params by value once their host copy has arrived (only those may
    launch programmatically); both launches give the dense result. The shape is this
    test's own, so no earlier call has brought its Params to the host."""
    import cupy

    from cutlass_sparse.describe.problem import Problem
    from cutlass_sparse.plan import plans

    _sm90_or_skip()
    w, sw, x = random_operands(512, 72, 256, "f16", "row", seed=34, family="sm90")
    plan = plans.get(Problem.contiguous("sm90", 512, 72, 256))
    d = cupy.empty((512, 72), dtype=cupy.float16)
    pointers = (x.data.ptr, d.data.ptr, d.data.ptr)
    first = plan.ready(sw, pointers)
    assert not first.by_value
    plan.launch(first)
    cupy.cuda.Device().synchronize()
    assert_close(d, expect(w, x), "f16")
    again = plan.ready(sw, pointers)
    assert again.by_value and plan.ready(sw, pointers) is again
    d.fill(0)
    plan.launch(again)
    assert_close(d, expect(w, x), "f16")


def test_a_launch_made_again_follows_the_weight_the_pointers_and_the_stream():
    """A repeated call makes its last launch again (pdl.Again) only with the same weight,
    pointers and stream: another weight of the same shape in the same buffers, another
    out, and a capture on another stream each get their own launch, checked against
    dense. A capture that fired the other stream's launch would record nothing, and the
    replay would leave out as zeros."""
    import cupy

    _sm90_or_skip()
    w1, sw1, x = random_operands(256, 32, 512, "f16", "row", seed=36, family="sm90")
    w2, sw2, _ = random_operands(256, 32, 512, "f16", "row", seed=37, family="sm90")
    out, other = (cupy.empty((256, 32), dtype=cupy.float16) for _ in range(2))
    for sw, w, target in ((sw1, w1, out), (sw1, w1, out), (sw2, w2, out), (sw1, w1, out), (sw1, w1, other),
                          (sw2, w2, out), (sw2, w2, out)):
        for _ in range(3):   # the first builds, then by value once the host copy is in, then again
            target.fill(float("nan"))
            cs.matmul(sw, x, out=target)
            cupy.cuda.Device().synchronize()
            assert_close(target, expect(w, x), "f16")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:   # the last launch was this one's on the default stream
        stream.begin_capture()
        cs.matmul(sw2, x, out=out)
        graph = stream.end_capture()
        out.fill(0)
        graph.launch(stream)
        stream.synchronize()
    assert_close(out, expect(w2, x), "f16")


def test_a_plan_made_again_on_another_stream_is_captured_there():
    """cs.plan's last launch is made again only on its own stream: the same x and out
    captured on another stream are in the graph, and so are they when made again there."""
    import cupy

    _sm90_or_skip()
    w, sw, x = random_operands(256, 32, 512, "f16", "row", seed=38, family="sm90")
    out = cupy.empty((256, 32), dtype=cupy.float16)
    planned = cs.plan(sw, x)
    for _ in range(3):
        planned(x, out=out)
    cupy.cuda.Device().synchronize()
    assert planned._agains
    stream = cupy.cuda.Stream(non_blocking=True)
    for _ in range(2):   # first captured after the default stream's launch, then after its own
        with stream:
            stream.begin_capture()
            planned(x, out=out)
            graph = stream.end_capture()
            out.fill(0)
            graph.launch(stream)
            stream.synchronize()
        assert_close(out, expect(w, x), "f16")
