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
too; a stream-K tail twin's launch is always made anew in a capture, with a workspace of
the graph's own, since its eager launches share their stream's). Other cases (sm80 split-K, padded M or K) run cs.matmul with the plan's options:
the same result and kernel choice, more host time. A plan multiplies by the weight's
arrays as they are when it is made: a later `sw.values = ...` on the caller's matrix
reaches neither its direct launches (their Params hold the pointers) nor the others.
"""
from __future__ import annotations

import copy

from ..describe import catalog, dtypes
from ..formats.matrices import SparseMatrix
from ..launch import graphs, pdl, stream_workspaces
from ..plan import plans
from . import eager, operands
from .interop import is_torch, torch_dtype, torch_io, torch_stream, torch_stream_pointer
from .matmul import matmul


def _convert_metadata_now(sw, atom_k: int) -> None:
    """A kernel of the other metadata atom converts sw's metadata once: here, at plan
    time, waited for, rather than inside a first call a CUDA graph may be capturing."""
    if not sw.holds_metadata_for(atom_k):
        import cupy

        sw.metadata_for(atom_k)
        cupy.cuda.get_current_stream().synchronize()
        sw.metadata_for(atom_k)   # now seen done: any stream or capture uses it as it is


class Plan:
    """cs.matmul(sw, x, **options) made once, called per x (see the module docstring)."""

    @torch_io(device=True)
    def __init__(self, sw, x, **options):
        import cupy

        x = operands.as_device_array(x, "x", "plan")
        for key in ("out", "info", "workspace"):
            if key in options:
                raise TypeError(f"plan() takes no {key!r}: pass out= to each call")
        options = dict(options)
        self.sw = copy.copy(sw)   # its arrays as they are now (see the module docstring)
        beta = float(options.get("beta", 0.0))
        family = operands.check_sparse(sw, options.get("family"))
        self.c_bias = None
        bias = options.pop("bias", None)
        if bias is not None:   # folded once into the plan's own C
            call = operands.gemm_call(sw, x, family=family, bias=bias, beta=beta, c=options.pop("c", None),
                                      out_dtype=options.get("out_dtype"), bias_in_c=True)
            with cupy.cuda.Device(x.device.id):
                self.c_bias = operands.folded_c(call)
            options["c"], options["beta"] = self.c_bias, 1.0
        self.options = options
        self._ndarray = cupy.ndarray
        self._get_device = cupy.cuda.runtime.getDevice
        self._current_stream = cupy.cuda.get_current_stream
        self.info = {}
        # the family named: this call runs (and prepares) the family plan the plan launches,
        # never a stand-in while that kernel compiles elsewhere (plan.stand_in)
        self.example_out = matmul(sw, x, info=self.info, **{**options, "family": family})
        if self.c_bias is not None:   # the folded bias is read by calls on any stream: done before any
            cupy.cuda.get_current_stream().synchronize()
        self.x_key = (x.shape, x.dtype, x.strides, x.device.id)
        self.direct = False
        if x.ndim == 2 and isinstance(sw, SparseMatrix):
            self._prepare_direct(sw, x, family)

    def _prepare_direct(self, sw, x, family):
        opts = {k: v for k, v in self.options.items() if k not in ("config", "family", "autotune", "force_profile")}
        call = operands.gemm_call(sw, x, family=family, **opts)
        if call.x is not x:   # x itself is staged on every call: no direct launch
            return
        config = self.options.get("config")
        if isinstance(config, str):
            config = catalog.find(config, family)
        self.family_plan = fam = plans.get(call.problem, config)
        p = call.problem
        if not fam.direct or (p.epilogue.reads_c and self.c_bias is None):
            return
        self.direct = True
        self.np_out = dtypes.numpy_dtype(p.element_out)
        self._torch_want = None   # what a torch x and out must be, found on the first torch call
        self.out_shape = (p.m, p.n)
        self.out_strides = (fam.out_pitch * self.np_out.itemsize, self.np_out.itemsize)
        c_ptr = None if self.c_bias is None else self.c_bias.data.ptr
        if fam.family == "sm90":
            self.align_x = self.align_out = 16
            self.bound = None
            _convert_metadata_now(sw, fam.atom_k)
        else:
            self.align_x = fam.alignment_b * x.dtype.itemsize
            self.align_out = fam.alignment_c * self.np_out.itemsize
            self.bound = fam.bind(sw, c_ptr)
        self.c_ptr = c_ptr
        self._readies = {}   # sm90: built launches per (x, out) pointer pair and stream
        self._agains = {}    # sm90: the repeated ones, per stream, made again as they are (keep_again)

    def _torch_out(self, x, **_):
        """For a torch x: the torch tensor a direct call writes."""
        import torch

        if not self.direct or not getattr(x, "is_cuda", False):
            return None
        return torch.empty(self.out_shape, dtype=torch_dtype(self.np_out), device=x.device)

    def __call__(self, x, out=None):
        if type(x) is self._ndarray and (out is None or type(out) is self._ndarray):
            return self._cupy_call(x, out)   # no torch operand: nothing to convert
        if self.direct and is_torch(x):
            done = self._torch_call(x, out)
            if done is not None:
                return done
        return self._call(x, out=out)   # by keyword: torch_io's make_out looks for it

    def _torch_wanted(self) -> tuple:
        """What a torch x and out must be for a direct call: the plan's x and out as
        torch describes tensors (element strides), and the torch module."""
        import torch

        item, out_dtype = self.x_key[1].itemsize, torch_dtype(self.np_out)
        # D of a call without out: empty_like of a stride-0 view parses less than torch.empty
        template = None if out_dtype is None else eager.one_element(out_dtype, self.x_key[3]).expand(*self.out_shape)
        self._torch_want = (self.x_key[0], tuple(s // item for s in self.x_key[2]), torch_dtype(self.x_key[1]),
                            out_dtype, tuple(s // self.np_out.itemsize for s in self.out_strides),
                            self.x_key[3], torch, self._get_device, template, torch_stream_pointer())
        return self._torch_want

    def _torch_call(self, x, out):
        """A direct call on torch tensors from their attributes and pointers, on torch's
        current stream; None when they do not fit the plan as they are (the general path
        says why or stages them)."""
        shape, strides, dtype, out_dtype, out_strides, device, torch, current_device, template, stream_of = \
            self._torch_want or self._torch_wanted()
        x_ptr = x.data_ptr()
        if out_dtype is None or x.shape != shape or x.dtype != dtype or x.stride() != strides \
                or x.get_device() != device or x_ptr % self.align_x or current_device() != device:
            return None
        if out is None:
            out = torch.empty_like(template)
            out_ptr = out.data_ptr()
        elif (type(out) is not type(x) and not is_torch(out)) or out.shape != self.out_shape \
                or out.dtype != out_dtype or out.stride() != out_strides or out.get_device() != device \
                or (out_ptr := out.data_ptr()) % self.align_out:
            return None
        again = self._agains.get((x_ptr, out_ptr, stream_of(device), pdl.ENABLED))
        if again is not None and self.c_bias is None:
            again.fire()   # a repeated launch (_launch, without the lookups)
        else:
            self._launch(x_ptr, out_ptr, torch_stream(device))
        return out

    @torch_io(make_out=_torch_out, device=True)
    def _call(self, x, out=None):
        import cupy

        if not isinstance(x, cupy.ndarray):
            x = operands.as_device_array(x, "x")
        if out is not None and not isinstance(out, cupy.ndarray):
            if self.direct:
                self._check_x(x)
            return matmul(self.sw, x, out=out, **self.options)   # cs.matmul names what is wrong with out
        return self._cupy_call(x, out)

    def _cupy_call(self, x, out=None):
        """A call on a CuPy x (and out, or None): the direct launch where x and out are as
        planned, else cs.matmul with the plan's options (it stages an offset view of x, or
        an out of other strides or alignment, and names what is wrong with a wrong one)."""
        if not self.direct:
            return matmul(self.sw, x, out=out, **self.options)
        data = x.data
        if (x.shape, x.dtype, x.strides, data.device_id) != self.x_key:
            self._check_x(x)
        if out is None:
            out = self._new_out()
        else:
            out_data = out.data
            if not (out.strides == self.out_strides and out.dtype == self.np_out and out.shape == self.out_shape
                    and out_data.device_id == self.x_key[3] and out_data.ptr % self.align_out == 0):
                return matmul(self.sw, x, out=out, **self.options)
        if data.ptr % self.align_x:
            return matmul(self.sw, x, out=out, **self.options)
        self._launch(data.ptr, out.data.ptr)
        return out

    def _check_x(self, x) -> None:
        """A direct plan serves x of its example's shape, dtype, strides and device only."""
        if (x.shape, x.dtype, x.strides, x.data.device_id) != self.x_key:
            raise ValueError(f"x is {x.shape} {x.dtype} with strides {x.strides} on device {x.data.device_id}; "
                             f"this plan was made for {self.x_key[0]} {self.x_key[1]} with strides "
                             f"{self.x_key[2]} on device {self.x_key[3]}: make another plan")

    def _new_out(self):
        import cupy

        with cupy.cuda.Device(self.x_key[3]):
            return cupy.empty(self.out_shape, dtype=self.np_out)

    def _launch(self, x_ptr: int, out_ptr: int, stream=None) -> None:
        """The direct launch on `stream` (default: the current one)."""
        if self.c_bias is not None:   # a graph capturing this call keeps the C it reads past the plan
            import cupy

            graphs.hold((stream or cupy.cuda.get_current_stream()).ptr, self.c_bias)
        if self.bound is not None:
            self.bound(x_ptr, out_ptr, stream)
            return
        stream = stream or self._current_stream()
        again_key = (x_ptr, out_ptr, stream.ptr, pdl.ENABLED)
        again = self._agains.get(again_key)
        if again is not None:   # a repeated launch
            return again.fire()
        key = (x_ptr, out_ptr, stream_workspaces.identity(stream))   # a tail twin's launch takes its stream's workspace
        ready = self._readies.get(key)
        if ready is None or stream_workspaces.held_in_capture(ready, stream):
            # new pointers: the family plan builds (or finds) their Params; or a capture of a
            # launch on its stream's shared workspace: one of the graph's own
            c_ptr = out_ptr if self.c_ptr is None else self.c_ptr
            ready = self.family_plan.ready(self.sw, (x_ptr, c_ptr, out_ptr), None, stream)
            if not ready.captured:   # Params a capture's setup writes exist after a replay only
                if len(self._readies) >= 64:
                    self._readies.clear()
                self._readies[key] = ready
        elif not ready.by_value and (ready.workspace is None or ready.shared_workspace):
            # by value once its Params' copy has arrived (a tail twin's too: its stream's workspace)
            c_ptr = out_ptr if self.c_ptr is None else self.c_ptr
            family = self.family_plan
            ready = family.by_value(ready, family.ready_key(self.sw, (x_ptr, c_ptr, out_ptr), stream), stream=stream)
            if not ready.captured:   # a capture's launch, on a workspace of the graph's own, serves it alone
                self._readies[key] = ready
        self.family_plan.launch(ready, stream)
        self.family_plan.keep_again(self._agains, again_key, ready, stream)


@torch_io(device=True)
def plan(sw, x, **options) -> Plan:
    """A reusable call of cs.matmul(sw, x, **options) for inputs shaped like x (see Plan)."""
    return Plan(sw, x, **options)
