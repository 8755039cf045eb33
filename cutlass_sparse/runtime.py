"""Load cubins and launch them: the one module that hands kernels to the GPU.

CuPy's Module/Function do the driver work (cuModuleLoadData, cuLaunchKernel) from
Cython, which keeps a launch to a few microseconds of host time; a size-1 NumPy
structured array is passed by value as the kernel's argument struct. Each device gets
its own module, loaded on first use with its shared-memory limit raised once.
Launches go on the current CuPy stream and never synchronize.
"""
from __future__ import annotations

import threading

import numpy as np

from .kernels import CompiledKernel


class LoadedKernel:
    """A compiled kernel, loaded per device on demand."""

    def __init__(self, compiled: CompiledKernel):
        self.compiled = compiled
        self._block = (compiled.threads, 1, 1)
        self._functions: dict[int, object] = {}
        self._modules: dict[int, object] = {}   # keep each device's module alive
        self._lock = threading.Lock()

    def function(self, device_id: int):
        func = self._functions.get(device_id)
        if func is None:
            import cupy

            with self._lock, cupy.cuda.Device(device_id):
                module = cupy.cuda.function.Module()
                module.load(self.compiled.cubin)
                func = module.get_function(self.compiled.symbol)
                driver = cupy.cuda.driver
                driver.funcSetAttribute(func.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        self.compiled.shared_bytes)
                self._modules[device_id] = module
                self._functions[device_id] = func
        return func

    def launch(self, device_id: int, grid: tuple[int, int, int], args: np.ndarray) -> None:
        """Launch on the current stream with `args` (size-1 structured array) as the struct."""
        # Passed as one opaque V<size> record: CuPy copies its bytes by value, and a plain
        # void dtype spares it describing every field (tens of microseconds a call).
        raw = args.view(np.dtype((np.void, args.dtype.itemsize)))
        self.function(device_id)(grid, self._block, (raw,), shared_mem=self.compiled.shared_bytes)


_loaded: dict[str, LoadedKernel] = {}
_loaded_lock = threading.Lock()


def load(compiled: CompiledKernel) -> LoadedKernel:
    kernel = _loaded.get(compiled.key)
    if kernel is None:
        with _loaded_lock:
            kernel = _loaded.get(compiled.key)
            if kernel is None:
                kernel = _loaded[compiled.key] = LoadedKernel(compiled)
    return kernel
