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
in the same probe). The driver call itself costs 4-5.5 us of host time on the H100
machines, through cuda-bindings or ctypes alike, and as much for a kernel of one 8-byte
argument (scripts/device/probe_launch_paths.py). CUTLASS_SPARSE_PDL=0 launches every
GEMM in plain stream order.
"""
from __future__ import annotations

import ctypes

from .. import env

ENABLED = env.programmatic_launch()

# The GEMM's from_device argument when its Params come by value.
NULL = ctypes.c_uint64(0)


def kernel_params(*arguments) -> ctypes.Array:
    """kernelParams for arguments held in ctypes objects: their addresses (the objects
    must outlive every launch that uses the array)."""
    return (ctypes.c_void_p * len(arguments))(*map(ctypes.addressof, arguments))


class Entry:
    """A loaded kernel entry (CuPy Function) launched from kernelParams addresses."""

    MAX_CONFIGS = 512   # launch configurations kept (grids x streams x kinds); then made anew

    def __init__(self, function, threads: tuple[int, int, int], shared_bytes: int):
        import cupy
        from cuda.bindings import driver

        self._driver = driver
        self._launch = driver.cuLaunchKernelEx
        self._current_stream = cupy.cuda.get_current_stream
        self._function = driver.CUfunction(function.ptr)
        self._threads, self._shared = threads, shared_bytes
        # (grid, stream pointer, programmatic) -> its CUlaunchConfig, never changed once made,
        # so threads launch with it without a lock
        self._configs: dict[tuple, object] = {}

    def _config(self, key: tuple):
        driver = self._driver
        grid, stream_ptr, programmatic = key
        config = driver.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = self._threads
        config.sharedMemBytes = self._shared
        config.hStream = stream_ptr
        if programmatic:
            attribute = driver.CUlaunchAttribute()
            attribute.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            config.attrs = [attribute]
            config.numAttrs = 1
        if len(self._configs) >= self.MAX_CONFIGS:
            self._configs = {}
        self._configs[key] = config
        return config

    def __call__(self, grid: tuple[int, int, int], params_address: int, stream=None,
                 programmatic: bool = False) -> None:
        """Launch with the kernelParams array at params_address on `stream` (a CuPy
        stream; default the current one)."""
        config = self._config_for(grid, (stream or self._current_stream()).ptr, programmatic)
        err, = self._launch(config, self._function, params_address, 0)
        if err:
            self._failed(err, config, grid, params_address)

    def again(self, grid: tuple[int, int, int], params_address: int, stream_ptr: int, programmatic: bool,
              held) -> "Again":
        """This launch, kept to be made again as it is (Again); `held`: what params_address
        points into, kept alive with it."""
        return Again(self, self._config_for(grid, stream_ptr, programmatic), grid, params_address, held)

    def _config_for(self, grid, stream_ptr: int, programmatic: bool):
        key = (grid, stream_ptr, programmatic and ENABLED)
        return self._configs.get(key) or self._config(key)

    def _failed(self, err, config, grid, params_address) -> None:
        """After a launch returned err: once more where the thread had no current context
        yet, else raise."""
        if err == self._driver.CUresult.CUDA_ERROR_INVALID_CONTEXT:
            import cupy

            cupy.cuda.runtime.setDevice(cupy.cuda.runtime.getDevice())
            err, = self._launch(config, self._function, params_address, 0)
        if err:
            raise RuntimeError(f"cuLaunchKernelEx failed: {err.name} (grid {grid}, threads {self._threads}, "
                               f"{self._shared} bytes of shared memory)")


class Again:
    """A launch made again exactly as it was: its driver call, launch configuration,
    function and kernelParams address kept, nothing looked up. A repeated eager or planned
    call (the same pointers on the same stream, so the same Params) fires it: about a
    microsecond of host time less than finding the launch anew."""

    __slots__ = ("_entry", "_call", "_config", "_function", "_grid", "_address", "_held")

    def __init__(self, entry: Entry, config, grid, address: int, held):
        self._entry, self._call = entry, entry._launch
        self._config, self._function, self._grid, self._address, self._held = \
            config, entry._function, grid, address, held

    def fire(self) -> None:
        err, = self._call(self._config, self._function, self._address, 0)
        if err:
            self._entry._failed(err, self._config, self._grid, self._address)
