"""The host grid an sm90 plan launches with is kept per raster order too: a plan of another
raster order must not reuse a grid computed for the first one (session 25: a sweep that
switched the raster order in one process launched 16384^3 along M on the along-N grid, and the
kernel hung)."""
from unittest import mock

from cutlass_sparse.build import kernels
from cutlass_sparse.describe.problem import Problem
import dataclasses

from cutlass_sparse.describe import selection
from cutlass_sparse.launch import grid, sm90_prepare
from cutlass_sparse.plan import plans


def stand_in(config, arch, cache=None):
    return kernels.CompiledKernel(config, arch, "stand-in", b"", {"shared_bytes": 0, "threads": 384,
                                                                 "params_bytes": 8})


def test_each_raster_order_gets_its_own_grid(monkeypatch):
    problem = Problem.contiguous("sm90", 16384, 16384, 8192)   # the 128x256x64 tile (K below the tall one's)
    monkeypatch.setattr(sm90_prepare, "_prepared", {})   # none of this test's entries outlive it
    found = {}
    with mock.patch.object(kernels, "get", stand_in):
        for raster in (0, grid.ALONG_M, grid.ALONG_N):
            plans.clear()
            config = selection.config_for_shape(16384, 16384, 8192, "f16", "f16", "row", 132, "sm90")
            plan = plans.make(problem, dataclasses.replace(config, raster=raster))
            assert plan.raster == raster
            # the kernel's templates are known on this device: the grid is the host's
            monkeypatch.setitem(sm90_prepare._templates, (plan.compiled.key, problem.device_id), object())
            found[raster] = sm90_prepare.prepared(plan, (0,) * 5).grid
            assert found[raster] == sm90_prepare.host_grid(plan)
    plans.clear()
    # 128 x 64 tiles of 128x256 in 2x1 clusters: CUTLASS's heuristic runs along N
    assert found[0] == found[grid.ALONG_N] == (2, 66, 1)
    assert found[grid.ALONG_M] == (132, 1, 1)


def test_a_plan_at_another_n_of_its_range_keeps_the_order_its_caller_named(monkeypatch):
    """Plans built ahead for a range's other N (sm90_params.build_ahead) take the caller's
    config with them: its swizzle and raster order, not the heuristic's."""
    problem = Problem.contiguous("sm90", 16384, 8192, 8192)
    config = dataclasses.replace(selection.config_for_shape(16384, 8192, 8192, "f16", "f16", "row", 132, "sm90"),
                                 swizzle=2, raster=grid.ALONG_N)
    with mock.patch.object(kernels, "get", stand_in):
        plans.clear()
        plan = plans.make(problem, config)
        assert plan.asked == (config, None)
        other = type(plan)(problem.with_(n=8000), *plan.asked, kernel=plan.kernel)
        heuristic = type(plan)(problem.with_(n=8000), kernel=plan.kernel)
    plans.clear()
    assert (plan.swizzle, plan.raster) == (other.swizzle, other.raster) == (2, grid.ALONG_N)
    assert (heuristic.swizzle, heuristic.raster) != (2, grid.ALONG_N)
