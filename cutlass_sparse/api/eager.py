"""The eager fast path. A call that repeats an earlier call's shapes, strides, alignment
classes, dtypes, options and device is the same Problem, so it skips the checks and the
Problem building and runs the plan it had: one dict lookup on a key of raw attributes,
then the plan's own launch (pointers are the only thing that changed).

A call whose N is new finds the plan of an earlier call of its class: the same operands
but for N, laid out the same way (x [K, N] and out [M, N], each compact row- or
column-major), N in the same range (selection.n_range) and as aligned. Its
Problem is that call's with N replaced, and its plan is made around the same kernel
(plan.plans): no checks, no selection, no device synchronization. A class's first call
of a kernel has the device build Params for the N of its range that run that kernel (a
range may hold two: the tail twin's) on a side stream (Sm90Plan.build_ahead) and
remembers their plans under the keys those calls will have, so the range's new N are one
lookup and launch the GEMM alone.

Only plain calls take it (a 2-D x, a SparseMatrix on the device, no c, workspace, info
or profiling; a bias only where the kernel adds it as a vector, and then no N class); a
call whose operands the api staged itself (a strided x, an out that is not row-major) is
never remembered. A new profiler record empties it. The keys are api.eager_keys'.

torch calls build the same key from the tensors' attributes (no CuPy view): a call that
went the full path is found by the next one. A torch call without `out` keys the [M, N]
row-major output the library allocates (torch.empty) before allocating it, so a hit
allocates only that; cs.linear keys its x.T and output without making either view.
"""
from __future__ import annotations

import threading

from ..describe import dtypes, selection
from ..describe.problem import Operand
from ..launch import graphs, torch_memory
from ..plan import plans
from ..plan import records
from . import interop, operands
from .eager_keys import X_SHAPE, class_key, key_for_n, linear_key

MAX_ENTRIES = 8192  # the plans built ahead for a range's N included
AHEAD = 256         # N values of a range whose Params are built ahead on its first new N


class Entry:
    """A remembered call: its plan and Problem, D's [M, N], and what a torch call that
    allocates D makes it from (found on the first such call)."""

    __slots__ = ("plan", "problem", "out_shape", "direct", "_makers", "_bias")

    def __init__(self, plan, problem):
        self.plan, self.problem = plan, problem
        self.out_shape = (problem.m, problem.n)
        # launched from pointers alone: nothing staged, C not read (the torch hits' test)
        self.direct = plan.direct and not problem.epilogue.reads_c
        self._makers = self._bias = None

    def bias_vector(self, bias, stream_ptr: int):
        """The float32 [M] vector of a torch row bias, converted on the stream of the call
        and kept for the next call with the same tensor, at the same version (an in-place
        change bumps it), on the same stream (where the conversion is ordered before it).
        The kept tensor is held, so its memory cannot meanwhile be another tensor's. A call
        being captured in a CUDA graph gets a vector of its own, kept by the graph: a kept
        one may be freed while the graph lives, and one made in the capture exists only
        after a replay."""
        if graphs.capturing(stream_ptr):
            vector = bias.reshape(-1).float().contiguous()
            graphs.hold(stream_ptr, vector)
            return vector
        kept, version = self._bias, bias._version
        if kept is not None and kept[0] is bias and kept[1] == version and kept[2] == stream_ptr:
            return kept[3]
        vector = bias.reshape(-1).float().contiguous()
        self._bias = (bias, version, stream_ptr, vector)
        return vector

    def new_out(self, x):
        """A torch tensor for D on x's device, for a torch call without out: [M, N]
        row-major; for a Problem whose D the library allocates (out None), [M, N] in rows
        of the plan's leading dimension."""
        makers = self._makers
        maker = makers[0] if makers else None
        return maker() if maker else self._allocated(0, x.device)

    def linear_out(self, x, col: bool):
        """cs.linear's [N, M] result on x's device, whose transpose is D: column-major D
        (col) is a contiguous [N, M]; row-major D is [N, M] with strides (1, N)."""
        makers, kind = self._makers, 1 if col else 2
        maker = makers[kind] if makers else None
        return maker() if maker else self._allocated(kind, x.device)

    def cupy_linear_out(self, col: bool):
        """linear_out for a CuPy call, on the current device: column-major D is a
        contiguous [N, M]; row-major D is allocated [M, N] and handed back transposed."""
        import cupy

        (m, n), dtype = self.out_shape, dtypes.numpy_dtype(self.problem.element_out)
        return cupy.empty((n, m), dtype=dtype) if col else cupy.empty((m, n), dtype=dtype).T

    def _spec(self, kind: int) -> tuple:
        """(shape, strides or None, view or None) of new_out (kind 0) or linear_out (1:
        column-major D, 2: row-major D)."""
        (m, n), pitch = self.out_shape, self.plan.out_pitch
        if kind == 2:
            return (n, m), (1, n), None
        if kind == 0 and self.problem.out is None and pitch != n:   # rows of the plan's pitch, seen as [M, N]
            return (m, pitch), None, ((m, n), (pitch, 1))
        return ((m, n) if kind == 0 else (n, m)), None, None

    def _allocated(self, kind: int, device):
        """An allocation before the kind's maker exists: the first is made directly (a new
        N's entry may serve one call, and a maker costs about two allocations to make); the
        second makes the maker. empty_like of a stride-0 view of one element allocates a
        compact tensor of the view's shape with less argument parsing on every later call
        than torch.empty(shape, dtype=, device=); new_empty(_strided) of that element, where
        no view is made, parses no dtype or device either."""
        import torch

        dtype = torch_out_dtype(self.problem.element_out)
        shape, strides, view = self._spec(kind)
        if self._makers is None:
            self._makers = [None, None, None]   # per kind: None unused, False used once, then its maker
        if self._makers[kind] is None:   # new_empty of a kept tensor: no dtype and device to parse
            self._makers[kind] = False
            one = one_element(dtype, device)
            made = one.new_empty_strided(shape, strides) if strides else one.new_empty(shape)
            return made if view is None else made.as_strided(*view)
        if strides:
            new_empty_strided = one_element(dtype, device).new_empty_strided

            def make():
                return new_empty_strided(shape, strides)
        else:
            empty_like, template = torch.empty_like, one_element(dtype, device).expand(*shape)
            if view is None:
                def make():
                    return empty_like(template)
            else:
                def make():
                    return empty_like(template).as_strided(*view)
        self._makers[kind] = make
        return make()


_ones: dict[tuple, object] = {}   # (torch dtype, device) -> a tensor of one element


def one_element(dtype, device):
    """One element of a dtype on a device, kept: what D's templates (Entry._allocated) view."""
    found = _ones.get((dtype, device))
    if found is None:
        import torch

        found = _ones[(dtype, device)] = torch.empty(1, dtype=dtype, device=device)
    return found


_torch_outs: dict[str, object] = {}   # output type name -> torch dtype


def torch_out_dtype(element_out: str):
    """The torch dtype of an output type (None for one torch has no dtype for here)."""
    found = _torch_outs.get(element_out)
    if found is None:
        found = _torch_outs[element_out] = interop.torch_dtype(dtypes.numpy_dtype(element_out))
    return found


_entries: dict[tuple, Entry] = {}      # exact key -> its entry
_classes: dict[tuple, Entry] = {}      # class key -> the entry of its latest call
_ahead: set[tuple] = set()             # (class, kernel) whose N of the class's range were built ahead
_lock = threading.RLock()   # clear() runs inside _keep
_generation = records.generation


_get_device = None


def _current_device() -> int:
    """The current CUDA device (CuPy's runtime call, found once)."""
    global _get_device
    if _get_device is None:
        import cupy

        _get_device = cupy.cuda.runtime.getDevice
    return _get_device()


def _capturing() -> bool:
    """Whether the current stream is capturing a CUDA graph."""
    import cupy

    return graphs.capturing(cupy.cuda.get_current_stream().ptr)


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
    problem = _with_n(entry.problem, fast_key[X_SHAPE][1])
    return Entry(plans.get(problem, entry.plan.asked[0]), problem)   # the caller's config, if it named one


def _build_ahead(fast_key: tuple, entry: Entry, klass: tuple | None) -> None:
    """A class's first call of a kernel has the device build Params for the N of its range
    that run that kernel (sm90), so they launch the GEMM alone; their plans are remembered
    under the keys those calls will have. Where the range holds two kernels (the tail
    twin's), the other's N are built too if that kernel has run here already (its pointers
    are mapped), else on the first call that runs it (lookup): mapping synchronizes, which
    only a call of that kernel should pay."""
    plan, problem = entry.plan, entry.problem
    if klass is None or plan.family != "sm90" or _capturing() or not _claim(klass, plan):
        return   # in a capture: pinned memory, a side stream and allocations it may forbid; a later call builds
    n = problem.n
    others = [v for v in range(selection.n_range_start(n), selection.n_range(n) + 1)
              if v != n and (v % 8 == 0) == (n % 8 == 0) and (v == 1) == (n == 1)]
    problems = [_with_n(problem, v) for v in others[:AHEAD]]
    same = plans.sharing(plan, problems)
    built = plan.build_ahead(same)
    shared = {q.n for q in same}
    rest = [q for q in problems if q.n not in shared]
    other = plans.at_hand(rest[0], plan.asked[0]) if rest else None
    if other is not None:   # the range's other kernel (a tail twin's persistent tile, or the twin)
        theirs = {}
        if other.pointers_mapped and _claim(klass, other):
            theirs = other.build_ahead(rest)
        built = {rest[0].n: other, **theirs, **built}
    for p in problems:
        if p.n in built:
            _keep(key_for_n(fast_key, p.n), Entry(built[p.n], p), None)


def _claim(klass: tuple, plan) -> bool:
    """Whether this call builds the class's N ahead for plan's kernel: the first to ask does
    (two threads at a class's first call would otherwise both build its range)."""
    with _lock:
        if (klass, plan.compiled.key) in _ahead:
            return False
        _ahead.add((klass, plan.compiled.key))
        return True


def lookup(fast_key: tuple) -> Entry | None:
    """The entry for a key: remembered, else made from its class's, else None."""
    global _generation
    if _generation != records.generation:
        clear()
        _generation = records.generation
    try:
        entry = _entries.get(fast_key)
    except TypeError:   # an unhashable option (activation=[]): never remembered; the full path names it
        return None
    if entry is not None:
        return entry
    klass = class_key(fast_key)
    sibling = None if klass is None else _classes.get(klass)
    if sibling is None:
        return None
    entry = _for_n(sibling, fast_key)
    _keep(fast_key, entry, klass)
    _build_ahead(fast_key, entry, klass)   # the class's first call of this kernel (the range's other one)
    return entry


def clear() -> None:
    """Forget every remembered call (a new profiler record, a full cache; tests)."""
    with _lock:
        _entries.clear()
        _classes.clear()
        _ahead.clear()


def _keep(fast_key: tuple, entry: Entry, klass: tuple | None) -> None:
    with _lock:
        if len(_entries) >= MAX_ENTRIES:
            clear()
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
    plan, problem = entry.plan, entry.problem
    if _current_device() != problem.device_id:
        import cupy

        with cupy.cuda.Device(problem.device_id):
            return run(entry, sw, x, out, bias)
    if bias is None and plan.direct:   # allocates nothing but what it returns
        return plan.run(sw, x, out, None, None)
    with graphs.Temporaries():   # a staged operand, a bias: kept by a graph being captured
        if bias is not None and problem.epilogue.scales != "none":   # the epilogue adds it as a vector
            p = problem
            vector = operands.bias_vector(bias, p.m, dtypes.numpy_dtype(p.element_out), p.device_id)
            return plan.run(sw, x, out, None, None, scales=operands.row_bias_scales(vector))
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
        out = entry.new_out(x)
    stream = interop.torch_stream(index)
    if bias is not None:
        vector = entry.bias_vector(bias, stream.ptr)
        plan.launch_direct(sw, x.data_ptr(), out.data_ptr(), stream, scales=(0, 0, vector.data_ptr()))
    elif entry.direct:
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
    if entry is None or not entry.direct or not takes_torch_bias(entry, bias):
        return None
    y = entry.linear_out(x, found[1])   # [tokens, features], D's transpose
    torch_run(entry, sw, x, y, bias)           # direct: x.T and D are pointers here
    return y


def cupy_linear(x, sw, options: tuple):
    """cs.linear(x, sw) for a CuPy x whose call (linear_key) was seen before, without a
    bias: the [tokens, features] result allocated as linear's call allocates it (D's
    transpose), the GEMM launched from pointers on the current stream; None on a miss."""
    found = linear_key(x, sw, options)
    entry = None if found is None else lookup(found[0])
    if entry is None or not entry.direct or _current_device() != entry.problem.device_id:
        return None
    y = entry.cupy_linear_out(found[1])
    entry.plan.launch_direct(sw, x.data.ptr, y.data.ptr)
    return y


def _bias_c(problem, bias):
    """C with the bias folded in, as on the full path (the same checks passed for this key)."""
    if bias is None:
        return None
    p = problem
    return operands.with_bias(bias, None, 0.0, p.m, p.n, dtypes.numpy_dtype(p.element_out), p.device_id,
                              p.c.layout)
