"""The Ampere-style family at run time: CUTLASS 2.x sparse GEMM launches, with split-K.

- One slice: the GEMM applies the epilogue and writes D.
- Serial split-K (CUTLASS's kGemm mode with K slices): slices of one output tile run in
  order (semaphores, one int per tile, which the kernel leaves zeroed; they are zeroed
  before each launch anyway so a caller's fresh buffer needs no care), each adding into
  D; the last applies the activation.
- Parallel split-K (kGemmSplitKParallel): each K slice writes an fp32 partial tile into
  the workspace; the reduction kernel (emit_reduction) sums them and applies the
  epilogue into D.
K slices are cut on whole tiles (slice_k), so each starts on a metadata word.

Operands arrive validated (matmul.py); this module sizes, resolves and launches.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from . import arguments, catalog, kernels, operands, runtime, selection
from .description import ReductionConfig, SparseGemmConfig
from .emit_reduction import ROWS_PER_BLOCK
from .selection import cdiv, round_up

FAMILY = "sm80"
WORKSPACE_ALIGN = 256     # bytes; every workspace part starts on this boundary
# cutlass::gemm::GemmUniversalMode
MODE_GEMM, MODE_SPLIT_K_PARALLEL, MODE_BATCHED = 0, 1, 2


@dataclass(frozen=True)
class Split:
    """How K is divided: slices and mode ("serial" or "parallel"); one slice is no split."""

    slices: int = 1
    mode: str = "serial"

    @property
    def parallel(self) -> bool:
        return self.slices > 1 and self.mode == "parallel"

    @property
    def serial(self) -> bool:
        return self.slices > 1 and self.mode == "serial"


@dataclass(frozen=True)
class Launch:
    """What a problem signature resolves to: loaded kernel, grid, argument block template."""

    kernel: runtime.LoadedKernel
    grid: tuple[int, int, int]
    block: np.ndarray


def widest_alignment(candidates, ptr: int, itemsize: int, *multiples: int) -> int | None:
    for a in candidates:
        if ptr % (a * itemsize) == 0 and all(v % a == 0 for v in multiples):
            return a
    return None


def swizzle_log_tile(swizzle: int, tiles_n: int) -> int:
    """GemmIdentityThreadblockSwizzle<N>::get_log_tile: the host must launch the grid it implies."""
    if swizzle >= 8 and tiles_n >= 6:
        return 3
    if swizzle >= 4 and tiles_n >= 3:
        return 2
    if swizzle >= 2 and tiles_n >= 2:
        return 1
    return 0


def partial_ld(n: int) -> int:
    """Leading dimension of the fp32 partial tiles: padded so every vector width fits."""
    return round_up(n, 8)


def workspace_parts(m_pad: int, n: int, tile: tuple[int, int, int], split: Split) -> tuple[int, int]:
    """(semaphore bytes, partials bytes) for a problem; each rounded to WORKSPACE_ALIGN."""
    if split.serial:
        return round_up(cdiv(m_pad, tile[0]) * cdiv(n, tile[1]) * 4, WORKSPACE_ALIGN), 0
    if split.parallel:
        return 0, round_up(split.slices * m_pad * partial_ld(n) * 4, WORKSPACE_ALIGN)
    return 0, 0


def gemm_variant(config: SparseGemmConfig, split: Split, activation: str):
    """The GEMM a split needs: parallel writes fp32 partials with no activation (the
    reduction applies the epilogue); otherwise the epilogue is the GEMM's own."""
    if split.parallel:   # fp32 vectors are at most 4 wide (16 bytes); N stays a multiple
        return dataclasses.replace(config, element_out="f32", alignment_c=min(config.alignment_c, 4),
                                   activation="identity")
    return dataclasses.replace(config, activation=activation)


def k_slices(k_eff: int, tile_k: int, slices: int) -> tuple[int, int]:
    """(K per slice, slices that gives): whole tiles per slice, as even as tiles allow."""
    k_tiles = k_eff // tile_k
    per_slice = cdiv(k_tiles, slices) * tile_k
    return per_slice, cdiv(k_eff, per_slice)


@functools.lru_cache(maxsize=4096)
def resolve(element, element_out, layout_b, alignment_b, alignment_c, m_pad, n, k, k_eff, arch, sm_count,
            config, split: Split, activation: str, tile: tuple | None = None) -> Launch:
    """Choose (config, else tile, else the heuristic's tile), compile or load, and size
    the GEMM launch, once per problem signature."""
    cat = catalog.for_element(FAMILY, element)
    fam = catalog.load(cat)
    if config is None:
        tile = tile or selection.choose_tile(cat, m_pad, n, k, sm_count)
        config = fam.config(tile, element, element_out, layout_b, alignment_b, alignment_c)
    else:
        operands.check_config_fits(config, element, element_out, layout_b, alignment_b, alignment_c)
    config = gemm_variant(config, split, activation)
    k_tiles = k_eff // config.threadblock[2]
    if split.slices > k_tiles:
        raise ValueError(f"split_k={split.slices} exceeds the {k_tiles} K tiles of K = {k} with {config.name}")
    kernel = runtime.load(kernels.get(config, arch))
    tm, tn, tk = config.threadblock
    slice_k, grid_k = k_slices(k_eff, tk, split.slices)
    tiled = (cdiv(m_pad, tm), cdiv(n, tn), grid_k)
    swizzle = 1 << swizzle_log_tile(config.swizzle, tiled[1])
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
    kernel = runtime.load(kernels.get(config, arch))
    grid = (cdiv(m, ROWS_PER_BLOCK), cdiv(n, 32 * alignment), 1)
    return Launch(kernel, grid, arguments.REDUCE_SPLIT_K.new_block())


def reduction_alignment(element_out: str, n: int, *arrays: tuple[int, int, int]) -> int:
    """Widest vector the reduction may use: N, the partials' ld and each (ptr, ld, itemsize)."""
    for a in selection.output_alignments(FAMILY, element_out):   # float outputs only (sm80.toml)
        if n % a == 0 and partial_ld(n) % a == 0 and all(
                ptr % (a * item) == 0 and ld % a == 0 for ptr, ld, item in arrays):
            return a
    return 1


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


def gemm_block(launch: Launch, sw, b_ptr, c_ptr, d_ptr, ldb, ldc, ldd, alpha, beta, activation_arg,
               semaphore_ptr=0, slice_stride=0) -> np.ndarray:
    """The GEMM's argument block for these operands: the resolved template plus pointers,
    leading dimensions and scalars (sw's A and E, its stored ld's)."""
    block = launch.block.copy()
    fields = block[0]
    fields["a"], fields["e"] = sw.values.data.ptr, sw.metadata.data.ptr
    fields["b"], fields["c"], fields["d"] = b_ptr, c_ptr, d_ptr
    fields["semaphore"], fields["batch_stride_d"] = semaphore_ptr, slice_stride
    fields["lda"], fields["lde"] = sw.padded_shape[1] // 2, sw.metadata_ld
    fields["ldb"], fields["ldc"], fields["ldd"] = ldb, ldc, ldd
    fields["alpha"], fields["beta"], fields["activation_arg"] = alpha, beta, activation_arg
    return block


def launch_reduction(launch: Launch, device_id, partials_ptr, gemm: Launch, m, n, c_ptr, ldc, d_ptr, ldd,
                     alpha, beta, activation_arg, m_pad) -> None:
    block = launch.block.copy()
    f = block[0]
    f["workspace"], f["source"], f["destination"] = partials_ptr, c_ptr, d_ptr
    f["slice_stride"], f["ld_workspace"] = m_pad * partial_ld(n), partial_ld(n)
    f["ld_source"], f["ld_destination"] = ldc, ldd
    f["m"], f["n"], f["slices"] = m, n, int(gemm.block[0]["grid_k"])   # slices the GEMM wrote
    f["alpha"], f["beta"], f["activation_arg"] = alpha, beta, activation_arg
    launch.kernel.launch(device_id, launch.grid, block, threads=(32, ROWS_PER_BLOCK, 1))


def run(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, np_out, config, info,
        split, workspace, activation, leaky_slope, record=None, tile=None):
    """cs.matmul's sm80 path, operands checked: padding, alignment, kernel, workspace, launches."""
    import cupy

    device_id = x.device.id
    m, k = sw.shape
    n = x.shape[1]
    m_pad, k_stored = sw.padded_shape
    cat = catalog.for_element(FAMILY, element)
    fam = catalog.load(cat)
    arch, sm_count = operands.device_facts(device_id)
    # The kernel runs on M_pad rows (the metadata reorder works in groups of 32), so a
    # ragged M computes into a padded buffer; y is a contiguous view of its top rows. A
    # parallel split-K writes D with the reduction, over M rows: no padding needed.
    padded = m_pad != m and not split.parallel
    d = out if (out is not None and not padded) else cupy.empty((m_pad if padded else m, n), dtype=np_out)
    ldd = operands.row_stride(d, n)
    if beta == 0.0:
        c_full, ldc = d, ldd
    elif padded:
        c_full = cupy.zeros((m_pad, n), dtype=np_out)
        c_full[:m] = c
        ldc = n
    else:
        c_full, ldc = c, operands.row_stride(c, n)

    # -- kernel choice --------------------------------------------------------
    if config is None and tile is None:
        tile = selection.choose_tile(cat, m_pad, n, k, sm_count)
    tile_k = config.threadblock[2] if config else tile[0][2]
    k_eff = cdiv(k, tile_k) * tile_k
    if k_eff != k:
        # mma.sp needs valid metadata on every K step, so the kernel runs over whole
        # tiles: the stored sparse operand is padded already, x gets zero rows.
        x_full = cupy.zeros((k_eff, n), dtype=x.dtype, order="C" if layout_b == "row" else "F")
        x_full[:k] = x
        x, ldb = x_full, (n if layout_b == "row" else k_eff)
    alignment_b = widest_alignment(fam.alignments_b, x.data.ptr, x.dtype.itemsize, ldb,
                                   n if layout_b == "row" else k_eff)
    if alignment_b is None:
        raise ValueError(
            f"x (row-major, shape {tuple(x.shape)}, leading dimension {ldb}, address {x.data.ptr:#x}) "
            f"is not aligned for the sparse kernels: a row-major x needs an even N, an even leading "
            f"dimension and a 4-byte aligned address; pass a column-major x (cupy.asfortranarray) or pad N")
    aligns_c = selection.output_alignments(cat, element_out)
    if split.parallel:   # the GEMM writes fp32 partials; the configuration keeps D's own width
        alignment_c = widest_alignment(aligns_c, 0, 1, n)
    else:
        widths = (widest_alignment(aligns_c, d.data.ptr, np_out.itemsize, ldd, n),
                  widest_alignment(aligns_c, c_full.data.ptr, np_out.itemsize, ldc, n))
        if None in widths:
            raise ValueError(f"out/c (N = {n}, leading dimensions {ldd}/{ldc}) cannot be written {min(aligns_c)} "
                             f"{element_out} at a time, which this output type needs: make N a multiple of "
                             f"{min(aligns_c)} or use out_dtype='s32'")
        alignment_c = min(widths)
    if k_stored < k_eff:
        raise ValueError(f"sw stores K = {k_stored}, less than the {k_eff} this kernel runs over")
    launch = resolve(element, element_out, layout_b, alignment_b, alignment_c, m_pad, n, k, k_eff,
                     arch, sm_count, config, split, activation, tile)

    # -- workspace and launches -----------------------------------------------
    semaphore_bytes, partial_bytes = workspace_parts(m_pad, n, launch.kernel.compiled.config.threadblock, split)
    space = take_workspace(workspace, semaphore_bytes + partial_bytes)
    if split.parallel:
        partials, ld_partials = space.data.ptr, partial_ld(n)
        block = gemm_block(launch, sw, x.data.ptr, partials, partials, ldb, ld_partials, ld_partials,
                           1.0, 0.0, 0.0, slice_stride=m_pad * ld_partials)
        launch.kernel.launch(device_id, launch.grid, block)
        c_src, ld_src = (c, operands.row_stride(c, n)) if beta != 0.0 else (d, ldd)
        ra = reduction_alignment(element_out, n, (d.data.ptr, ldd, np_out.itemsize),
                                 (c_src.data.ptr, ld_src, np_out.itemsize))
        reduce = resolve_reduction(element_out, ra, activation, arch, m, n)
        launch_reduction(reduce, device_id, partials, launch, m, n, c_src.data.ptr, ld_src,
                         d.data.ptr, ldd, alpha, beta, leaky_slope, m_pad)
    else:
        semaphore = 0
        if split.serial:
            semaphore = space.data.ptr
            cupy.cuda.runtime.memsetAsync(semaphore, 0, semaphore_bytes, cupy.cuda.get_current_stream().ptr)
        block = gemm_block(launch, sw, x.data.ptr, c_full.data.ptr, d.data.ptr, ldb, ldc, ldd, alpha, beta,
                           leaky_slope, semaphore_ptr=semaphore)
        launch.kernel.launch(device_id, launch.grid, block)

    if info is not None:
        compiled = launch.kernel.compiled
        info.update(config=compiled.config.name, arch=arch, from_cache=compiled.from_cache,
                    compile_seconds=compiled.compile_seconds, grid=launch.grid, k_padded=k_eff != k,
                    split_k=split.slices, split_k_mode=split.mode, workspace_bytes=semaphore_bytes + partial_bytes)
    if record is not None:   # what a Plan needs to repeat this launch with new pointers
        record.update(launch=launch, direct=not (padded or k_eff != k or split.slices > 1), layout_b=layout_b,
                      ldb=ldb, ldc=ldc, ldd=ldd, alignment_b=alignment_b, alignment_c=alignment_c)
    if out is None:
        return d[:m]
    if d is not out:
        out[...] = d[:m]
    return out
