"""The Ampere-style family at run time: CUTLASS 2.x sparse GEMM launches, with split-K.

- One slice: the GEMM applies the epilogue and writes D.
- Serial split-K (CUTLASS's kGemm mode with K slices): slices of one output tile run in
  order (semaphores, one int per tile, which the kernel leaves zeroed; they are zeroed
  before each launch anyway so a caller's fresh buffer needs no care), each adding into
  D; the last applies the activation.
- Parallel split-K (kGemmSplitKParallel): each K slice writes an fp32 partial tile into
  the workspace; the reduction kernel (emit.reduction) sums them and applies the
  epilogue into D.
K slices are cut on whole tiles (slice_k), so each starts on a metadata word.

Sm80Plan is made once per Problem (plan.plans caches it) and run with arrays.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..build import kernels
from ..describe import catalog, dtypes, selection
from ..describe.arith import cdiv, round_up
from ..describe.description import SparseGemmConfig
from ..describe.helper_kernels import ReductionConfig
from ..describe.problem import Problem, Split
from ..describe.selection import partial_ld
from ..emit import arguments
from ..emit.reduction import ROWS_PER_BLOCK
from ..formats.sm80_layout import padded_shape
from . import modules
from .grid import log_swizzle

FAMILY = "sm80"
WORKSPACE_ALIGN = 256     # bytes; every workspace part starts on this boundary
BOUND_PER_PLAN = 16      # bound launches kept per plan (one per weight it runs with)
ALLOCATED_ALIGN = 16      # alignment class of a buffer the library allocates (CuPy's pool: 256 bytes)
# cutlass::gemm::GemmUniversalMode
MODE_GEMM, MODE_SPLIT_K_PARALLEL, MODE_BATCHED = 0, 1, 2


@dataclass(frozen=True)
class Launch:
    """A loaded kernel, its grid and its argument-block template."""

    kernel: modules.LoadedKernel
    grid: tuple[int, int, int]
    block: np.ndarray


def widest_alignment(candidates, align: int, itemsize: int, *multiples: int) -> int | None:
    """The widest vector (in elements) that an address of alignment class `align` (bytes,
    or the address itself) and every extent in `multiples` allow."""
    for a in candidates:
        if align % (a * itemsize) == 0 and all(v % a == 0 for v in multiples):
            return a
    return None


def workspace_parts(m_pad: int, n: int, tile: tuple[int, int, int], split: Split) -> tuple[int, int]:
    """(semaphore bytes, partials bytes) for a problem; each rounded to WORKSPACE_ALIGN."""
    if split.serial:
        return round_up(cdiv(m_pad, tile[0]) * cdiv(n, tile[1]) * 4, WORKSPACE_ALIGN), 0
    if split.parallel:
        return 0, round_up(split.slices * m_pad * partial_ld(n) * 4, WORKSPACE_ALIGN)
    return 0, 0


def k_slices(k_eff: int, tile_k: int, slices: int) -> tuple[int, int]:
    """(K per slice, slices that gives): whole tiles per slice, as even as tiles allow."""
    k_tiles = k_eff // tile_k
    per_slice = cdiv(k_tiles, slices) * tile_k
    return per_slice, cdiv(k_eff, per_slice)


@functools.lru_cache(maxsize=4096)
def resolve(config: SparseGemmConfig, arch: str, m_pad: int, n: int, k_eff: int, split: Split) -> Launch:
    """Compile or load a GEMM and size its launch, once per (kernel, problem size, split)."""
    k_tiles = k_eff // config.threadblock[2]
    if split.slices > k_tiles:
        raise ValueError(f"split_k={split.slices} exceeds the {k_tiles} K tiles of K = {k_eff} with {config.name}")
    kernel = modules.load(kernels.get(config, arch))
    tm, tn, tk = config.threadblock
    slice_k, grid_k = k_slices(k_eff, tk, split.slices)
    tiled = (cdiv(m_pad, tm), cdiv(n, tn), grid_k)
    swizzle = 1 << log_swizzle(tiled[1], config.swizzle)   # GemmIdentityThreadblockSwizzle::get_log_tile
    block = arguments.SM80_GEMM.new_block()
    fields = block[0]
    fields["m"], fields["n"], fields["k"] = m_pad, n, k_eff
    fields["mode"] = MODE_SPLIT_K_PARALLEL if split.parallel else MODE_GEMM
    fields["batch_count"] = split.slices
    fields["slice_k"], fields["grid_k"] = (slice_k, grid_k) if split.slices > 1 else (0, 1)
    return Launch(kernel, (tiled[0] * swizzle, cdiv(tiled[1], swizzle), tiled[2]), block)


@functools.lru_cache(maxsize=1024)
def resolve_reduction(element_out: str, alignment: int, activation: str, arch: str, m: int, n: int) -> Launch:
    config = ReductionConfig(element_out, alignment, activation)
    kernel = modules.load(kernels.get(config, arch))
    grid = (cdiv(m, ROWS_PER_BLOCK), cdiv(n, 32 * alignment), 1)
    return Launch(kernel, grid, arguments.REDUCE_SPLIT_K.new_block())


def check_config_fits(config, element, element_out, layout_b, alignment_b, alignment_c) -> None:
    wanted = (element, element_out, layout_b)
    if (config.element, config.element_out, config.layout_b) != wanted:
        raise ValueError(f"config {config.name} is for {config.element}->{config.element_out} with "
                         f"B {config.layout_b}-major; the problem needs {wanted}")
    if config.alignment_b > alignment_b or config.alignment_c > alignment_c:
        raise ValueError(f"config {config.name} needs alignment B {config.alignment_b} / C "
                         f"{config.alignment_c}; the operands allow {alignment_b} / {alignment_c}")


def take_workspace(workspace, nbytes: int):
    """The caller's buffer if large enough, else a fresh one from CuPy's pool."""
    import cupy

    if nbytes == 0:
        return None
    if workspace is None:
        return cupy.empty(nbytes, dtype=cupy.uint8)
    if workspace.nbytes < nbytes or workspace.data.ptr % WORKSPACE_ALIGN:
        raise ValueError(f"workspace holds {workspace.nbytes} bytes at {workspace.data.ptr:#x}; this call needs "
                         f"{nbytes} bytes, {WORKSPACE_ALIGN}-byte aligned (cs.workspace_size)")
    return workspace


def gemm_block(launch: Launch, sw, pointers: tuple[int, int, int], lds: tuple[int, int, int],
               epilogue: tuple[float, float, float], semaphore_ptr: int = 0, slice_stride: int = 0) -> np.ndarray:
    """The GEMM's argument block: the resolved template plus sw's A and E (and its stored
    ld's), pointers (b, c, d), leading dimensions (ldb, ldc, ldd) and (alpha, beta,
    activation argument)."""
    block = launch.block.copy()
    fields = block[0]
    fields["a"], fields["e"] = sw.values.data.ptr, sw.metadata.data.ptr
    fields["b"], fields["c"], fields["d"] = pointers
    fields["semaphore"], fields["batch_stride_d"] = semaphore_ptr, slice_stride
    fields["lda"], fields["lde"] = sw.padded_shape[1] // 2, sw.metadata_ld
    fields["ldb"], fields["ldc"], fields["ldd"] = lds
    fields["alpha"], fields["beta"], fields["activation_arg"] = epilogue
    return block


class BoundGemm:
    """An unsplit GEMM with A, E, C and the scalars written in: each call writes B and D
    into a copy of the block seen as 64-bit words (no field lookups) and launches."""

    def __init__(self, launch: Launch, device_id: int, block: np.ndarray, c_is_d: bool):
        layout = arguments.SM80_GEMM.dtype
        self.word_b, self.word_c, self.word_d = (layout.fields[f][1] // 8 for f in ("b", "c", "d"))
        self.words = block.view(np.uint64).copy()
        self.c_is_d = c_is_d
        compiled = launch.kernel.compiled
        self.function = launch.kernel.function(device_id, compiled.symbol, compiled.shared_bytes)
        self.record = np.dtype((np.void, layout.itemsize))
        self.grid, self.threads, self.shared_bytes = launch.grid, (compiled.threads, 1, 1), compiled.shared_bytes

    def __call__(self, b_ptr: int, d_ptr: int, stream=None) -> None:
        words = self.words.copy()      # a copy per call: bound launches may be shared between threads
        words[self.word_b] = b_ptr
        words[self.word_d] = d_ptr
        if self.c_is_d:
            words[self.word_c] = d_ptr
        self.function(self.grid, self.threads, (words.view(self.record),), self.shared_bytes, stream)


class Sm80Plan:
    """How one Problem runs on the sm80 family: kernel, padding, staging, alignment, workspace.

    Any valid problem runs: what an operand cannot give the kernel directly is staged
    through a buffer the library allocates (x into whole K tiles, column-major when a
    row-major x cannot be aligned, or into N rounded up to the output's vector width; C
    and D into padded rows or columns), and the result copied or viewed back.
    """

    family = FAMILY

    def __init__(self, problem: Problem, config: SparseGemmConfig | None = None, tile: tuple | None = None):
        p = self.problem = problem
        self.asked = (config, None)   # what the caller asked for (plans at other N ask for the same)
        self.split = split = p.split
        cat = catalog.for_element(FAMILY, p.element)
        fam = catalog.load(cat)
        item, out_item = dtypes.numpy_dtype(p.element).itemsize, dtypes.numpy_dtype(p.element_out).itemsize
        self.m_pad, k_stored = padded_shape(p.m, p.k)
        if config is None and tile is None:
            tile = selection.choose_tile(cat, self.m_pad, p.n, p.k, p.sm_count)
        self.k_eff = round_up(p.k, config.threadblock[2] if config else tile[0][2])
        if k_stored < self.k_eff:
            raise ValueError(f"sw stores K = {k_stored}, less than the {self.k_eff} this kernel runs over")
        aligns_c = selection.output_alignments(cat, p.element_out)
        # The kernel's N: rounded up where D's element must be written several at a time (int8).
        self.n_k = n_k = round_up(p.n, min(aligns_c))
        self._plan_x(fam, config, item)
        # The kernel runs on M_pad rows (the metadata reorder works in groups of 32), so a
        # ragged M computes into a padded buffer; y is a view of its top rows. A parallel
        # split-K writes D with the reduction, over M rows: no padding needed.
        self.pad_rows = self.m_pad != p.m and not split.parallel
        self.stage_out = p.out is None or self.pad_rows or n_k != p.n or (
            widest_alignment(aligns_c, p.out.align, out_item, p.out.ld, n_k) is None)
        self.ldd, align_d = (n_k, ALLOCATED_ALIGN) if self.stage_out else (p.out.ld, p.out.align)
        self.out_pitch = self.ldd   # D the library allocates, seen as [M, N]: its row pitch
        self.stage_c = p.epilogue.reads_c and (self.pad_rows or n_k != p.n or widest_alignment(
            aligns_c, p.c.align, out_item, p.c.ld, n_k) is None)
        if not p.epilogue.reads_c:
            self.ldc, align_c = self.ldd, align_d
        else:
            self.ldc, align_c = (n_k, ALLOCATED_ALIGN) if self.stage_c else (p.c.ld, p.c.align)
        if split.parallel:   # the GEMM writes fp32 partials; the configuration keeps D's own width
            self.alignment_c = widest_alignment(aligns_c, 0, 1, n_k)
        else:
            self.alignment_c = min(widest_alignment(aligns_c, align_d, out_item, self.ldd, n_k),
                                   widest_alignment(aligns_c, align_c, out_item, self.ldc, n_k))
        if config is None:
            config = fam.config(tile, p.element, p.element_out, self.layout_b, self.alignment_b, self.alignment_c)
        else:
            check_config_fits(config, p.element, p.element_out, self.layout_b, self.alignment_b, self.alignment_c)
        config = selection.gemm_variant(config, split, p.activation)
        # listing what a plan asks for (kernels.first_asked) asks, whatever is remembered
        remembered = not kernels.asking()
        self.gemm = (resolve if remembered else resolve.__wrapped__)(config, p.arch, self.m_pad, n_k, self.k_eff,
                                                                     split)
        self.semaphore_bytes, self.partial_bytes = workspace_parts(self.m_pad, n_k, config.threadblock, split)
        self.reduction = None
        if split.parallel:
            ra = selection.reduction_alignment(p.element_out, n_k, (align_d, self.ldd, out_item),
                                               (align_c, self.ldc, out_item))
            self.reduction = (resolve_reduction if remembered else resolve_reduction.__wrapped__)(
                p.element_out, ra, p.activation, p.arch, p.m, n_k)
        self._bound: dict[tuple[int, int], BoundGemm] = {}
        # An unsplit problem that needs no staging can be bound once and launched with two pointers.
        self.direct = not (self.pad_rows or self.stage_x or self.stage_c or split.slices > 1 or n_k != p.n
                           or (p.out is not None and self.stage_out))

    def _plan_x(self, fam, config, item: int) -> None:
        """How the kernel reads x: in place where it can, else a staged copy (layout_b,
        ldb, alignment_b, stage_x). int8 tensor cores read B K-major only, and a row-major
        x that cannot be aligned (odd N or leading dimension, offset views) is staged
        column-major, where K (whole tiles) always aligns."""
        p = self.problem
        layout = config.layout_b if config is not None else ("col" if p.element == "s8" else p.layout_b)

        def extent(layout_b: str) -> int:
            return self.n_k if layout_b == "row" else self.k_eff

        self.stage_x = self.k_eff != p.k or self.n_k != p.n or layout != p.layout_b
        if not self.stage_x:
            self.alignment_b = widest_alignment(fam.alignments_b, p.x.align, item, p.x.ld, extent(layout))
            self.stage_x = self.alignment_b is None
        if self.stage_x:
            self.alignment_b = widest_alignment(fam.alignments_b, ALLOCATED_ALIGN, item, extent(layout))
            if self.alignment_b is None and config is None:
                layout = "col"
                self.alignment_b = widest_alignment(fam.alignments_b, ALLOCATED_ALIGN, item, extent(layout))
        if self.alignment_b is None:
            raise ValueError(f"x ([{p.k}, {p.n}], {p.layout_b}-major) cannot be read by {config.name} "
                             f"({config.layout_b}-major B): pass no config, or an x the kernel can read")
        self.layout_b, self.ldb = layout, (extent(layout) if self.stage_x else p.x.ld)

    @property
    def workspace_bytes(self) -> int:
        return self.semaphore_bytes + self.partial_bytes

    def info(self) -> dict:
        compiled = self.gemm.kernel.compiled
        return dict(config=compiled.config.name, arch=self.problem.arch, from_cache=compiled.from_cache,
                    compile_seconds=compiled.compile_seconds, grid=self.gemm.grid,
                    k_padded=self.k_eff != self.problem.k, staged_x=self.stage_x,
                    split_k=self.split.slices, split_k_mode=self.split.mode, workspace_bytes=self.workspace_bytes)

    def _scalars(self) -> tuple[float, float, float]:
        e = self.problem.epilogue
        return e.alpha, e.beta, e.leaky_slope

    def launch_direct(self, sw, x_ptr: int, d_ptr: int, stream=None) -> None:
        """A direct plan's launch from pointers alone (C is D; nothing staged), on `stream`
        (a CuPy stream; default the current one)."""
        self._bound_for(sw)(x_ptr, d_ptr, stream)

    def _bound_for(self, sw) -> BoundGemm:
        """The bound launch for sw's arrays (C is D), kept per weight."""
        key = (sw.values.data.ptr, sw.metadata.data.ptr)
        bound = self._bound.get(key)
        if bound is None:
            bound = self.bind(sw, None)
            if len(self._bound) >= BOUND_PER_PLAN:
                self._bound.clear()
            self._bound[key] = bound
        return bound

    def bind(self, sw, c_ptr: int | None) -> BoundGemm:
        """The direct launch with sw and C written in (C None: D serves as C, beta = 0)."""
        block = gemm_block(self.gemm, sw, (0, c_ptr or 0, 0), (self.ldb, self.ldc, self.ldd), self._scalars())
        return BoundGemm(self.gemm, self.problem.device_id, block, c_ptr is None)

    def run(self, sw, x, out, c, workspace):
        """Launch on the current stream; returns D as [M, N] (`out` when given)."""
        import cupy

        p, split, n_k = self.problem, self.split, self.n_k
        if self.direct and not p.epilogue.reads_c:   # the common case: two pointers into a bound block
            d = out if out is not None else cupy.empty((p.m, p.n), dtype=dtypes.numpy_dtype(p.element_out))
            self._bound_for(sw)(x.data.ptr, d.data.ptr)
            return d
        if self.stage_x:
            x_full = cupy.zeros((self.k_eff, n_k), dtype=x.dtype, order="C" if self.layout_b == "row" else "F")
            x_full[:p.k, :p.n] = x
            x = x_full
        np_out = dtypes.numpy_dtype(p.element_out)
        rows = self.m_pad if self.pad_rows else p.m
        d = cupy.empty((rows, n_k), dtype=np_out) if self.stage_out else out
        if not p.epilogue.reads_c:
            c_full = d
        elif self.stage_c:
            c_full = cupy.zeros((rows, n_k), dtype=np_out)
            c_full[:p.m, :p.n] = c
        else:
            c_full = c
        space = take_workspace(workspace, self.workspace_bytes)
        if split.parallel:
            partials, ld_partials = space.data.ptr, partial_ld(n_k)
            block = gemm_block(self.gemm, sw, (x.data.ptr, partials, partials), (self.ldb, ld_partials, ld_partials),
                               (1.0, 0.0, 0.0), slice_stride=self.m_pad * ld_partials)
            self.gemm.kernel.launch(p.device_id, self.gemm.grid, block)
            self._reduce(partials, c_full.data.ptr, self.ldc, d.data.ptr)
        else:
            semaphore = 0
            if split.serial:
                semaphore = space.data.ptr
                cupy.cuda.runtime.memsetAsync(semaphore, 0, self.semaphore_bytes, cupy.cuda.get_current_stream().ptr)
            block = gemm_block(self.gemm, sw, (x.data.ptr, c_full.data.ptr, d.data.ptr),
                               (self.ldb, self.ldc, self.ldd), self._scalars(), semaphore_ptr=semaphore)
            self.gemm.kernel.launch(p.device_id, self.gemm.grid, block)
        if d is out:
            return out
        y = d[:p.m, :p.n] if n_k != p.n else d[:p.m]
        if out is None:
            return y
        out[...] = y
        return out

    def _reduce(self, partials_ptr: int, c_ptr: int, ldc: int, d_ptr: int) -> None:
        p, launch = self.problem, self.reduction
        block = launch.block.copy()
        f = block[0]
        f["workspace"], f["source"], f["destination"] = partials_ptr, c_ptr, d_ptr
        f["slice_stride"], f["ld_workspace"] = self.m_pad * partial_ld(self.n_k), partial_ld(self.n_k)
        f["ld_source"], f["ld_destination"] = ldc, self.ldd
        f["m"], f["n"], f["slices"] = p.m, self.n_k, int(self.gemm.block[0]["grid_k"])   # slices the GEMM wrote
        f["alpha"], f["beta"], f["activation_arg"] = self._scalars()
        launch.kernel.launch(p.device_id, launch.grid, block, threads=(32, ROWS_PER_BLOCK, 1))
