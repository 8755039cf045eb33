"""torch CUDA tensors in and out, on torch's current stream; the eager plan cache after
buffers are freed and reallocated. Marked gpu."""
import re

import pytest

import cutlass_sparse as cs

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
FAMILIES = ["sm80", "sm90"]


@pytest.fixture(autouse=True)
def needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")


def family_ok(family):
    if family == "sm90" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")


def relative_error(y, ref):
    return float((y.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_torch_in_torch_out(family, dtype):
    family_ok(family)
    g = torch.Generator(device="cuda").manual_seed(1)
    w = cs.prune_2to4(torch.randn(256, 512, device="cuda", generator=g).to(dtype))
    assert isinstance(w, torch.Tensor) and w.is_cuda and w.dtype == dtype
    sw = cs.compress(w, layout=family)
    x = torch.randn(512, 48, device="cuda", generator=g).to(dtype)
    y = cs.matmul(sw, x)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == (256, 48)
    assert relative_error(y, w.float() @ x.float()) < 2e-2
    out = torch.empty(256, 48, device="cuda", dtype=dtype)
    assert cs.matmul(sw, x, out=out) is out
    tokens = torch.randn(7, 512, device="cuda", generator=g).to(dtype)      # odd token count
    bias = torch.randn(256, device="cuda", generator=g).to(dtype)
    z = cs.linear(tokens, sw, bias=bias, activation="relu")
    assert isinstance(z, torch.Tensor) and z.shape == (7, 256)
    assert relative_error(z, torch.relu(tokens.float() @ w.float().T + bias.float())) < 2e-2
    p = cs.plan(sw, x)
    assert relative_error(p(x), w.float() @ x.float()) < 2e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_runs_on_torchs_current_stream(family):
    """Work queued on a non-default torch stream behind a long kernel: the result is right
    once that stream alone is synchronized (it ran there, ordered after the producer)."""
    family_ok(family)
    g = torch.Generator(device="cuda").manual_seed(2)
    w = cs.prune_2to4(torch.randn(1024, 1024, device="cuda", generator=g).half())
    sw = cs.compress(w, layout=family)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        big = torch.randn(4096, 4096, device="cuda", generator=g).half()
        for _ in range(20):                # keep the side stream busy for a while
            big = big @ big * 0.01
        x = torch.randn(1024, 64, device="cuda", generator=g).half() + big[:1024, :64] * 0
        y = cs.matmul(sw, x)
    side.synchronize()
    assert relative_error(y, w.float() @ x.float()) < 2e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_plan_cache_hit_after_buffers_are_freed_and_reallocated(family):
    import cupy

    family_ok(family)
    rng = cupy.random.default_rng(3)
    w = cs.prune_2to4(rng.standard_normal((512, 256), dtype=cupy.float32).astype(cupy.float16))
    sw = cs.compress(w, layout=family)
    for round_ in range(4):
        x = rng.standard_normal((256, 40), dtype=cupy.float32).astype(cupy.float16)
        spacer = cupy.empty(round_ * 4096 + 7, dtype=cupy.uint8)   # moves the next allocations
        y = cs.matmul(sw, x)
        ref = w.astype(cupy.float32) @ x.astype(cupy.float32)
        assert float(cupy.linalg.norm(y.astype(cupy.float32) - ref) / cupy.linalg.norm(ref)) < 2e-2
        del x, y, spacer
        cupy.get_default_memory_pool().free_all_blocks()


@pytest.mark.parametrize("family", FAMILIES)
def test_what_a_torch_call_allocates_comes_from_torchs_allocator(family):
    """The padded D of an odd N (sm90) or the staged copy of an offset view, first call and
    repeated: no block of CuPy's pool is held after the call, torch's allocator holds the
    result, and the results are right."""
    import cupy

    family_ok(family)
    g = torch.Generator(device="cuda").manual_seed(5)
    w = cs.prune_2to4(torch.randn(512, 1024, device="cuda", generator=g).half())
    sw = cs.compress(w, layout=family)
    wide = torch.randn(1024, 16, device="cuda", generator=g).half()
    pool = cupy.get_default_memory_pool()
    for x in (torch.randn(1024, 7, device="cuda", generator=g).half(), wide[:, 3:10]):   # odd N; an offset view
        for _ in range(2):   # the full path, then the eager one
            torch.cuda.synchronize()
            cupy_before, torch_before = pool.used_bytes(), torch.cuda.memory_allocated()
            y = cs.matmul(sw, x)
            torch.cuda.synchronize()
            assert isinstance(y, torch.Tensor) and y.shape == (512, 7)
            assert pool.used_bytes() == cupy_before, "CuPy's pool holds memory after a torch call"
            assert torch.cuda.memory_allocated() - torch_before >= 512 * 7 * 2, "D is not in torch's allocator"
            assert relative_error(y, w.float() @ x.float()) < 2e-2
            del y


def test_torch_memory_for_another_stream_never_takes_a_block_torch_still_uses():
    """A block torch's allocator freed on its current stream goes to the next allocation
    on that stream at once (kernels queued there may still use it). CuPy work on another
    stream inside a torch call (build_ahead's side stream, under torch_memory.for_stream)
    must not get it: this once corrupted the operands of a busy torch stream (a NaN in
    test_runs_on_torchs_current_stream, 2 of about 20 suite runs)."""
    import cupy

    from cutlass_sparse.launch import torch_memory

    device = torch.cuda.current_device()
    busy = torch.cuda.Stream()
    side = cupy.cuda.Stream(non_blocking=True)
    with torch.cuda.stream(busy), torch_memory.using(device):
        for on_side in (True, False):
            freed = torch.empty(24576, dtype=torch.uint8, device="cuda")
            ptr = freed.data_ptr()
            del freed   # freed on `busy`
            if on_side:
                with side, torch_memory.for_stream(device, side.ptr):
                    taken = cupy.empty(24576, dtype=cupy.uint8)
            else:   # the control: for torch's own stream the block comes back (the check above can fail)
                taken = cupy.empty(24576, dtype=cupy.uint8)
            assert (taken.data.ptr == ptr) == (not on_side)
            del taken
    torch.cuda.synchronize()


@pytest.mark.parametrize("family", FAMILIES)
def test_a_plan_serves_torch_operands_it_cannot_launch_directly(family):
    """An x of the planned shape and strides at an address the kernel cannot read (one
    element in), with and without out: the plan stages it (cs.matmul's path) and returns
    torch; an x of another shape is refused, naming the plan's."""
    family_ok(family)
    g = torch.Generator(device="cuda").manual_seed(6)
    w = cs.prune_2to4(torch.randn(256, 512, device="cuda", generator=g).half())
    sw = cs.compress(w, layout=family)
    p = cs.plan(sw, torch.randn(512, 48, device="cuda", generator=g).half())
    flat = torch.randn(512 * 48 + 1, device="cuda", generator=g).half()
    x = flat[1:].view(512, 48)   # planned shape and strides, 2 bytes past an aligned address
    ref = w.float() @ x.float()
    y = p(x)
    assert isinstance(y, torch.Tensor) and y.shape == (256, 48) and relative_error(y, ref) < 2e-2
    out = torch.empty(256, 48, device="cuda", dtype=torch.float16)
    assert p(x, out=out) is out and relative_error(out, ref) < 2e-2
    assert p.direct   # what the refusal below is about: a direct plan serves its own x's shape only
    with pytest.raises(ValueError, match="make another plan"):
        p(torch.randn(512, 40, device="cuda", generator=g).half(), out=out)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("lead", [(2, 5), (4, 1, 3), ()], ids=["batch-seq", "three-leading", "one-token"])
def test_linear_takes_leading_dimensions_as_nn_linear_does(family, lead):
    """x [..., K] (a batch of sequences, one token [K]) gives [..., features], torch and
    CuPy alike, checked against dense; the second call is an eager-path hit (sm90)."""
    import cupy

    from cutlass_sparse.api import eager, eager_keys, matmul as api_matmul

    family_ok(family)
    g = torch.Generator(device="cuda").manual_seed(5)
    w = cs.prune_2to4(torch.randn(256, 512, device="cuda", generator=g).half())
    sw = cs.compress(w, layout=family)
    x = torch.randn(*lead, 512, device="cuda", generator=g).half()
    bias = torch.randn(256, device="cuda", generator=g).half()
    ref = torch.nn.functional.linear(x.float(), w.float())
    for _ in range(2):
        y = cs.linear(x, sw)
        assert isinstance(y, torch.Tensor) and tuple(y.shape) == (*lead, 256)
        assert relative_error(y, ref) < 2e-2
    if family == "sm90":   # the folded call's key is remembered: the next call is one lookup
        found = eager_keys.linear_key(x.reshape(-1, 512), sw, api_matmul._DEFAULT_OPTIONS)
        assert found is not None and eager.lookup(found[0]) is not None
    z = cs.linear(x, sw, bias=bias, activation="relu")
    assert relative_error(z, torch.relu(ref + bias.float())) < 2e-2
    y_cupy = cs.linear(cupy.from_dlpack(x), sw)
    assert isinstance(y_cupy, cupy.ndarray) and y_cupy.shape == (*lead, 256)
    assert relative_error(torch.from_dlpack(y_cupy), ref) < 2e-2


@pytest.mark.parametrize("case", [(256, 7, 512, "relu"), (256, 12, 512, "identity"), (192, 40, 256, "silu")],
                         ids=["7", "12", "40"])
def test_a_cupy_linear_hit_is_what_the_full_path_gives(case):
    """cs.linear on a CuPy x (sm90): a repeated call is an eager hit launched from
    pointers (eager.cupy_linear), and its result has the full path's shape, strides and
    values, for token counts whose D is column-major (7, 12) and row-major (40)."""
    import cupy

    from cutlass_sparse.api import eager, eager_keys, matmul as api_matmul

    family_ok("sm90")
    features, tokens, k, activation = case
    g = torch.Generator(device="cuda").manual_seed(11)
    w = cs.prune_2to4(torch.randn(features, k, device="cuda", generator=g).half())
    sw = cs.compress(w)
    x = cupy.from_dlpack(torch.randn(tokens, k, device="cuda", generator=g).half())
    first = cs.linear(x, sw, activation=activation)
    found = eager_keys.linear_key(x, sw, api_matmul._activation_options(activation))
    assert found is not None and eager.lookup(found[0]) is not None   # the miss was remembered
    hit = eager.cupy_linear(x, sw, api_matmul._activation_options(activation))
    assert hit is not None and cs.linear(x, sw, activation=activation) is not first
    assert (hit.shape, hit.strides, hit.dtype) == (first.shape, first.strides, first.dtype)
    cupy.cuda.get_current_stream().synchronize()
    ref = torch.nn.functional.linear(torch.from_dlpack(x).float(), w.float())
    ref = {"relu": torch.relu, "silu": torch.nn.functional.silu}.get(activation, lambda v: v)(ref)
    assert relative_error(torch.from_dlpack(hit), ref) < 2e-2
    assert bool((hit == first).all())


@pytest.mark.parametrize("case", [(256, 7, 512, "relu", torch.float16), (256, 7, 512, "relu", torch.bfloat16),
                                  (192, 40, 256, "silu", torch.float16)], ids=["f16-7", "bf16-7", "f16-40"])
def test_a_biased_linear_runs_the_eager_path(case):
    """cs.linear(x, sw, bias=b) on sm90: the bias rides the epilogue as a float32 vector
    (no C), and a repeated call is an eager-path hit launched from pointers, with whatever
    bias tensor it is given (another one at another address, an [M, 1] view)."""
    from cutlass_sparse.api import eager, eager_keys, matmul as api_matmul

    family_ok("sm90")
    features, tokens, k, activation, dtype = case
    g = torch.Generator(device="cuda").manual_seed(11)
    w = cs.prune_2to4(torch.randn(features, k, device="cuda", generator=g).to(dtype))
    sw = cs.compress(w, layout="sm90")
    x = torch.randn(tokens, k, device="cuda", generator=g).to(dtype)
    act = {"relu": torch.relu, "silu": torch.nn.functional.silu}[activation]
    info = {}
    cs.linear(x, sw, bias=torch.zeros(features, device="cuda", dtype=dtype), activation=activation, info=info)
    assert re.search(rf"_{activation}_scaled(_inflight)?_lean_noc$", info["config"])   # ours in every 16-bit tile
    biases = [torch.randn(features, device="cuda", generator=g).to(dtype) for _ in range(3)]
    for i, b in enumerate(biases):
        y = cs.linear(x, sw, bias=b, activation=activation)
        assert relative_error(y, act(x.float() @ w.float().T + b.float())) < 2e-2, i
        found = eager_keys.linear_key(x, sw, api_matmul._activation_options(activation), b)
        assert found is not None and eager.lookup(found[0]) is not None   # the next call is a hit
    column = biases[0].reshape(features, 1)
    y = cs.linear(x, sw, bias=column, activation=activation)
    assert relative_error(y, act(x.float() @ w.float().T + column.float().T)) < 2e-2


def test_a_kept_bias_vector_follows_in_place_changes():
    """The eager path keeps a bias's float32 vector per tensor and version: an in-place
    change to the bias (a new version) is seen by the next call."""
    family_ok("sm90")
    g = torch.Generator(device="cuda").manual_seed(12)
    w = cs.prune_2to4(torch.randn(256, 512, device="cuda", generator=g).half())
    sw = cs.compress(w, layout="sm90")
    x = torch.randn(7, 512, device="cuda", generator=g).half()
    b = torch.randn(256, device="cuda", generator=g).half()
    for _ in range(3):   # full path, then hits that keep the vector
        y = cs.linear(x, sw, bias=b, activation="relu")
    b.mul_(-2.0)
    y = cs.linear(x, sw, bias=b, activation="relu")
    assert relative_error(y, torch.relu(x.float() @ w.float().T + b.float())) < 2e-2
