"""Load cubins and launch them: the one module that hands kernels to the GPU.

CuPy's Module/Function do the driver work (cuModuleLoadData, cuLaunchKernel) from
Cython, which keeps a launch to a few microseconds of host time; a size-1 NumPy
structured array is passed by value as a kernel's argument struct. Each device gets
its own module, loaded on first use, with each entry's shared-memory limit raised once.
Launches go on the current CuPy stream and never synchronize. The sm90 GEMM's main entry
goes through the driver instead (entry(): launch.pdl, cuLaunchKernelEx).
"""
from __future__ import annotations

import threading

import numpy as np

from .. import events
from ..build.kernels import CompiledKernel
from .pdl import Entry


class LoadedKernel:
    """A compiled kernel's entries, loaded per device on demand."""

    def __init__(self, compiled: CompiledKernel):
        self.compiled = compiled
        self._functions: dict[tuple[int, str], object] = {}
        self._modules: dict[int, object] = {}   # keep each device's module alive
        self._entries: dict[int, object] = {}
        self._lock = threading.Lock()

    def function(self, device_id: int, symbol: str, shared_bytes: int = 0):
        """An entry of the device's module (loaded at its first use there)."""
        func = self._functions.get((device_id, symbol))
        if func is None:
            import cupy

            # a first use may come inside a capture (another thread's, in global mode)
            with self._lock, cupy.cuda.Device(device_id), events.relaxed():
                module = self._modules.get(device_id)
                if module is None:
                    module = cupy.cuda.function.Module()
                    module.load(self.compiled.cubin)
                    self._modules[device_id] = module
                func = module.get_function(symbol)
                if shared_bytes:
                    driver = cupy.cuda.driver
                    driver.funcSetAttribute(func.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            shared_bytes)
                self._functions[(device_id, symbol)] = func
        return func

    def entry(self, device_id: int):
        """The main entry as a launch.pdl.Entry (made once per device, shared by
        every plan that runs this kernel, with its launch configurations)."""
        entry = self._entries.get(device_id)
        if entry is None:
            compiled = self.compiled
            function = self.function(device_id, compiled.symbol, compiled.shared_bytes)
            with self._lock:
                entry = self._entries.setdefault(
                    device_id, Entry(function, (compiled.threads, 1, 1), compiled.shared_bytes))
        return entry

    def launch(self, device_id: int, grid: tuple[int, int, int], args,
               symbol: str | None = None, threads: int | tuple[int, int, int] | None = None,
               shared_bytes: int | None = None) -> None:
        """Launch an entry (default: the main one) on the current stream.

        `args` is a size-1 structured array (the entry's argument struct) or a tuple of
        CuPy-accepted arguments (arrays are passed as pointers, opaque void records by value).
        """
        symbol = symbol or self.compiled.symbol
        threads = threads or self.compiled.threads
        shared = self.compiled.shared_bytes if shared_bytes is None else shared_bytes
        if isinstance(args, np.ndarray):
            # Passed as one opaque V<size> record: CuPy copies its bytes by value, and a plain
            # void dtype spares it describing every field (tens of microseconds a call).
            args = (args.view(np.dtype((np.void, args.dtype.itemsize))),)
        block = threads if isinstance(threads, tuple) else (threads, 1, 1)
        self.function(device_id, symbol, shared)(grid, block, args, shared)


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
