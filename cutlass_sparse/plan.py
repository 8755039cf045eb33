"""Planned calls: selection, validation and argument building once, then launches.

    plan = cs.plan(sw, x_example, bias=b, activation="gelu")
    y = plan(x)                  # or plan(x, out=y) to write in place

Made once from an example x (the first run also loads or compiles the kernel), a plan
serves every x of the same shape, dtype, strides and device. In the common cases a call
only checks x and out against the plan and launches: sm80 with one K slice and M, K on
whole tiles (three pointers written into a copy of the argument block), and sm90 (the
kernel's Params, built by its setup entry once per (x, out) pair, kept by the plan). No
allocation when `out` is given, no synchronization, so it can be captured in a CUDA
graph (on sm90, after one call with the same x and out, or the setup launch is captured
too). Other cases (sm80 split-K, padded M or K) run cs.matmul with the plan's options:
the same result and kernel choice, more host time.
"""
from __future__ import annotations

import threading

import numpy as np

from . import arguments, sm80, sm90
from .matmul import matmul
from .operands import as_device_array, output_type, with_bias


class Plan:
    """cs.matmul(sw, x, **options) made once, called per x (see the module docstring)."""

    def __init__(self, sw, x, **options):
        import cupy

        x = as_device_array(x, "x")
        for key in ("out", "info", "workspace"):
            if key in options:
                raise TypeError(f"plan() takes no {key!r}: pass out= to each call")
        options = dict(options)
        self.sw = sw
        self.beta = float(options.get("beta", 0.0))
        bias = options.pop("bias", None)
        if bias is not None:   # folded once into the plan's own C
            m, n = sw.shape[0], x.shape[1]
            np_out = self._np_out(sw, options)
            with cupy.cuda.Device(x.device.id):
                self.c_bias = with_bias(bias, options.pop("c", None), self.beta, m, n, np_out, x.device.id)
            options["c"], options["beta"] = self.c_bias, 1.0
            self.beta = 1.0
        else:
            self.c_bias = None
        self.options = options
        info, record = {}, {}
        self.example_out = matmul(sw, x, info=info, _record=record, **options)
        self.info = info
        self.x_key = (x.shape, x.dtype, x.strides, x.device.id)
        self.direct = bool(record.get("direct")) and (self.beta == 0.0 or self.c_bias is not None)
        if self.direct:
            self._prepare_direct(sw, x, record)

    @staticmethod
    def _np_out(sw, options):
        from . import dtypes

        out_dtype = options.get("out_dtype")
        return dtypes.numpy_dtype(output_type(dtypes.operand_name(sw.dtype), out_dtype))

    def _prepare_direct(self, sw, x, record):
        self.np_out = self.example_out.dtype
        self.out_shape = (sw.shape[0], x.shape[1])
        self.out_strides = (record["ldd"] * self.np_out.itemsize, self.np_out.itemsize)
        self.align_x = record["alignment_b"] * x.dtype.itemsize
        self.align_out = record["alignment_c"] * self.np_out.itemsize
        if self.c_bias is not None and (self.c_bias.data.ptr % self.align_out or record["ldc"] != record["ldd"]):
            self.direct = False
            return
        if "ready_for" in record:
            self._prepare_sm90(record)
        else:
            self._prepare_sm80(sw, record)

    def _prepare_sm90(self, record):
        # Built launches (Params with TMA descriptors, made by the setup entry) per pointer
        # pair: a repeated (x, out) pair launches the GEMM alone.
        self.loaded, self.ready_for = record["loaded"], record["ready_for"]
        self.readies = {}
        self.readies_lock = threading.Lock()   # plans may be shared between threads

    def _prepare_sm80(self, sw, record):
        # The hot path writes pointers into a copy of the argument block seen as 64-bit
        # words and hands the bytes to the loaded function: no field lookups, no dtype building.
        self.readies = None
        self.launch = launch = record["launch"]
        c_ptr = 0 if self.c_bias is None else self.c_bias.data.ptr
        block = sm80.gemm_block(launch, sw, 0, c_ptr, 0, record["ldb"], record["ldc"], record["ldd"],
                                float(self.options.get("alpha", 1.0)), self.beta,
                                float(self.options.get("leaky_slope", 0.01)))
        layout = arguments.SM80_GEMM.dtype
        self.word_b, self.word_c, self.word_d = (layout.fields[f][1] // 8 for f in ("b", "c", "d"))
        self.words = block.view(np.uint64).copy()
        compiled = launch.kernel.compiled
        self.function = launch.kernel.function(self.x_key[3], compiled.symbol, compiled.shared_bytes)
        self.record = np.dtype((np.void, layout.itemsize))
        self.threads = (compiled.threads, 1, 1)
        self.shared_bytes = compiled.shared_bytes

    def __call__(self, x, out=None):
        if not self.direct:
            return matmul(self.sw, x, out=out, **self.options)
        import cupy

        if not isinstance(x, cupy.ndarray):
            x = as_device_array(x, "x")
        if (x.shape, x.dtype, x.strides, x.data.device_id) != self.x_key:
            raise ValueError(f"x is {x.shape} {x.dtype} with strides {x.strides} on device {x.device.id}; "
                             f"this plan was made for {self.x_key[0]} {self.x_key[1]} with strides "
                             f"{self.x_key[2]} on device {self.x_key[3]}: make another plan")
        if x.data.ptr % self.align_x:
            raise ValueError(f"x at {x.data.ptr:#x} is not {self.align_x}-byte aligned as the plan's kernel reads it")
        if out is None:
            with cupy.cuda.Device(self.x_key[3]):
                out = cupy.empty(self.out_shape, dtype=self.np_out)
        elif not (isinstance(out, cupy.ndarray) and out.shape == self.out_shape and out.dtype == self.np_out
                  and out.strides == self.out_strides and out.data.device_id == self.x_key[3]):
            raise ValueError(f"out must be a row-major {self.out_shape} {self.np_out} cupy array with strides "
                             f"{self.out_strides} on device {self.x_key[3]}")
        elif out.data.ptr % self.align_out:
            raise ValueError(f"out at {out.data.ptr:#x} is not {self.align_out}-byte aligned for this plan")
        if self.readies is not None:
            return self._call_sm90(x, out)
        words = self.words.copy()      # a copy per call: plans may be shared between threads
        words[self.word_b] = x.data.ptr
        words[self.word_d] = out.data.ptr
        if self.c_bias is None:
            words[self.word_c] = out.data.ptr
        self.function(self.launch.grid, self.threads, (words.view(self.record),), shared_mem=self.shared_bytes)
        return out

    def _call_sm90(self, x, out):
        key = (x.data.ptr, out.data.ptr)
        ready = self.readies.get(key)
        if ready is None:   # a new pointer pair: the setup entry builds its Params (one more launch)
            c_ptr = out.data.ptr if self.c_bias is None else self.c_bias.data.ptr
            ready = self.ready_for(x.data.ptr, c_ptr, out.data.ptr)
            with self.readies_lock:
                if len(self.readies) >= 64:
                    self.readies.pop(next(iter(self.readies)))
                self.readies[key] = ready
        sm90.launch(self.loaded, self.x_key[3], ready)
        return out


def plan(sw, x, **options) -> Plan:
    """A reusable call of cs.matmul(sw, x, **options) for inputs shaped like x (see Plan)."""
    return Plan(sw, x, **options)


