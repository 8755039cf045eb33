"""The Hopper family at run time: a setup entry builds a shape's Params and TMA descriptors
on the device and the GEMM runs on them; later calls patch a host copy of those Params
with their pointers and pass it to the GEMM by value (launch.sm90_params).

Launch rules (TMA): every operand's base address 16-byte aligned and its leading
dimension a multiple of 16 bytes; K a multiple of 16 (the sm90 layout's own rule). An
operand that breaks them is staged through an aligned buffer with a padded leading
dimension (x for a decode step is a few KB); D that the library allocates gets a padded
leading dimension and is returned as an [M, N] view.

Sm90Plan is made once per Problem (plan.plans caches it) and run with arrays. Nothing a
new problem shape needs is read back from the device, except once per kernel and device:
the first setup leaves CuTe's TMA recipes, encoded here into descriptor templates (their
static fields are compile-time properties of the kernel). The launch grid of a
persistent-scheduler kernel is computed on the host (launch.grid), and so are the tail
twin's grid and workspace (sm90_prepare.host_stream_k); other stream-K kernels' are read
back once per problem shape.
"""
from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict, deque

from ..build import kernels
from ..describe import dtypes
from ..describe.description import SparseGemmConfig
from ..describe.problem import Operand, Problem
from . import (device, graphs, modules, pdl, retiring, sm90_metadata, sm90_params, sm90_prepare,
               sm90_setup, stream_workspaces)
from .sm90_choice import FAMILY, TMA_ALIGN, kernel_n, resolve, run_order, staged, tma_ready
from .sm90_ready import Ready
from .sm90_staged import StagedRuns
from .staging import KeptBuffers

NO_VECTORS = sm90_params.NO_VECTORS   # the scaled epilogue's vectors, all absent
_ABSENT = tuple(v == 0 for v in NO_VECTORS)
# Params depend only on pointers, strides, sizes and scalars, never on data: a call that
# repeats its pointers (a plan, a benchmark, a weight applied to the same buffers) reuses
# the launch made last time.
PARAMS_PER_PLAN = 64
# A split_k plan's launches each hold a workspace of their own (the partial tiles, tens of MB),
# so it keeps fewer: a loop over new D buffers would otherwise hold up to PARAMS_PER_PLAN of
# them. (A tail twin's launches share their stream's: stream_workspaces.)
WORKSPACES_PER_PLAN = 4
# Setup buffers (device Params, stream-K workspaces) launched on a stream other than the one
# whose pool they came from, each kept until that launch is done (launch)
_read_elsewhere = retiring.Retiring()


class Sm90Plan(StagedRuns):
    """How one Problem runs on the sm90 family: kernel, decomposition, Params per pointer set
    (runs that stage operands: StagedRuns)."""

    family = FAMILY

    def __init__(self, problem: Problem, config: SparseGemmConfig | None = None, choice=None, kernel=None):
        """kernel: (config, scheduling, compiled, loaded) of a plan for the same problem in
        another N of its range (plans.get decides), taken as it is instead of chosen again."""
        self.problem = p = problem
        # what the caller asked for (plans at other N of its range ask for the same)
        self.asked = (config, choice)
        item, out_item = dtypes.numpy_dtype(p.element).itemsize, dtypes.numpy_dtype(p.element_out).itemsize
        # D's layout: a caller's column-major out is written in place (M contiguous); D the
        # library allocates is row-major, a single column column-major (Problem.layout_d).
        self.layout_c = layout_c = p.layout_d
        self.n_k = n_k = kernel_n(p)
        # What the kernel sees: each operand in place where TMA can take it, else staged.
        self.stage_x = n_k != p.n or not tma_ready(p.x, item)
        self.stage_out = n_k != p.n or not tma_ready(p.out, out_item)      # also: D the library allocates
        self.stage_c = p.epilogue.reads_c and (n_k != p.n or not tma_ready(p.c, out_item))
        x = staged(p.x, n_k if p.layout_b == "row" else p.k, item) if self.stage_x else p.x
        d_extent = n_k if layout_c == "row" else p.m
        out = staged(Operand(layout_c, d_extent, TMA_ALIGN), d_extent, out_item) if self.stage_out else p.out
        c = staged(p.c, d_extent, out_item) if self.stage_c else p.c
        self.kernel_problem = p.with_(n=n_k, x=x, out=out, c=c)
        if kernel is None:
            self.config, self.scheduling = resolve(self.kernel_problem, config, choice)
            self.compiled = kernels.get(self.config, device.sm90_target(p.arch, p.device_id))
            self.loaded = modules.load(self.compiled)
            self.swizzle, self.raster = self.config.swizzle, self.config.raster
        else:
            self.config, self.scheduling, self.compiled, self.loaded = kernel
            kind = self.config
            if (kind.element, kind.b_element, kind.element_out, kind.layout_b, kind.layout_c, kind.activation,
                    kind.scales) != (p.element, p.x_element, p.element_out, p.layout_b, layout_c, p.activation,
                                     p.epilogue.scales) or (p.epilogue.reads_c and not kind.reads_c):
                raise AssertionError(f"{kind.name} cannot run {p}: plans.range_key misses what tells them apart")
            # another N of the range: its own swizzle and raster order (a caller's config keeps
            # the ones it names)
            ordered = self.config if config is not None else run_order(self.kernel_problem, self.config, choice)
            self.swizzle, self.raster = ordered.swizzle, ordered.raster
        self.atom_k = self.config.atom_k   # which metadata layout the kernel reads
        self.ldd = out.ld
        self.ldc = c.ld if p.epilogue.reads_c else self.ldd
        # D the library allocates, seen as [M, N]: its row pitch (a single column is contiguous)
        self.out_pitch = self.ldd if layout_c == "row" else p.n if p.n == 1 else None
        # cs.plan and the eager path launch directly when nothing is staged and D is the
        # caller's array, or a plain [M, N] one the caller allocates like it (out_pitch N).
        self.direct = not (self.stage_x or self.stage_c or (p.out is not None and self.stage_out)) and (
            self.out_pitch == p.n or p.out is not None)
        self._readies: OrderedDict[tuple, Ready] = OrderedDict()
        self._staging = KeptBuffers()   # launch_staged's x and D buffers of decode sizes
        self._lock = threading.Lock()   # plans are shared between threads
        self._block = self._setup_block()
        self._block_key = bytes(self._block)   # with its pointer fields zero: what Params depend on besides pointers
        self._gemm = self._setup = self._prepared_value = self._placeholder = None
        self._agains: dict[tuple, pdl.Again] = {}   # launch_direct's repeated launches (keep_again)
        # host copies of Params by which pointers are null (_from_host), and those on their way
        self._host_params: dict[tuple, sm90_params.HostParams] = {}
        self._retired = deque(maxlen=PARAMS_PER_PLAN)   # setup buffers of launches that gave way (ready)
        self._templates: dict[tuple, sm90_params.Template] = {}
        # a tail twin's launches share their stream's workspace of this size (0: none shared)
        self._shared_workspace = sm90_prepare.shared_workspace_bytes(self)

    @property
    def kernel(self) -> tuple:
        """What another N of this problem's range reuses (Sm90Plan(..., kernel=plan.kernel))."""
        return self.config, self.scheduling, self.compiled, self.loaded

    @property
    def workspace_bytes(self) -> int:
        if self.config.tile_scheduler != "streamk":
            return 0
        import cupy

        with cupy.cuda.Device(self.problem.device_id):
            # Sizes depend on shape and scheduling only; dummy aligned addresses stand in for operands.
            scratch = cupy.empty(256, dtype=cupy.uint8)
            p = scratch.data.ptr
            return self._prepared((p, p, p, p, p)).workspace_bytes

    def info(self) -> dict:
        with self._lock:   # other threads insert
            ready = next(reversed(self._readies.values()), None)
        return dict(config=self.config.name, arch=self.problem.arch, from_cache=self.compiled.from_cache,
                    compile_seconds=self.compiled.compile_seconds, grid=None if ready is None else ready.grid,
                    k_padded=False, decomposition=self.scheduling.decomposition, split_k=self.scheduling.splits,
                    swizzle=self.swizzle, raster=self.raster,
                    # what this shape asks for (a tail twin's launch holds its stream's larger buffer)
                    workspace_bytes=0 if ready is None or ready.workspace is None
                    else self._prepared_value.workspace_bytes)

    def ready(self, sw, pointers: tuple[int, int, int], workspace=None, stream=None, scales=NO_VECTORS) -> Ready:
        """The built launch for sw and (b, c, d) pointers: kept, else built now (one setup
        launch). scales: a scaled kernel's float32 vectors (NO_VECTORS). A launch kept with
        Params in the setup's device buffer gives way to one with Params by value once
        their host copy has arrived: the same pointers again (a plan, a benchmark, a
        weight applied to the same buffers) must not stay on the slower launch that reads
        Params from global memory and cannot start programmatically (2-10% at 512 tokens
        on the H100, docs/sweep_pingpong_round2_h100.log)."""
        if self._shared_workspace and workspace is None:   # launches on another stream get its workspace
            import cupy

            stream = stream or cupy.cuda.get_current_stream()
        key = self.ready_key(sw, pointers, stream, workspace, scales)
        ready = self._readies.get(key)   # a dict read needs no lock; inserts and evictions take it
        if ready is not None and not stream_workspaces.held_in_capture(ready, stream):
            return ready if ready.by_value else self.by_value(ready, key, scales, stream)
        ready = self._from_host(key[:5], scales, stream) if workspace is None else None
        if ready is None:
            ready = self._build(key[:5], workspace, stream, scales)
        if ready.captured:   # not for later calls: Params or a workspace that belong to the graph
            return ready
        # launches holding a workspace the library allocated for them alone (split_k's)
        own = workspace is None and ready.workspace is not None and not ready.shared_workspace
        kept = WORKSPACES_PER_PLAN if own else PARAMS_PER_PLAN
        with self._lock:
            self._readies[key] = ready
            while len(self._readies) > kept:
                self._readies.popitem(last=False)
        return ready

    def by_value(self, ready: Ready, key: tuple, scales=NO_VECTORS, stream=None) -> Ready:
        """`ready` (a launch of this plan whose Params the setup wrote on the device), or the
        launch with Params by value that replaces it once their host copy has arrived; never
        a new setup. key: ready()'s key of its pointers (a, e, b, c, d, workspace, ...).
        Stream-K launches on a workspace other than their stream's shared one (the caller's,
        or their own) stay as they are; a launch made for a capture serves it alone."""
        if ready.by_value or (ready.workspace is not None and not ready.shared_workspace):
            return ready
        by_value = self._from_host(key[:5], scales, stream)
        if by_value is None or by_value.captured:
            return by_value or ready
        with self._lock:
            if key in self._readies:
                self._readies[key] = by_value
            # the setup's buffer stays held a while: a launch on another stream may still read it
            self._retired.append(ready.params)
        return by_value

    def ready_key(self, sw, pointers: tuple[int, int, int], stream=None, workspace=None, scales=NO_VECTORS) -> tuple:
        """What ready() keeps a launch under: sw's arrays, the (b, c, d) pointers, the
        workspace and the scale vectors; and the stream, where the launch takes its stream's
        shared workspace."""
        shared = self._shared_workspace and workspace is None and stream is not None
        return (sw.values.data.ptr, sm90_metadata.for_kernel(sw, self.atom_k, stream).data.ptr, *pointers,
                0 if workspace is None else workspace.data.ptr, *scales,
                stream_workspaces.identity(stream) if shared else 0)

    def launch_direct(self, sw, x_ptr: int, d_ptr: int, stream=None, scales=NO_VECTORS) -> None:
        """A direct plan's launch from pointers alone (C is D; nothing staged), on `stream`
        (a CuPy stream; default the current one). A launch repeated with the same weight,
        pointers and stream is made again from what it kept (keep_again)."""
        if stream is None:
            import cupy

            stream = cupy.cuda.get_current_stream()
        key = (sw.values.data.ptr, sm90_metadata.settled_ptr(sw, self.atom_k), x_ptr, d_ptr, stream.ptr, scales,
               pdl.ENABLED)
        again = self._agains.get(key)
        if again is not None:
            return again.fire()
        ready = self.ready(sw, (x_ptr, d_ptr, d_ptr), None, stream, scales)
        self.launch(ready, stream)
        if key[1]:
            self.keep_again(self._agains, key, ready, stream)

    def keep_again(self, agains: dict, key: tuple, ready: Ready, stream) -> None:
        """Keep ready's launch, just made on `stream`, in `agains` under `key`, to be made
        again as it is (pdl.Again: about a microsecond of host time less than finding it):
        from the second launch of its Params on (any stream, eager or planned), so a
        one-off launch (a new N's) pays nothing for it; never one that reads device buffers
        (Params from the setup, a workspace). Full, the oldest kept one gives way."""
        if not ready.by_value or ready.workspace is not None:
            return
        if not ready.seen:
            ready.seen = True
            return
        if len(agains) >= PARAMS_PER_PLAN:
            try:
                del agains[next(iter(agains))]
            except (KeyError, RuntimeError, StopIteration):   # another thread's keep or eviction meanwhile
                pass
        agains[key] = self._gemm.again(ready.grid, ready.arguments, stream.ptr, True, ready.held)

    def launch(self, ready: Ready, stream=None) -> None:
        """The GEMM on `stream` or the current stream (after zeroing its stream-K barriers, if any)."""
        reads_buffers = not ready.by_value or ready.workspace is not None
        if reads_buffers:
            import cupy

            stream = stream or cupy.cuda.get_current_stream()
            # buffers this launch reads: a graph capturing it keeps them past their eviction here
            captured = graphs.hold(stream.ptr, ready.params, ready.workspace)
            offset, nbytes = ready.barrier
            if nbytes:   # the reduction's turnstiles count up during a launch; each starts from zero
                cupy.cuda.runtime.memsetAsync(ready.workspace.data.ptr + offset, 0, nbytes, stream.ptr)
        gemm = self._gemm
        if gemm is None:   # the loaded entry, looked up once per plan
            gemm = self._gemm = self.loaded.entry(self.problem.device_id)
        gemm(ready.grid, ready.arguments, stream, ready.by_value)
        if reads_buffers and stream.ptr != ready.stream and not captured:
            # freed after an eviction, they would go back to their own stream's pool while this GEMM
            # still reads them: kept until it is done
            _read_elsewhere.add((ready.params, ready.workspace), (stream.ptr,), self.problem.device_id)

    def _host_key(self, pointers, scales) -> tuple:
        """What a host copy of Params is kept under: kernel, device, the setup block without
        pointers, and which pointers are null (a null scale pointer reads as 1)."""
        return (self.compiled.key, self.problem.device_id, self._block_key,
                tuple(p == 0 for p in pointers), *(v == 0 for v in scales))

    @staticmethod
    def _nulls(pointers, scales) -> tuple:
        """Which pointers are null: part of what host Params are kept under (_host_key)."""
        absent = _ABSENT if scales is NO_VECTORS else tuple(v == 0 for v in scales)
        return ((0 in pointers) and tuple(p == 0 for p in pointers),) + absent

    def expect_host_params(self, pointers, scales, made) -> None:
        """Params for pointers like these are on their way to the host as `made` (a
        sm90_params.Template): the first call that finds them arrived needs no lookup."""
        if made is not None:
            self._templates[self._nulls(pointers, scales)] = made

    def _from_host(self, pointers, scales, stream) -> Ready | None:
        """A launch whose Params are a host copy patched with these pointers, passed by
        value, where such a copy has arrived; else None. The tail twin's also patches in its
        stream's shared workspace (a graph being captured gets one of its own, and the
        launch is not kept)."""
        nulls = self._nulls(pointers, scales)
        host = self._host_params.get(nulls)
        if host is None:
            offsets = sm90_params.pointer_maps.get((self.compiled.key, self.problem.device_id))
            made = self._templates.get(nulls) or (offsets and sm90_params.template(self._host_key(pointers, scales)))
            params_bytes = made.arrived(stream) if offsets and made else None
            if params_bytes is None:
                return None
            if not sm90_params.encoded(params_bytes, offsets):   # never launched: a setup would again
                self._templates.pop(nulls, None)
                sm90_params.discard(self._host_key(pointers, scales))
                return None
            host = self._host_params[nulls] = sm90_params.HostParams(params_bytes, offsets)   # kept by the plan
        prepared = self._prepared(pointers)
        if not prepared.workspace_bytes:   # (a stream-K map's workspace words: null, as the kernel reads none)
            address, record = host.record(pointers + tuple(scales) + (0,))
            return Ready(address, prepared.grid, (record,))
        if not self._shared_workspace:   # a caller's or a launch's own workspace: the setup's Params
            return None
        import cupy

        stream = stream or cupy.cuda.get_current_stream()
        workspace, shared = stream_workspaces.for_launch(self.problem.device_id, stream, prepared.workspace_bytes,
                                                         self._shared_workspace)
        address, record = host.record(pointers + tuple(scales) + (workspace.data.ptr,))
        # the kernel zeroes nothing itself: launch() clears the barriers before each launch, and the
        # programmatic launch is safe because CUTLASS 4.2's stream-K fixup runs after a mainloop fed
        # by loads issued after griddepcontrol.wait (its separate-reduction units, which would touch
        # the workspace first, are off there: should_perform_separate_reduction)
        return Ready(address, prepared.grid, (record,), True, workspace,
                     (prepared.barrier_offset, prepared.barrier_bytes), None,
                     not shared and graphs.capturing(stream.ptr), stream.ptr, shared_workspace=shared)

    def _setup_block(self) -> bytearray:
        return sm90_setup.block(self)

    def _setup_arguments(self, pointers, params, templates=0, recipes_out=0, info_out=0, workspace=0,
                         scales=NO_VECTORS):
        return sm90_setup.arguments(self, pointers, params, templates, recipes_out, info_out, workspace, scales)

    def _prepared(self, pointers) -> sm90_prepare.Prepared:
        """What this plan's problem shape needs besides pointers (kept by the plan)."""
        if self._prepared_value is None:
            self._prepared_value = sm90_prepare.prepared(self, pointers)
        return self._prepared_value

    def _params_buffer(self, stream=None):
        """A device buffer for the setup's Params, from the pool of the stream that uses it
        (freed, it is reused in that stream's order)."""
        import cupy

        return graphs.empty(self.compiled.constants["params_bytes"], stream or cupy.cuda.get_current_stream())

    def _build(self, pointers, workspace, stream=None, scales=NO_VECTORS) -> Ready:
        """Queue the setup entry that writes Params (with encoded TMA descriptors) into a new buffer."""
        import cupy

        stream = stream or cupy.cuda.get_current_stream()
        prepared = self._prepared(pointers)
        shared = False
        if prepared.workspace_bytes:
            if workspace is None:
                workspace, shared = stream_workspaces.for_launch(self.problem.device_id, stream,
                                                                 prepared.workspace_bytes, self._shared_workspace)
            elif workspace.nbytes < prepared.workspace_bytes or workspace.data.ptr % 128:
                raise ValueError(f"workspace holds {workspace.nbytes} bytes at {workspace.data.ptr:#x}; this call "
                                 f"needs {prepared.workspace_bytes} bytes, 128-byte aligned (cs.workspace_size)")
        else:
            workspace = None
        params = self._params_buffer(stream)
        self._write_params(pointers, params.data.ptr, workspace, stream, scales)
        # the setup reads the templates; True where the stream captures
        captured = graphs.hold(stream.ptr, prepared.templates)
        if (workspace is None or shared) and self.pointers_mapped:
            sm90_params.request(self._host_key(pointers, scales), params, stream)   # later calls patch a copy
        placeholder = self._placeholder
        if placeholder is None:   # the by-value argument the GEMM ignores when given a buffer
            placeholder = self._placeholder = (ctypes.c_char * self.compiled.constants["params_bytes"])()
        from_device = ctypes.c_uint64(params.data.ptr)
        arguments = pdl.kernel_params(placeholder, from_device)
        return Ready(ctypes.addressof(arguments), prepared.grid, (arguments, placeholder, from_device), False,
                     workspace, (prepared.barrier_offset, prepared.barrier_bytes), params, captured, stream.ptr,
                     shared_workspace=shared)

    def _write_params(self, pointers, params_ptr: int, workspace=None, stream=None, scales=NO_VECTORS) -> None:
        """Queue the setup entry writing this problem's Params (with encoded TMA descriptors)
        for these pointers to params_ptr."""
        block = self._setup_arguments(pointers, params_ptr, self._prepared(pointers).templates.data.ptr,
                                      workspace=0 if workspace is None else workspace.data.ptr, scales=scales)
        self.queue_setup(block, stream)

    def queue_setup(self, block, stream=None) -> None:
        """Queue the setup entry with this argument block on `stream` (default: the current
        one). Setups of one kernel may run at once on any streams: each keeps its launch's
        nonce in its own block's shared memory (emit.nvrtc_headers.RECIPE_HOOK)."""
        setup = self._setup
        if setup is None:   # the loaded entry, looked up once per plan
            setup = self._setup = self.loaded.function(self.problem.device_id, f"{self.compiled.symbol}_setup")
        setup((1, 1, 1), (1, 1, 1), (block,), 0, stream)

    @property
    def pointers_mapped(self) -> bool:
        """Whether this kernel's pointers in Params are mapped on this device (its first setup
        has run here), so Params built ahead can be patched (sm90_params.build_ahead)."""
        return bool(sm90_params.pointer_maps.get((self.compiled.key, self.problem.device_id)))

    def build_ahead(self, problems) -> dict:
        """Params for other N of this plan's range, built ahead (sm90_params.build_ahead);
        returns {N: plan} of the plans made for them."""
        return sm90_params.build_ahead(self, problems)
