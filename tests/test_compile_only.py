"""The command line's compile-only path plans what a GPU run launches, for both families,
without a GPU (kernels.get stands in for NVRTC here: an sm90 compile takes minutes)."""
from unittest import mock

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.cli import run
from cutlass_sparse.describe.problem import Problem
from cutlass_sparse.plan import plans


@pytest.mark.parametrize("family, n, expected", [("sm90", 4096, 2), ("sm90", 7, 2), ("sm80", 64, 1)])
def test_needed_kernels_of_each_family(family, n, expected):
    asked = []

    def record(config, arch, cache=None):
        asked.append((config, arch))
        return kernels.CompiledKernel(config, arch, f"stand-in-{len(asked)}", b"",
                                      {"shared_bytes": 0, "threads": 128, "params_bytes": 8})

    problem = Problem.contiguous(family, 4096, n, 4096, arch="sm_90" if family == "sm90" else "sm_80")
    plans.clear()
    with mock.patch.object(kernels, "get", record):
        found = run.needed_kernels(problem)
    plans.clear()   # the plans hold stand-in kernels
    assert len(found) == expected and all(isinstance(k, kernels.CompiledKernel) for k in found)
    assert {arch for _, arch in asked} == {"sm_90a" if family == "sm90" else "sm_80"}
