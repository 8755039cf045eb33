"""A single-column D on sm90 (decode at one token): the library allocates it column-major,
the same memory as [M, 1] row-major, so TMA writes it in place and x is read where it is:
one launch, where a row-major D rounded N up to 8 and staged x and D."""
import dataclasses
from unittest import mock

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.describe import selection
from cutlass_sparse.describe.problem import Epilogue, Operand, Problem, allocated_d_layout
from cutlass_sparse.plan import plans


def stand_in(config, arch, cache=None):
    return kernels.CompiledKernel(config, arch, "stand-in", b"", {"shared_bytes": 0, "threads": 128,
                                                                 "params_bytes": 8})


def planned(problem):
    plans.clear()
    with mock.patch.object(kernels, "get", stand_in):
        plan = plans.make(problem)
    plans.clear()
    return plan


def test_which_allocated_d_is_column_major():
    assert allocated_d_layout("sm90", 1, "f16") == allocated_d_layout("sm90", 1, "bf16") == "col"
    assert allocated_d_layout("sm90", 2, "f16") == "row"            # two columns: row-major as before
    assert allocated_d_layout("sm80", 1, "f16") == "row"            # CUTLASS 2.x writes row-major D only
    assert allocated_d_layout("sm90", 1, "f16", reads_c=True) == "row"   # a folded C is row-major
    assert allocated_d_layout("sm90", 1, "f16", split_k=2) == "row"
    assert allocated_d_layout("sm90", 1, "s8") == allocated_d_layout("sm90", 1, "f32") == "row"
    caller = Problem.contiguous("sm90", 4096, 1, 4096, layout_b="col", out_layout="row")
    assert caller.layout_d == "row"    # a caller's out keeps its own layout


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("m, k", [(4096, 4096), (4096, 14336), (1001, 4096)])
def test_one_token_runs_one_launch(m, k, dtype):
    problem = Problem.contiguous("sm90", m, 1, k, element=dtype, layout_b="col")
    plan = planned(problem)
    assert plan.layout_c == "col" and plan.config.layout_c == "col"
    assert plan.n_k == 1 and not plan.stage_x and plan.direct and plan.out_pitch == 1
    # what warm-up and the CLI's compile-only run name is the kernel the call builds
    chosen = selection.config_for_shape(m, 1, k, dtype, dtype, "row", 132, "sm90")
    assert chosen.as_compiled() == plan.config.as_compiled()
    # a row-major D of one column needed N rounded to 8, x and D staged
    row = dataclasses.replace(problem, out=Operand("row", 1, 16))
    before = planned(row)
    assert before.n_k == 8 and before.stage_x and before.stage_out and not before.direct


def test_a_bias_by_vector_keeps_the_column_a_folded_one_does_not():
    problem = Problem.contiguous("sm90", 4096, 1, 4096, layout_b="col")
    vector = planned(problem.with_bias())
    assert vector.config.scales == "row_col" and vector.layout_c == "col" and vector.n_k == 1
    leaky = dataclasses.replace(problem, epilogue=Epilogue(activation="leaky_relu")).with_bias()
    folded = planned(leaky)
    assert folded.problem.epilogue.reads_c and folded.layout_c == "row" and folded.n_k == 8


def test_one_token_has_a_range_of_its_own():
    one = Problem.contiguous("sm90", 4096, 1, 4096, layout_b="col")
    two = Problem.contiguous("sm90", 4096, 2, 4096, layout_b="col")
    assert selection.n_range(1) == selection.n_range(2)
    assert plans.range_key(one, None, None) != plans.range_key(two, None, None)


def test_the_eager_path_allocates_a_plain_column():
    """A torch call's D (eager.Entry) is allocated in rows of the plan's out_pitch: a plain
    [M, 1] for one token, not rows of the column-major D's leading dimension (M)."""
    from cutlass_sparse.api import eager

    problem = Problem.contiguous("sm90", 4096, 1, 4096, layout_b="col")
    plan = planned(problem)
    assert plan.ldd == 4096 and plan.out_pitch == 1
    assert eager.Entry(plan, problem)._spec(0) == ((4096, 1), None, None)
    # a row-major D of N = 7 still rows of its padded pitch, seen as [M, 7]
    odd = planned(Problem.contiguous("sm90", 4096, 7, 4096))
    assert eager.Entry(odd, odd.problem)._spec(0) == ((4096, 8), None, ((4096, 7), (8, 1)))
