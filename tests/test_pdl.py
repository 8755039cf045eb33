"""launch.pdl without a GPU: which launches carry the programmatic attribute, the grid and
stream each launch sets, and a failed launch's error (the driver call replaced)."""
import ctypes

import pytest

from cutlass_sparse.launch import pdl


class _Function:
    ptr = 0x1234


class _Stream:
    def __init__(self, ptr):
        self.ptr = ptr


def _entry(monkeypatch, result="CUDA_SUCCESS"):
    driver = pytest.importorskip("cuda.bindings.driver")
    seen = []

    def launch(config_address, function, address, extra):
        config = pdl.LaunchConfig.from_address(config_address)   # the C struct the driver would read
        attrs = [(config.attrs[i].id, config.attrs[i].value) for i in range(config.numAttrs)]
        seen.append(((config.gridDimX, config.gridDimY, config.gridDimZ), config.hStream, attrs, address,
                     (config.blockDimX, config.blockDimY, config.blockDimZ, config.sharedMemBytes), function))
        return int(getattr(driver.CUresult, result))
    monkeypatch.setattr(pdl, "_driver_launch", launch)
    return pdl.Entry(_Function(), (384, 1, 1), 200_000), seen, driver


def test_the_config_struct_has_cuda_h_layout():
    # offsets of cuda.h's CUlaunchConfig / CUlaunchAttribute on x86-64
    assert [pdl.LaunchConfig.hStream.offset, pdl.LaunchConfig.attrs.offset, pdl.LaunchConfig.numAttrs.offset,
            ctypes.sizeof(pdl.LaunchConfig)] == [32, 40, 48, 56]
    assert (pdl.LaunchAttribute.value.offset, ctypes.sizeof(pdl.LaunchAttribute)) == (8, 72)


def test_only_programmatic_launches_carry_the_attribute(monkeypatch):
    entry, seen, driver = _entry(monkeypatch)
    params = pdl.kernel_params((ctypes.c_char * 64)(), pdl.NULL)
    entry((4, 2, 1), params, _Stream(0x77), programmatic=True)
    entry((8, 1, 1), params, _Stream(0x78), programmatic=False)
    serialization = int(driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    block = (384, 1, 1, 200_000)
    assert seen[0] == ((4, 2, 1), 0x77, [(serialization, 1)] if pdl.ENABLED else [], ctypes.addressof(params),
                       block, _Function.ptr)
    assert seen[1] == ((8, 1, 1), 0x78, [], ctypes.addressof(params), block, _Function.ptr)
    monkeypatch.setattr(pdl, "ENABLED", False)   # CUTLASS_SPARSE_PDL=0
    entry((4, 2, 1), params, _Stream(0x77), programmatic=True)
    assert seen[2][2] == []


def test_a_failed_launch_names_the_error_and_the_launch(monkeypatch):
    entry, _, _ = _entry(monkeypatch, "CUDA_ERROR_INVALID_VALUE")
    params = pdl.kernel_params((ctypes.c_char * 64)(), pdl.NULL)
    with pytest.raises(RuntimeError, match=r"CUDA_ERROR_INVALID_VALUE \(grid \(4, 2, 1\), threads \(384, 1, 1\)"):
        entry((4, 2, 1), params, _Stream(0x77), programmatic=True)
