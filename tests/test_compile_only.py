"""The command line's compile-only path plans what a GPU run launches, for both families,
without a GPU (kernels.get stands in for NVRTC here: an sm90 compile takes minutes)."""
from unittest import mock

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.cli import run
from cutlass_sparse.describe.problem import Problem
from cutlass_sparse.plan import plans


@pytest.mark.parametrize("family, n, expected", [("sm90", 4096, 1), ("sm90", 7, 1), ("sm80", 64, 1)])
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


def test_a_scaled_plan_packs_its_scale_pointers():
    # Issue 15 groundwork: a Problem with scales "row_col" plans the scaled kernel, whose
    # setup block carries the (row, column) scale and bias pointers after SETUP's fields; an
    # unscaled kernel refuses scale pointers rather than dropping them.
    import dataclasses

    import numpy as np

    from cutlass_sparse.describe.problem import Epilogue
    from cutlass_sparse.emit.sm90 import SETUP, SETUP_SCALED

    def stand_in(config, arch, cache=None):
        return kernels.CompiledKernel(config, arch, "stand-in", b"", {"shared_bytes": 0, "threads": 128,
                                                                     "params_bytes": 8})

    base = Problem.contiguous("sm90", 4096, 512, 4096, element="e4m3", element_out="bf16", layout_b="col")
    scaled = dataclasses.replace(base, epilogue=Epilogue(scales="row_col"))
    plans.clear()
    with mock.patch.object(kernels, "get", stand_in):
        plan, plain = plans.make(scaled), plans.make(base)
    plans.clear()
    assert plan.config.scales == "row_col" and plan.config.element == "e4m3" and plain.config.scales == "none"
    block = plan._setup_arguments((1, 2, 3, 4, 5), 6, scales=(0x1000, 0x2000, 0x3000))
    fields = np.frombuffer(block.tobytes(), dtype=SETUP_SCALED.dtype)[0]
    assert (int(fields["a"]), int(fields["d"]), int(fields["params_out"])) == (1, 5, 6)
    assert (int(fields["row_scales"]), int(fields["column_scales"]), int(fields["row_bias"])) == \
        (0x1000, 0x2000, 0x3000)
    assert float(fields["out_multiplier"]) == 1.0   # 1 / out_scale
    # each launch's own nonce, which marks the TMA recipes it writes: never a small number
    # (a tensor size inside a real recipe sits where a look-alike slot's nonce would be)
    again = np.frombuffer(plan._setup_arguments((1, 2, 3, 4, 5), 6).tobytes(), dtype=SETUP_SCALED.dtype)[0]
    assert int(fields["nonce"]) != int(again["nonce"])
    assert min(int(fields["nonce"]), int(again["nonce"])) >= 2 ** 31
    assert plain._setup_arguments((1, 2, 3, 4, 5), 6).nbytes == SETUP.dtype.itemsize
    with pytest.raises(ValueError, match="takes no scales"):
        plain._setup_arguments((1, 2, 3, 4, 5), 6, scales=(0x1000, 0, 0))


def test_setup_nonces_are_unique_and_large():
    """Setup nonces: distinct over a long run and all in [2**31, 2**32), so no tensor size
    below 2**31 can pose as one."""
    from cutlass_sparse.launch import sm90_setup

    seen = [sm90_setup.next_nonce() for _ in range(100_000)]
    assert len(set(seen)) == len(seen)
    assert all(2 ** 31 <= n < 2 ** 32 for n in seen)
