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
Function describes a 1.5 KB record anew at every call). The driver function is called
through ctypes with a launch configuration kept as a C struct (cuda.h's CUlaunchConfig):
cuda-bindings' wrapper builds Python objects for the configuration, the parameter array
and the result at every call, which cost more host time than the launch itself
(scripts/device/probe_launch_paths.py). CUTLASS_SPARSE_PDL=0 launches every GEMM in
plain stream order.
"""
from __future__ import annotations

import ctypes
import threading

from .. import env

ENABLED = env.programmatic_launch()

# The GEMM's from_device argument when its Params come by value.
NULL = ctypes.c_uint64(0)

_SUCCESS, _INVALID_CONTEXT = 0, 201   # CUresult values (cuda.h)


def kernel_params(*arguments) -> ctypes.Array:
    """kernelParams for arguments held in ctypes objects: their addresses (the objects
    must outlive every launch that uses the array)."""
    return (ctypes.c_void_p * len(arguments))(*map(ctypes.addressof, arguments))


class LaunchAttribute(ctypes.Structure):
    """cuda.h's CUlaunchAttribute: an id, then a 64-byte value union (8-byte aligned)."""

    _fields_ = [("id", ctypes.c_int), ("_pad", ctypes.c_char * 4), ("value", ctypes.c_int),
                ("_rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    """cuda.h's CUlaunchConfig."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


_driver_launch = None


def driver_launch():
    """libcuda's cuLaunchKernelEx(config, function, kernelParams, extra) as a ctypes
    function of four addresses returning the CUresult."""
    global _driver_launch
    if _driver_launch is None:
        function = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
        function.argtypes = [ctypes.c_void_p] * 4
        function.restype = ctypes.c_int
        _driver_launch = function
    return _driver_launch


def _programmatic_attribute() -> LaunchAttribute:
    from cuda.bindings import driver

    serialization = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    return LaunchAttribute(id=int(serialization), value=1)


class Entry:
    """A loaded kernel entry (CuPy Function) launched from kernelParams arrays."""

    def __init__(self, function, threads: tuple[int, int, int], shared_bytes: int):
        import cupy

        self._launch = driver_launch()
        self._current_stream = cupy.cuda.get_current_stream
        self._function = function.ptr
        self._threads, self._shared = threads, shared_bytes
        self._attribute = _programmatic_attribute()
        # one launch configuration per kind, its grid and stream set just before each launch
        self._configs = {}
        for programmatic in (False, True):
            config = LaunchConfig(*(1, 1, 1), *threads, shared_bytes)
            if programmatic:
                config.attrs, config.numAttrs = ctypes.pointer(self._attribute), 1
            self._configs[programmatic] = (config, ctypes.addressof(config))
        self._lock = threading.Lock()

    def __call__(self, grid: tuple[int, int, int], params: ctypes.Array, stream=None,
                 programmatic: bool = False) -> None:
        """Launch on `stream` (a CuPy stream; default the current one)."""
        config = self._configs[programmatic and ENABLED]
        stream_ptr = (stream or self._current_stream()).ptr
        address = ctypes.addressof(params)
        err = self._submit(config, grid, stream_ptr, address)
        if err == _INVALID_CONTEXT:   # a thread with no current context yet
            import cupy

            cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
            err = self._submit(config, grid, stream_ptr, address)
        if err != _SUCCESS:
            raise RuntimeError(f"cuLaunchKernelEx failed: {_error_name(err)} (grid {grid}, threads {self._threads}, "
                               f"{self._shared} bytes of shared memory)")

    def _submit(self, config, grid, stream_ptr: int, address: int) -> int:
        struct, struct_address = config
        with self._lock:
            struct.gridDimX, struct.gridDimY, struct.gridDimZ = grid
            struct.hStream = stream_ptr
            return self._launch(struct_address, self._function, address, None)


def _error_name(err: int) -> str:
    try:
        from cuda.bindings import driver

        return driver.CUresult(err).name
    except (ImportError, ValueError):
        return f"CUresult {err}"
