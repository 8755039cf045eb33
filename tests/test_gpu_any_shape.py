"""Every valid problem runs on the default path: a random sweep (tests/any_shape_cases.py)
of N from 1 to 4096, both x layouts, padded leading dimensions, offset views and user out
views, both dtypes and both families, each result checked against dense. Marked gpu."""
import sys
from pathlib import Path

import pytest

import cutlass_sparse as cs
from cutlass_sparse import reference
from cutlass_sparse.describe import dtypes

sys.path.insert(0, str(Path(__file__).resolve().parent))
import any_shape_cases  # noqa: E402
from test_gpu_matmul import TOLERANCE  # noqa: E402

pytestmark = pytest.mark.gpu
CASES = any_shape_cases.cases("sm80") + any_shape_cases.cases("sm90")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_valid_problem_runs_and_matches_dense(case):
    import cupy

    if case.family == "sm90" and cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    rng = cupy.random.default_rng(hash(case.id) % 2**31)
    np_dtype = dtypes.numpy_dtype(case.dtype)
    w = cs.prune_2to4(dtypes.from_float32(rng.standard_normal((case.m, case.k), dtype=cupy.float32), np_dtype))
    x_plain = dtypes.from_float32(rng.standard_normal((case.k, case.n), dtype=cupy.float32), np_dtype)
    x = any_shape_cases.stored(x_plain, case.x_store, case.layout)
    sw = cs.compress(w, layout=case.family)
    out = any_shape_cases.out_array(case, np_dtype)
    y = cs.matmul(sw, x, out=out)
    if out is not None:
        assert y is out
    assert y.shape == (case.m, case.n) and y.dtype == np_dtype
    err = reference.relative_error(y, reference.to_float32(w) @ reference.to_float32(x_plain))
    assert err <= TOLERANCE[case.dtype], f"relative error {err:.3e}"


def _torch_view(array):
    """A torch tensor over a CuPy array's memory, strides and offset kept (bf16 through int16 bits)."""
    import cupy
    import torch

    if array.dtype == cs.bfloat16:
        return torch.as_tensor(array.view(cupy.int16), device="cuda").view(torch.bfloat16)
    return torch.as_tensor(array, device="cuda")


# every case: an N = 1 call's D is an [M, 1] column, written column-major with CuPy and
# torch alike (Problem.layout_d)
TORCH_CASES = any_shape_cases.cases("sm90")


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_valid_problem_runs_with_torch_tensors(case):
    """The same problems with torch tensors over the same memory, each called twice: the
    first call takes the full path, the second the eager path (from the tensors' pointers,
    staging what TMA cannot take). Both checked against dense."""
    import cupy
    import torch

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family needs a compute capability 9.0 GPU")
    rng = cupy.random.default_rng(hash(case.id) % 2**31)
    np_dtype = dtypes.numpy_dtype(case.dtype)
    w = cs.prune_2to4(dtypes.from_float32(rng.standard_normal((case.m, case.k), dtype=cupy.float32), np_dtype))
    x_plain = dtypes.from_float32(rng.standard_normal((case.k, case.n), dtype=cupy.float32), np_dtype)
    x = _torch_view(any_shape_cases.stored(x_plain, case.x_store, case.layout))
    sw = cs.compress(w, layout="sm90")
    out_cupy = any_shape_cases.out_array(case, np_dtype)
    out = None if out_cupy is None else _torch_view(out_cupy)
    ref = reference.to_float32(w) @ reference.to_float32(x_plain)
    for call in ("full path", "eager path"):
        y = cs.matmul(sw, x, out=out)
        assert isinstance(y, torch.Tensor) and tuple(y.shape) == (case.m, case.n)
        if out is not None:
            assert y is out
        torch.cuda.current_stream().synchronize()
        got = cupy.asarray(y.view(torch.int16)).view(np_dtype) if case.dtype == "bf16" else cupy.asarray(y)
        err = reference.relative_error(got, ref)
        assert err <= TOLERANCE[case.dtype], f"{call}: relative error {err:.3e}"


@pytest.mark.parametrize("unit_of", [1, 2, 4, 8, 16])
def test_staging_copy_kernel_moves_exactly_the_lines(unit_of):
    """launch.staging.copy_lines (the copy kernel) at each access width: lines of `width`
    bytes land at their pitch, nothing around them is touched; one line with a pitch of 0;
    the 2-D memcpy fallback gives the same bytes."""
    import cupy

    from cutlass_sparse.launch import staging

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the copy kernel is the sm90 family's (griddepcontrol)")
    assert staging._copier(cupy.cuda.runtime.getDevice()) is not None
    rng = cupy.random.default_rng(unit_of)
    for lines, width, src_pitch, dst_pitch in ((4096, 14, 14, 16), (3, 8190, 8190, 8192), (1, 48, 0, 0),
                                               (700, 4096 * 2 + 16, 4096 * 2 + 32, 4096 * 2 + 48)):
        # offsets and sizes of this unit (the kernel's unit is the widest dividing all of them)
        width, src_pitch, dst_pitch = (-(-v // unit_of) * unit_of for v in (width, src_pitch, dst_pitch))
        src = rng.integers(0, 256, size=lines * max(src_pitch, width) + 64, dtype=cupy.uint8)
        dst = cupy.full(lines * max(dst_pitch, width) + 64, 7, dtype=cupy.uint8)
        expect = dst.copy()
        staging.copy_lines(dst.data.ptr + unit_of, dst_pitch, src.data.ptr + unit_of, src_pitch, width, lines)
        for line in range(lines):
            d0, s0 = unit_of + line * dst_pitch, unit_of + line * src_pitch
            expect[d0:d0 + width] = src[s0:s0 + width]
        assert bool((dst == expect).all()), (lines, width, src_pitch, dst_pitch)
        # the 2-D memcpy fallback (no copy kernel for the device): the same bytes
        device_id = cupy.cuda.runtime.getDevice()
        kept = staging._copiers[device_id]
        staging._copiers[device_id] = None
        try:
            again = cupy.full_like(dst, 7)
            staging.copy_lines(again.data.ptr + unit_of, dst_pitch, src.data.ptr + unit_of, src_pitch, width, lines)
        finally:
            staging._copiers[device_id] = kept
        assert bool((again == dst).all())
