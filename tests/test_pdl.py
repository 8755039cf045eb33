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
    entry = pdl.Entry(_Function(), (384, 1, 1), 200_000)
    seen = []

    def launch(config, function, address, extra):
        attrs = [a.id for a in config.attrs[:config.numAttrs]] if config.numAttrs else []
        seen.append(((config.gridDimX, config.gridDimY, config.gridDimZ), int(config.hStream), attrs, address))
        return (getattr(driver.CUresult, result),)
    monkeypatch.setattr(entry, "_launch", launch)
    return entry, seen, driver


def test_only_programmatic_launches_carry_the_attribute(monkeypatch):
    entry, seen, driver = _entry(monkeypatch)
    params = pdl.kernel_params((ctypes.c_char * 64)(), pdl.NULL)
    address = ctypes.addressof(params)
    entry((4, 2, 1), address, _Stream(0x77), programmatic=True)
    entry((8, 1, 1), address, _Stream(0x78), programmatic=False)
    entry((4, 2, 1), address, _Stream(0x78), programmatic=True)   # a kept configuration, another stream
    entry((4, 2, 1), address, _Stream(0x77), programmatic=True)
    serialization = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    early = [serialization] if pdl.ENABLED else []
    assert seen == [((4, 2, 1), 0x77, early, address), ((8, 1, 1), 0x78, [], address),
                    ((4, 2, 1), 0x78, early, address), ((4, 2, 1), 0x77, early, address)]
    monkeypatch.setattr(pdl, "ENABLED", False)   # CUTLASS_SPARSE_PDL=0
    entry((4, 2, 1), address, _Stream(0x77), programmatic=True)
    assert seen[-1][2] == []


def test_a_failed_launch_names_the_error_and_the_launch(monkeypatch):
    entry, _, _ = _entry(monkeypatch, "CUDA_ERROR_INVALID_VALUE")
    params = pdl.kernel_params((ctypes.c_char * 64)(), pdl.NULL)
    with pytest.raises(RuntimeError, match=r"CUDA_ERROR_INVALID_VALUE \(grid \(4, 2, 1\), threads \(384, 1, 1\)"):
        entry((4, 2, 1), ctypes.addressof(params), _Stream(0x77), programmatic=True)
