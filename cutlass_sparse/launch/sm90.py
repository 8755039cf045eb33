"""The Hopper family at run time: the two-launch GEMM (a setup entry builds Params and TMA
descriptors on the device, then the kernel runs on them).

Launch rules (TMA): every operand's base address 16-byte aligned and its leading
dimension a multiple of 16 bytes; K a multiple of 8. Problems outside them get a clear
error that names family="sm80", whose kernels take any shape.

Sm90Plan is made once per Problem (plan.plans caches it) and run with arrays.
"""
from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..build import kernels
from ..describe import catalog, dtypes, selection
from ..describe.arith import cdiv
from ..describe.description import SparseGemmConfig
from ..describe.problem import Operand, Problem
from ..emit.sm90 import DECOMPOSITIONS, INFO_FIELDS, SETUP
from . import device, modules, tma
from .sm80 import check_config_fits

FAMILY = "sm90"
# The tile scheduler's raster order: 0 lets CUTLASS choose (its heuristic), 1 along M,
# 2 along N. A run-time argument of the setup entry.
RASTER = 0
TMA_ALIGN = 16     # bytes: TMA's rule for base addresses and leading dimensions
# Params depend only on pointers, strides, sizes and scalars, never on data: a call that
# repeats its pointers (a plan, a benchmark, a weight applied to the same buffers) reuses
# the Params built last time and launches the GEMM alone.
PARAMS_PER_PLAN = 64


@dataclass(frozen=True)
class Scheduling:
    """How the stream-K scheduler divides K: DECOMPOSITIONS key and K slices (split-K)."""

    decomposition: str = "data_parallel"
    splits: int = 1

    @classmethod
    def split_k(cls, splits: int) -> "Scheduling":
        return cls("split_k", splits) if splits > 1 else cls()


@dataclass(frozen=True)
class Prepared:
    """What one problem signature needs besides pointers: descriptor templates, the grid, and
    the workspace (bytes, and the barrier region that is zeroed before every launch)."""

    templates: object
    grid: tuple[int, int, int]
    workspace_bytes: int
    barrier_offset: int
    barrier_bytes: int


@dataclass
class Ready:
    """A built launch: Params in device memory, its grid, and the workspace it points into."""

    params: object
    grid: tuple[int, int, int]
    workspace: object
    barrier: tuple[int, int]      # (byte offset, bytes) to zero before each launch


@functools.lru_cache(maxsize=4096)
def resolve(problem: Problem, config: SparseGemmConfig | None, choice=None) -> tuple[SparseGemmConfig, Scheduling]:
    """The sm90 kernel and K decomposition for a problem (the caller's config, the
    profiler's choice, or the catalog's)."""
    p = problem
    alignment_c = 16 // dtypes.numpy_dtype(p.element_out).itemsize
    if config is None and choice is not None:
        splits = p.split_k or 1
        config = catalog.load(FAMILY).config(choice.tile, p.element, p.element_out, p.layout_b, 8, alignment_c)
        if choice.swizzle:   # the tile scheduler's swizzle: a run-time argument, same binary
            config = dataclasses.replace(config, swizzle=choice.swizzle)
    elif config is None:
        tile, splits = selection.choose_sm90(p.m, p.n, p.k, p.sm_count, p.split_k, p.element, p.element_out)
        config = catalog.load(FAMILY).config(tile, p.element, p.element_out, p.layout_b, 8, alignment_c)
        config = dataclasses.replace(config, swizzle=selection.sm90_swizzle(tile[0], p.m, p.n, p.sm_count,
                                                                            config.swizzle))
    else:
        check_config_fits(config, p.element, p.element_out, p.layout_b, 8, alignment_c)
        splits = p.split_k or 1
    config = dataclasses.replace(config, activation=p.activation)
    if splits > 1 and config.tile_scheduler != "streamk":
        raise ValueError(f"split_k={splits} needs an sm90 stream-K kernel; {config.name} is not one")
    if splits > cdiv(p.k, config.threadblock[2]):
        raise ValueError(f"split_k={splits} exceeds the {cdiv(p.k, config.threadblock[2])} K tiles of "
                         f"K = {p.k} with {config.name}")
    return config, Scheduling.split_k(splits)


def check_tma(problem: Problem) -> None:
    """TMA: 16-byte aligned bases and leading dimensions for x, out and c."""
    p = problem
    out_item = dtypes.numpy_dtype(p.element_out).itemsize
    allocated = Operand("row", p.n, TMA_ALIGN)   # D the library allocates: ld N
    for what, operand, item in (("x", p.x, dtypes.numpy_dtype(p.element).itemsize),
                                ("out", p.out or allocated, out_item), ("c", p.c, out_item)):
        if operand is None:
            continue
        if operand.align % TMA_ALIGN or (operand.ld * item) % TMA_ALIGN:
            raise ValueError(
                f"{what} (leading dimension {operand.ld}, address aligned to {operand.align} bytes) breaks the sm90 "
                f"kernels' TMA rule: 16-byte aligned address and leading dimension a multiple of {16 // item} "
                f"elements; pad it, or use family='sm80' (sw.to_layout('sm80')), which takes any shape")


# Per (kernel, device, sizes, strides): TMA descriptor templates and the grid. CuTe may
# fold a compact tensor's modes into a different TMA rank or box, so templates are made
# for each sizes-and-strides signature: one synchronizing setup when one is first seen.
_prepared: dict[tuple, Prepared] = {}
_prepared_lock = threading.Lock()


class Sm90Plan:
    """How one Problem runs on the sm90 family: kernel, decomposition, Params per pointer set."""

    family = FAMILY

    def __init__(self, problem: Problem, config: SparseGemmConfig | None = None, choice=None):
        check_tma(problem)
        self.problem = p = problem
        self.config, self.scheduling = resolve(problem, config, choice)
        self.compiled = kernels.get(self.config, device.sm90_arch(p.device_id))
        self.loaded = modules.load(self.compiled)
        self.ldd = p.out.ld if p.out is not None else p.n
        self.ldc = p.c.ld if p.epilogue.reads_c else self.ldd
        self.direct = True
        self._readies: OrderedDict[tuple, Ready] = OrderedDict()
        self._lock = threading.Lock()   # plans are shared between threads

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
        ready = next(reversed(self._readies.values()), None)
        return dict(config=self.config.name, arch=self.problem.arch, from_cache=self.compiled.from_cache,
                    compile_seconds=self.compiled.compile_seconds, grid=None if ready is None else ready.grid,
                    k_padded=False, decomposition=self.scheduling.decomposition, split_k=self.scheduling.splits,
                    workspace_bytes=0 if ready is None or ready.workspace is None else ready.workspace.nbytes)

    def run(self, sw, x, out, c, workspace):
        """Launch on the current stream; returns D as [M, N] (`out` when given)."""
        import cupy

        p = self.problem
        d = out if out is not None else cupy.empty((p.m, p.n), dtype=dtypes.numpy_dtype(p.element_out))
        c_full = c if p.epilogue.reads_c else d
        self.launch(self.ready(sw, (x.data.ptr, c_full.data.ptr, d.data.ptr), workspace))
        return d

    def ready(self, sw, pointers: tuple[int, int, int], workspace=None) -> Ready:
        """The built launch for sw and (b, c, d) pointers: kept, else built now (one setup launch)."""
        key = (sw.values.data.ptr, sw.metadata.data.ptr, *pointers,
               0 if workspace is None else workspace.data.ptr)
        with self._lock:
            ready = self._readies.get(key)
            if ready is not None:
                self._readies.move_to_end(key)
                return ready
        ready = self._build(key[:5], workspace)
        with self._lock:
            self._readies[key] = ready
            while len(self._readies) > PARAMS_PER_PLAN:
                self._readies.popitem(last=False)
        return ready

    def launch(self, ready: Ready) -> None:
        """The GEMM on the current stream (after zeroing its stream-K barriers, if any)."""
        import cupy

        offset, nbytes = ready.barrier
        if nbytes:
            # The reduction's turnstiles count up during a launch; each launch starts from zero.
            cupy.cuda.runtime.memsetAsync(ready.workspace.data.ptr + offset, 0, nbytes,
                                          cupy.cuda.get_current_stream().ptr)
        self.loaded.launch(self.problem.device_id, ready.grid, (ready.params,))

    def _setup_block(self, pointers):
        p, e = self.problem, self.problem.epilogue
        block = SETUP.new_block()
        f = block[0]
        f["a"], f["e"], f["b"], f["c"], f["d"] = pointers
        f["ldb"], f["ldc"], f["ldd"] = p.x.ld, self.ldc, self.ldd
        f["m"], f["n"], f["k"] = p.m, p.n, p.k
        f["sm_count"] = p.sm_count
        f["swizzle"], f["raster"] = self.config.swizzle, RASTER
        f["splits"], f["decomposition"] = self.scheduling.splits, DECOMPOSITIONS[self.scheduling.decomposition]
        f["alpha"], f["beta"], f["activation_arg"] = e.alpha, e.beta, e.leaky_slope
        return block

    def _prepared(self, pointers) -> Prepared:
        p = self.problem
        shape_key = (self.compiled.key, p.device_id, p.m, p.n, p.k, p.x.ld, self.ldc, self.ldd, self.scheduling,
                     self.config.swizzle)   # swizzle: the grid
        prepared = _prepared.get(shape_key)
        if prepared is None:
            with _prepared_lock:
                prepared = _prepared.get(shape_key)
                if prepared is None:
                    prepared = _prepared[shape_key] = self._prepare(pointers)
        return prepared

    def _prepare(self, pointers) -> Prepared:
        """First sight of a problem signature: run the setup leaving CuTe's TMA recipes, check
        what CUTLASS reports, and encode the recipes into descriptor templates."""
        import cupy

        symbol = self.compiled.symbol
        block = self._setup_block(pointers)
        params = cupy.empty(self.compiled.constants["params_bytes"], dtype=cupy.uint8)
        info_out = cupy.zeros(len(INFO_FIELDS), dtype=cupy.int64)
        recipes = cupy.zeros(16 * 128, dtype=cupy.uint8)
        f = block[0]
        f["params_out"], f["info_out"] = params.data.ptr, info_out.data.ptr
        f["recipes_out"], f["templates"] = recipes.data.ptr, 0
        self.loaded.launch(self.problem.device_id, (1, 1, 1), block, symbol=f"{symbol}_setup", threads=1,
                           shared_bytes=0)
        info = dict(zip(INFO_FIELDS, (int(v) for v in info_out.get())))   # synchronizes
        problem = f"{int(f['m'])}x{int(f['n'])}x{int(f['k'])}"
        if not info["can_implement"]:
            raise ValueError(f"CUTLASS cannot implement {problem} with {symbol}: use family='sm80'")
        if not 0 < info["tma_slots"] <= 16:
            raise RuntimeError(f"{symbol}: setup found {info['tma_slots']} TMA descriptor slots")
        templates = cupy.asarray(tma.templates(recipes.get().tobytes(), info["tma_slots"]))
        return Prepared(templates, (info["grid_x"], info["grid_y"], info["grid_z"]), info["workspace_bytes"],
                        info["barrier_offset"], info["barrier_bytes"])

    def _build(self, pointers, workspace) -> Ready:
        """Queue the setup entry that writes Params (with encoded TMA descriptors) into a new buffer."""
        import cupy

        prepared = self._prepared(pointers)
        if prepared.workspace_bytes:
            if workspace is None:
                workspace = cupy.empty(prepared.workspace_bytes, dtype=cupy.uint8)
            elif workspace.nbytes < prepared.workspace_bytes or workspace.data.ptr % 128:
                raise ValueError(f"workspace holds {workspace.nbytes} bytes at {workspace.data.ptr:#x}; this call "
                                 f"needs {prepared.workspace_bytes} bytes, 128-byte aligned (cs.workspace_size)")
        else:
            workspace = None
        params = cupy.empty(self.compiled.constants["params_bytes"], dtype=cupy.uint8)
        block = self._setup_block(pointers)
        f = block[0]
        f["params_out"], f["info_out"] = params.data.ptr, 0
        f["templates"] = prepared.templates.data.ptr
        f["workspace"] = 0 if workspace is None else workspace.data.ptr
        self.loaded.launch(self.problem.device_id, (1, 1, 1), block, symbol=f"{self.compiled.symbol}_setup",
                           threads=1, shared_bytes=0)
        return Ready(params, prepared.grid, workspace, (prepared.barrier_offset, prepared.barrier_bytes))
