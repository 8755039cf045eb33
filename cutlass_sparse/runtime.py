"""Load cubins and launch them: the only module that talks to the CUDA driver.

A cubin is loaded once per process as a context-independent library (cuLibraryLoadData);
each device gets its own function handle with its shared-memory limit raised once.
Launches go on the caller's stream and never synchronize.
"""
from __future__ import annotations

import threading

import numpy as np

from .kernels import CompiledKernel


class CudaError(RuntimeError):
    pass


def _check(result, what: str):
    from cuda.bindings import driver

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, text = driver.cuGetErrorString(err)
        raise CudaError(f"{what} failed: {err.name} ({text.decode() if text else ''})")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


_init_lock = threading.Lock()
_initialized = False


def _init() -> None:
    global _initialized
    if not _initialized:
        from cuda.bindings import driver

        with _init_lock:
            if not _initialized:
                _check(driver.cuInit(0), "cuInit")
                _initialized = True


def _ensure_context(device_id: int) -> None:
    """Make the device's primary context (the one CuPy uses) current on this thread."""
    from cuda.bindings import driver

    ctx = _check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is not None and int(ctx) != 0:
        current = _check(driver.cuCtxGetDevice(), "cuCtxGetDevice")
        if int(current) == device_id:
            return
    device = _check(driver.cuDeviceGet(device_id), "cuDeviceGet")
    primary = _check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(primary), "cuCtxSetCurrent")


class LoadedKernel:
    """A compiled kernel loaded into this process; per-device function handles on demand."""

    def __init__(self, compiled: CompiledKernel):
        from cuda.bindings import driver

        _init()
        self.compiled = compiled
        self._library = _check(driver.cuLibraryLoadData(compiled.cubin, None, None, 0, None, None, 0),
                               f"loading {compiled.symbol}")
        self._kernel = _check(driver.cuLibraryGetKernel(self._library, compiled.symbol.encode()),
                              f"finding {compiled.symbol}")
        self._functions: dict[int, object] = {}
        self._lock = threading.Lock()

    def function(self, device_id: int):
        func = self._functions.get(device_id)
        if func is None:
            from cuda.bindings import driver

            with self._lock:
                _ensure_context(device_id)
                func = _check(driver.cuKernelGetFunction(self._kernel), "cuKernelGetFunction")
                _check(driver.cuFuncSetAttribute(
                    func, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    self.compiled.shared_bytes), f"raising the shared-memory limit of {self.compiled.symbol}")
                self._functions[device_id] = func
        return func

    def launch(self, device_id: int, grid: tuple[int, int, int], args: np.ndarray, stream_ptr: int) -> None:
        """Launch with `args` (a size-1 structured array) as the kernel's by-value struct."""
        from cuda.bindings import driver

        func = self.function(device_id)
        # kernelParams is a void** with one entry: the address of the struct.
        param_ptrs = np.array([args.ctypes.data], dtype=np.uint64)
        _check(driver.cuLaunchKernel(func, grid[0], grid[1], grid[2], self.compiled.threads, 1, 1,
                                     self.compiled.shared_bytes, driver.CUstream(stream_ptr),
                                     param_ptrs.ctypes.data, 0),
               f"launching {self.compiled.symbol}")


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
