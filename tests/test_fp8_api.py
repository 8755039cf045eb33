"""The fp8 calls without a GPU: what cs.linear_fp8 plans (the scaled e4m3 kernel of the
fp8 catalog, D column-major, launched in place for aligned shapes at any token count),
and its input checks that need no device."""
import dataclasses
from unittest import mock

import numpy as np
import pytest

import cutlass_sparse as cs
from cutlass_sparse.build import kernels
from cutlass_sparse.describe.problem import Epilogue, Problem
from cutlass_sparse.plan import plans


def stand_in(config, arch, cache=None):
    return kernels.CompiledKernel(config, arch, "stand-in", b"", {"shared_bytes": 0, "threads": 128,
                                                                 "params_bytes": 8})


@pytest.mark.parametrize("tokens", [1, 7, 16, 512, 4096])
def test_linear_fp8_plans_the_scaled_kernel_in_place(tokens):
    problem = Problem.contiguous("sm90", 4096, tokens, 4096, element="e4m3", element_out="bf16", layout_b="col",
                                 out_layout="col")
    problem = dataclasses.replace(problem, epilogue=Epilogue(activation="silu", scales="row_col"))
    plans.clear()
    with mock.patch.object(kernels, "get", stand_in):
        plan = plans.make(problem)
    plans.clear()
    c = plan.config
    assert (c.element, c.element_out, c.scales, c.activation, c.layout_b, c.layout_c) == (
        "e4m3", "bf16", "row_col", "silu", "col", "col")
    # the scaled epilogue reads no C: the kernel has none (more stages fit)
    assert c.threadblock[2] >= 128 and c.atom_k == 128 and not c.reads_c
    assert c.name.endswith("_silu_scaled_inflight_noc" if c.mma_in_flight else "_silu_scaled_noc")
    assert plan.direct and not plan.stage_x and not plan.stage_out


def test_linear_fp8_refuses_a_weight_that_is_not_fp8():
    sw = cs.SparseMatrix((16, 32), np.dtype(np.float16), np.zeros((16, 16), np.float16), np.zeros(64, np.uint8),
                         "sm90")
    with pytest.raises(TypeError, match="fp8 SparseMatrix from cs.quantize_fp8"):
        cs.linear_fp8(None, None, sw)


def test_e5m2_activations_plan_the_mixed_kernel():
    """An e4m3 weight with e5m2 activations: the same tile as e4m3 activations, B read as
    e5m2 (its own kernel, name and cache key); a config's B type must be one CUTLASS's
    sparse wgmma pairs with A's."""
    problem = Problem.contiguous("sm90", 4096, 16, 4096, element="e4m3", element_out="bf16", layout_b="col",
                                 out_layout="col")
    problem = dataclasses.replace(problem, epilogue=Epilogue(scales="row_col"))
    mixed = dataclasses.replace(problem, element_x="e5m2")
    plans.clear()
    with mock.patch.object(kernels, "get", stand_in):
        same, other = plans.make(problem).config, plans.make(mixed).config
    plans.clear()
    assert other.b_element == "e5m2" and other.tensor_b.element.name == "e5m2" and same.element_b == ""
    assert dataclasses.replace(other, element_b="") == same
    assert "_e4m3_e5m2_" in other.name and "_e4m3_e4m3_" in same.name and other.key != same.key
    for bad in ("e4m3", "f16", "s8"):
        with pytest.raises(ValueError, match="element_b"):
            dataclasses.replace(same, element_b=bad)


def test_an_x_of_the_weights_type_is_one_problem_however_named():
    from dataclasses import replace

    from cutlass_sparse.describe.problem import Problem

    plain = Problem.contiguous("sm90", 256, 64, 512, element="e4m3", element_out="bf16")
    assert replace(plain, element_x="e4m3") == plain and replace(plain, element_x="e4m3").element_x == ""
    assert replace(plain, element_x="e5m2") != plain
