"""The sm90 GEMM's launches, through the driver's cuLaunchKernelEx, with programmatic
dependent launch where the arguments allow it.

The sm90 kernels wait on the previous grid (griddepcontrol.wait) before their first global
access and let the next grid start after their last mainloop (emit.sm90), so a GEMM
launched with programmatic stream serialization runs its prologue (barriers, descriptor
prefetch, cluster start) while the kernel before it on the stream finishes: 5-13% off
decode-sized GEMMs in a chain on the H100 (scripts/device/probe_pdl.py). Only a launch
whose Params come by value may start early: one reading them from the setup entry's
buffer reads global memory before the wait, so it launches in plain stream order.

Arguments go as a kernelParams array of addresses made once per launch record (CuPy's
Function describes a 1.5 KB record anew at every call: 8.5 against 5.7 us of host time
in the same probe). CUTLASS_SPARSE_PDL=0 launches every GEMM in plain stream order.
"""
from __future__ import annotations

import ctypes
import threading

from .. import env

ENABLED = env.programmatic_launch()

# The GEMM's from_device argument when its Params come by value.
NULL = ctypes.c_uint64(0)


def kernel_params(*arguments) -> ctypes.Array:
    """kernelParams for arguments held in ctypes objects: their addresses (the objects
    must outlive every launch that uses the array)."""
    return (ctypes.c_void_p * len(arguments))(*map(ctypes.addressof, arguments))


class Entry:
    """A loaded kernel entry (CuPy Function) launched from kernelParams arrays."""

    def __init__(self, function, threads: tuple[int, int, int], shared_bytes: int):
        import cupy
        from cuda.bindings import driver

        self._driver = driver
        self._launch = driver.cuLaunchKernelEx
        self._current_stream = cupy.cuda.get_current_stream
        self._function = driver.CUfunction(function.ptr)
        # one launch configuration per kind, its grid and stream set just before each launch
        self._configs = {kind: self._config(threads, shared_bytes, kind) for kind in (False, True)}
        self._threads, self._shared = threads, shared_bytes
        self._lock = threading.Lock()

    def _config(self, threads: tuple[int, int, int], shared_bytes: int, programmatic: bool):
        driver = self._driver
        config = driver.CUlaunchConfig()
        config.blockDimX, config.blockDimY, config.blockDimZ = threads
        config.sharedMemBytes = shared_bytes
        if programmatic:
            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            config.attrs = [attribute]
            config.numAttrs = 1
        return config

    def __call__(self, grid: tuple[int, int, int], params: ctypes.Array, stream=None,
                 programmatic: bool = False) -> None:
        """Launch on `stream` (a CuPy stream; default the current one)."""
        config = self._configs[programmatic and ENABLED]
        stream_ptr = (stream or self._current_stream()).ptr
        address = ctypes.addressof(params)
        err = self._submit(config, grid, stream_ptr, address)
        if err == self._driver.CUresult.CUDA_ERROR_INVALID_CONTEXT:   # a thread with no current context yet
            import cupy

            cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
            err = self._submit(config, grid, stream_ptr, address)
        if err:
            raise RuntimeError(f"cuLaunchKernelEx failed: {err.name} (grid {grid}, threads {self._threads}, "
                               f"{self._shared} bytes of shared memory)")

    def _submit(self, config, grid, stream_ptr: int, address: int):
        with self._lock:
            config.gridDimX, config.gridDimY, config.gridDimZ = grid
            config.hStream = stream_ptr
            err, = self._launch(config, self._function, address, 0)
        return err
