"""The eager fast path. A call that repeats an earlier call's shapes, strides, alignment
classes, dtypes, options and device is the same Problem, so it skips the checks and the
Problem building and runs the plan it had: one dict lookup on a key of raw attributes,
then the plan's own launch (pointers are the only thing that changed).

A call whose N is new finds the plan of an earlier call of its class: the same operands
but for N, laid out the same way (x [K, N] and out [M, N], each compact row- or
column-major), N in the same range (selection.n_range) and as aligned. Its
Problem is that call's with N replaced, and its plan is made around the same kernel
(plan.plans): no checks, no selection, no device synchronization. A class's first call
has the device build Params for the rest of its N range on a side stream
(Sm90Plan.build_ahead) and remembers their plans under the keys those calls will have,
so the range's new N are one lookup and launch the GEMM alone.

Only plain calls take it (a 2-D x, a SparseMatrix on the device, no c, bias, workspace,
info or profiling); a call whose operands the api staged itself (a strided x, an out that
is not row-major) is never remembered. A new profiler record empties it.

torch calls build the same key from the tensors' attributes (no CuPy view): a call that
went the full path is found by the next one. A torch call without `out` keys the [M, N]
row-major output the library allocates (torch.empty) before allocating it, so a hit
allocates only that; cs.linear keys its x.T and output without making either view.
"""
from __future__ import annotations

import threading

import numpy as np

from ..describe import dtypes, selection
from ..describe.problem import Operand
from ..formats.matrices import SparseMatrix
from ..launch import graphs, torch_memory
from ..plan import plans
from ..plan import records
from . import interop, operands

MAX_ENTRIES = 8192  # the plans built ahead for a range's N included
AHEAD = 256         # N values of a range whose Params are built ahead on its first new N

# A key's fields: head (4), x (5: shape, strides, dtype, align, device), options, out, bias.
_X_SHAPE, _X_STRIDES, _OPTIONS, _OUT, _BIAS = 4, 5, 9, 10, 11
_OUT_DTYPE = 4     # in options


class Entry:
    """A remembered call: its plan and Problem, D's [M, N] and its torch dtype (found on
    the first torch call that allocates D)."""

    __slots__ = ("plan", "problem", "out_shape", "torch_out", "_empty", "_bias")

    def __init__(self, plan, problem):
        self.plan, self.problem = plan, problem
        self.out_shape = (problem.m, problem.n)
        self.torch_out = self._empty = self._bias = None

    def bias_vector(self, bias, stream_ptr: int):
        """The float32 [M] vector of a torch row bias, converted on the stream of the call
        and kept for the next call with the same tensor, at the same version (an in-place
        change bumps it), on the same stream (where the conversion is ordered before it).
        The kept tensor is held, so its memory cannot meanwhile be another tensor's."""
        kept, version = self._bias, bias._version
        if kept is not None and kept[0] is bias and kept[1] == version and kept[2] == stream_ptr:
            return kept[3]
        vector = bias.reshape(-1).float().contiguous()
        self._bias = (bias, version, stream_ptr, vector)
        return vector

    def new_out(self, device, transposed: bool = False):
        """A torch tensor for D: [M, N] row-major, or (transposed) [N, M], whose .T is D
        column-major; for a Problem whose D the library allocates (out None), [M, N] in
        rows of the plan's leading dimension."""
        if self._empty is None:
            import torch

            self.torch_out, self._empty = torch_out_dtype(self.problem.element_out), torch.empty
        m, n = self.out_shape
        if self.problem.out is None and self.plan.ldd != n:
            return self._empty((m, self.plan.ldd), dtype=self.torch_out, device=device).narrow(1, 0, n)
        return self._empty((n, m) if transposed else (m, n), dtype=self.torch_out, device=device)


_torch_outs: dict[str, object] = {}   # output type name -> torch dtype


def torch_out_dtype(element_out: str):
    """The torch dtype of an output type (None for one torch has no dtype for here)."""
    found = _torch_outs.get(element_out)
    if found is None:
        found = _torch_outs[element_out] = interop.torch_dtype(dtypes.numpy_dtype(element_out))
    return found


_entries: dict[tuple, Entry] = {}      # exact key -> its entry
_classes: dict[tuple, Entry] = {}      # class key -> the entry of its latest call
_ahead: set[tuple] = set()             # classes whose range was built ahead
_lock = threading.Lock()
_generation = records.generation
_ndarray = None


_get_device = None


def _array_type():
    global _ndarray
    if _ndarray is None:
        import cupy

        _ndarray = cupy.ndarray
    return _ndarray


def _current_device() -> int:
    """The current CUDA device (CuPy's runtime call, found once)."""
    global _get_device
    if _get_device is None:
        import cupy

        _get_device = cupy.cuda.runtime.getDevice
    return _get_device()


def _head(sw):
    """The weight's part of a key, or None when the fast path does not take sw."""
    if type(sw) is not SparseMatrix or type(sw.values) is not _array_type():
        return None
    return sw.shape, sw.dtype, sw.layout, sw.values.data.device_id


def _cupy_attrs(array):
    data = array.data
    return array.shape, array.strides, array.dtype, data.ptr & 15, data.device_id


def key(sw, x, out, bias, options: tuple) -> tuple | None:
    """The fast key of a CuPy call, or None when the fast path does not take it."""
    head = _head(sw)
    ndarray = _array_type()
    if head is None or type(x) is not ndarray:
        return None
    found = (*head, *_cupy_attrs(x), options)
    for array in (out, bias):
        if array is None:
            found += (None,)
        elif type(array) is not ndarray:
            return None
        else:
            found += (_cupy_attrs(array),)
    return found


def torch_attrs(tensor):
    """(shape, byte strides, NumPy dtype, address mod 16, device) of a 2-D CUDA tensor, as
    _cupy_attrs of a CuPy view of it, or None."""
    dtype = interop.numpy_dtype(tensor.dtype)
    if dtype is None or not tensor.is_cuda or tensor.dim() != 2:
        return None
    item = dtype.itemsize
    s0, s1 = tensor.stride()
    return tensor.shape, (s0 * item, s1 * item), dtype, tensor.data_ptr() & 15, tensor.get_device()


def torch_bias_attrs(bias):
    """A torch bias's part of a key ([M] or [M, 1], as _cupy_attrs of a CuPy view of it),
    None for no bias, False where the fast path does not take it."""
    if bias is None:
        return None
    dtype = interop.numpy_dtype(bias.dtype) if type(bias).__module__.startswith("torch") else None
    if dtype is None or not bias.is_cuda or bias.dim() not in (1, 2):
        return False
    item = dtype.itemsize
    return (tuple(bias.shape), tuple(s * item for s in bias.stride()), dtype, bias.data_ptr() & 15,
            bias.get_device())


_INT8, _INT32 = np.dtype(np.int8), np.dtype(np.int32)


def _allocated_out(m: int, n: int, dtype, device: int, col: bool = False) -> tuple:
    """The key part of a D the library allocates with torch.empty (row-major [M, N], or
    col: [N, M] seen as its transpose): aligned, as every torch allocation is."""
    out = _INT32 if dtype is _INT8 else dtype   # the default output type (NumPy's dtypes are singletons)
    item = out.itemsize
    return (m, n), ((item, m * item) if col else (n * item, item)), out, 0, device


def torch_key(sw, x, out, options: tuple, bias=None) -> tuple | None:
    """The key of a torch call, equal to key() of CuPy views of its tensors. out=None: the
    key of the row-major D the caller (the torch wrapper) allocates on a hit, which needs
    the default output type (None for another)."""
    head = _head(sw)
    x_attrs = None if head is None else torch_attrs(x)
    bias_attrs = torch_bias_attrs(bias)
    if x_attrs is None or bias_attrs is False:
        return None
    if out is not None:
        out_attrs = torch_attrs(out)
        if out_attrs is None:
            return None
    elif options[_OUT_DTYPE] is not None:
        return None
    elif padded_out(head[2], x_attrs[0][1], x_attrs[2].itemsize):
        out_attrs = None   # the library's own padded D, as a CuPy call without out keys it
    else:
        out_attrs = _allocated_out(head[0][0], x_attrs[0][1], x_attrs[2], x_attrs[4])
    return (*head, *x_attrs, options, out_attrs, bias_attrs)


def padded_out(layout: str, n: int, item: int) -> bool:
    """Whether the [M, N] D the library allocates for a call has a padded leading
    dimension: sm90 with N not in whole 16-byte vectors of the inputs (the kernel runs N
    rounded up; launch.sm90). Returned as an [M, N] view: nothing is copied."""
    return layout == "sm90" and (n * item) % 16 != 0


def linear_key(x, sw, options: tuple, bias=None) -> tuple[tuple, bool] | None:
    """(key, D column-major) of cs.linear(x, sw) on a torch [tokens, K] x: the key of the
    matmul linear makes of it (sw @ x.T into the D it allocates, column-major for token
    counts a row-major D cannot take in place); None where linear makes no such call."""
    head = _head(sw)
    x_attrs = None if head is None or head[2] != "sm90" or options[_OUT_DTYPE] is not None else torch_attrs(x)
    bias_attrs = torch_bias_attrs(bias)
    if x_attrs is None or bias_attrs is False:
        return None
    (n, k), (s0, s1), dtype, align, device = x_attrs
    col = selection.linear_out_layout(n, dtype.itemsize) == "col"
    return (*head, (k, n), (s1, s0), dtype, align, device, options,
            _allocated_out(head[0][0], n, dtype, device, col), bias_attrs), col


def _compact(shape, strides, item) -> str | None:
    """'C' for a compact row-major 2-D array, 'F' for compact column-major, else None."""
    rows, cols = shape
    if strides == (cols * item, item):
        return "C"
    if strides == (item, rows * item):
        return "F"
    return None


def class_key(fast_key: tuple) -> tuple | None:
    """The class of a call (see the module docstring): its key without N, or None."""
    if fast_key[_BIAS] is not None or len(fast_key[_X_SHAPE]) != 2:
        return None
    (k, n), item = fast_key[_X_SHAPE], fast_key[6].itemsize
    x_kind = _compact((k, n), fast_key[_X_STRIDES], item)
    out = fast_key[_OUT]
    if out is not None:   # the [M, N] of this call's own N, compact
        out_kind = _compact(out[0], out[1], out[2].itemsize)
        if out[0] != (fast_key[0][0], n) or out_kind is None:
            return None
        out = (out_kind, *out[2:])
    if x_kind is None or n == 0:
        return None
    return (*fast_key[:4], k, x_kind, *fast_key[6:9], fast_key[_OPTIONS], out,
            selection.n_range(n), n % 8 == 0, n == 1)


def _with_n(problem, n: int):
    """A Problem of the same class with another N (row-major operands' leading dimension is N)."""
    x = problem.x
    if x.layout == "row":
        x = Operand("row", n, x.align)
    out = problem.out
    if out is not None and out.layout == "row":
        out = Operand("row", n, out.align)
    return problem.with_(n=n, x=x, out=out)


def _for_n(entry: Entry, fast_key: tuple) -> Entry:
    """The entry for a call of an entry's class with its own N."""
    problem = _with_n(entry.problem, fast_key[_X_SHAPE][1])
    return Entry(plans.get(problem), problem)


def _key_for_n(fast_key: tuple, n: int) -> tuple:
    """The key of a call of fast_key's class with N = n (compact operands, as class_key
    requires: x's and out's strides follow from N and their layout)."""
    k, item = fast_key[_X_SHAPE][0], fast_key[6].itemsize
    x_row = _compact(fast_key[_X_SHAPE], fast_key[_X_STRIDES], item) == "C"
    key = list(fast_key)
    key[_X_SHAPE], key[_X_STRIDES] = (k, n), ((n * item, item) if x_row else fast_key[_X_STRIDES])
    out = fast_key[_OUT]
    if out is not None:
        (m, _), strides, dtype = out[:3]
        row = _compact(out[0], strides, dtype.itemsize) == "C"
        key[_OUT] = ((m, n), (n * dtype.itemsize, dtype.itemsize) if row else strides, *out[2:])
    return tuple(key)


def _build_ahead(fast_key: tuple, entry: Entry, klass: tuple | None) -> None:
    """A class's first call has the device build Params for the rest of its N range (sm90),
    so the range's other N launch the GEMM alone; their plans are remembered under the
    keys those calls will have."""
    plan, problem = entry.plan, entry.problem
    if klass is None or plan.family != "sm90" or klass in _ahead:
        return
    _ahead.add(klass)
    n = problem.n
    top = selection.n_range(n)
    others = [v for v in range(1 if top == 16 else top // 2 + 1, top + 1)
              if v != n and (v % 8 == 0) == (n % 8 == 0) and (v == 1) == (n == 1)]
    problems = [_with_n(problem, v) for v in others[:AHEAD]]
    built = plan.build_ahead(problems)
    for p in problems:
        if p.n in built:
            _keep(_key_for_n(fast_key, p.n), Entry(built[p.n], p), None)


def lookup(fast_key: tuple) -> Entry | None:
    """The entry for a key: remembered, else made from its class's, else None."""
    global _generation
    if _generation != records.generation:
        with _lock:
            _entries.clear()
            _classes.clear()
            _ahead.clear()
            _generation = records.generation
    entry = _entries.get(fast_key)
    if entry is not None:
        return entry
    klass = class_key(fast_key)
    sibling = None if klass is None else _classes.get(klass)
    if sibling is None:
        return None
    entry = _for_n(sibling, fast_key)
    _keep(fast_key, entry, klass)
    return entry


def _keep(fast_key: tuple, entry: Entry, klass: tuple | None) -> None:
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            _entries.clear()
            _classes.clear()
            _ahead.clear()
        _entries[fast_key] = entry
        if klass is not None:
            _classes[klass] = entry


def remember(fast_key: tuple, call: operands.GemmCall, x, out, plan) -> None:
    """Keep a plan for calls like this one, if the api staged nothing for it."""
    if call.x is not x or call.out is not out or call.out_target is not None or call.c is not None:
        return
    klass = class_key(fast_key)
    entry = Entry(plan, call.problem)
    _keep(fast_key, entry, klass)
    _build_ahead(fast_key, entry, klass)


def run(entry: Entry, sw, x, out, bias):
    """What cs.matmul returns for a call that hit `entry`."""
    import cupy

    plan, problem = entry.plan, entry.problem
    if cupy.cuda.runtime.getDevice() != problem.device_id:
        with cupy.cuda.Device(problem.device_id):
            return run(entry, sw, x, out, bias)
    if bias is None and plan.direct:   # allocates nothing but what it returns
        return plan.run(sw, x, out, None, None)
    with graphs.Temporaries():   # a staged operand, a bias: kept by a graph being captured
        if bias is not None and problem.epilogue.scales != "none":   # the epilogue adds it as a vector
            p = problem
            vector = operands.bias_vector(bias, p.m, dtypes.numpy_dtype(p.element_out), p.device_id)
            return plan.run(sw, x, out, None, None, scales=(0, 0, vector.data.ptr))
        return plan.run(sw, x, out, _bias_c(problem, bias), None)


def takes_torch_bias(entry: Entry, bias) -> bool:
    """Whether torch_run serves this hit with this bias (None, or a row bias the plan's
    scaled epilogue adds as a vector, launched directly)."""
    return bias is None or (entry.plan.direct and entry.problem.epilogue.scales != "none")


def torch_run(entry: Entry, sw, x, out, bias=None):
    """A torch call that hit `entry`, on torch's current stream: D into `out` (None: a
    torch [M, N] allocated here). A direct plan launches from the tensors' pointers;
    others run on CuPy views. bias: a row bias the plan adds as a float32 vector
    (takes_torch_bias), converted by torch on its stream."""
    plan, problem = entry.plan, entry.problem
    index = problem.device_id
    if _current_device() != index:
        import cupy

        with cupy.cuda.Device(index):
            return torch_run(entry, sw, x, out, bias)
    if out is None:
        out = entry.new_out(x.device)
    stream = interop.torch_stream(index)
    if bias is not None:
        vector = entry.bias_vector(bias, stream.ptr)
        plan.launch_direct(sw, x.data_ptr(), out.data_ptr(), stream, scales=(0, 0, vector.data_ptr()))
    elif plan.direct and not problem.epilogue.reads_c:
        plan.launch_direct(sw, x.data_ptr(), out.data_ptr(), stream)
    elif plan.family == "sm90" and not problem.epilogue.reads_c:
        plan.launch_staged(sw, x.data_ptr(), out.data_ptr(), stream, allocate=torch_memory.allocator(index))
    else:
        with stream, torch_memory.using(index), graphs.Temporaries(stream):
            plan.run(sw, interop.to_array(x), interop.to_array(out), None, None)
    return out


def torch_linear(x, sw, options: tuple, bias=None):
    """cs.linear(x, sw, bias) for a torch x whose call (linear_key) was seen before: D
    allocated as linear allocates it, the GEMM launched from pointers; None on a miss."""
    found = linear_key(x, sw, options, bias)
    entry = None if found is None else lookup(found[0])
    if entry is None or not entry.plan.direct or entry.problem.epilogue.reads_c or not takes_torch_bias(entry, bias):
        return None
    col = found[1]
    y = entry.new_out(x.device, transposed=col)   # [tokens, features] (D column-major), else D
    torch_run(entry, sw, x, y, bias)              # direct: x.T and D are pointers here
    return y if col else y.T


def _bias_c(problem, bias):
    """C with the bias folded in, as on the full path (the same checks passed for this key)."""
    if bias is None:
        return None
    p = problem
    return operands.with_bias(bias, None, 0.0, p.m, p.n, dtypes.numpy_dtype(p.element_out), p.device_id,
                              p.c.layout)
