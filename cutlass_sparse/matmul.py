"""cs.matmul, cs.linear, cs.workspace_size: the public calls. Operands are checked
(operands.py), the kernel is chosen (config, profiler record or heuristic), and the
family's run path launches (sm80.run, sm90.run, batched.matmul).
"""
from __future__ import annotations

from . import batched, catalog, dtypes, operands, selection, sm80, sm90
from .compress import SparseBatch, SparseMatrix
from .description import SparseGemmConfig


def matmul(sw: SparseMatrix, x, *, out=None, alpha: float = 1.0, beta: float = 0.0, c=None, bias=None,
           activation: str = "identity", leaky_slope: float = 0.01, out_dtype=None,
           config: str | SparseGemmConfig | None = None, family: str | None = None,
           split_k: int | None = None, split_k_mode: str | None = None, workspace=None,
           autotune: bool = False, force_profile: bool = False,
           info: dict | None = None, _record: dict | None = None, _choice=None):
    """y = activation(alpha * (sw @ x) + beta * c + bias), by a CUTLASS 2:4 sparse tensor-core kernel.

    sw: SparseMatrix [M, K] (from cs.compress, on the device). x: device array [K, N],
    row- or column-major, same dtype as sw; or [batch, K, N] (sw shared by the batch; out
    and c are then [batch, M, N]). sw may also be a SparseBatch (cs.compress of a
    [batch, M, K] array): each matrix times its x[i], or times one shared 2-D x. c (read when beta != 0) and out: [M, N]
    row-major of the output dtype (x's dtype, or f32 with out_dtype="f32"). Returns a
    CuPy [M, N] row-major array (`out` if given). Runs on the current CuPy stream and
    never synchronizes. `info`, if a dict, receives what was chosen.

    bias: [M] or [M, 1] (one value per output row, as a Linear layer's bias) or [1, N]
    (one per column), of the output dtype. activation: "identity", "relu", "leaky_relu"
    (negative slope leaky_slope), "gelu" (erf), "gelu_tanh", "silu", "sigmoid", "tanh"
    or "hardswish", applied in the kernel's epilogue.

    family: "sm80" (CUTLASS 2.x, mma.sp, any shape) or "sm90" (CUTLASS 3.x, wgmma.sp +
    TMA, sm_90 GPUs). Default: the family sw was compressed for (cs.compress picks sm90
    on an sm_90 GPU). A matrix compressed for one family is refused by the other:
    convert it with sw.to_layout(family).

    split_k: K slices. split_k_mode "serial" (default): slices add into D in order, in
    the GEMM kernel (sm80: semaphores; sm90: CUTLASS 3.x's stream-K scheduler). "parallel"
    (sm80 only): slices write fp32 partials to a workspace that a reduction kernel sums,
    applying the epilogue. workspace: a device buffer of at least cs.workspace_size(...)
    bytes; default: one from CuPy's memory pool.

    Kernel choice: `config` if given; else the profiler's recorded winner for this
    problem's signature (cs.tune); else a heuristic. autotune=True profiles on a miss;
    force_profile=True profiles again. Profiling synchronizes and takes seconds to minutes.
    """
    import cupy

    # -- operands ---------------------------------------------------------------
    if not isinstance(sw, (SparseMatrix, SparseBatch)):
        raise TypeError(f"sw must be a cutlass_sparse.SparseMatrix (from cs.compress), got {type(sw).__name__}")
    family = family or sw.layout
    if family not in ("sm80", "sm90"):
        raise ValueError(f"family {family!r} must be 'sm80' or 'sm90'")
    if sw.layout != family:
        raise ValueError(f"sw is compressed in the {sw.layout!r} layout; the {family} kernels read "
                         f"{family!r} metadata: convert with sw.to_layout({family!r}) or pass family={sw.layout!r}")
    if isinstance(config, str):
        config = catalog.find(config, family)
    if not sw.is_device:
        raise TypeError("sw holds host (numpy) arrays; call sw.to_device() or compress a cupy array")
    x = operands.as_device_array(x, "x")
    if isinstance(sw, SparseBatch) or x.ndim == 3:
        return batched.matmul(sw, x, out=out, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation,
                              leaky_slope=leaky_slope, out_dtype=out_dtype, config=config, family=family,
                              split_k=split_k, info=info)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D [K, N] (or 3-D [batch, K, N]), got shape {x.shape}")
    if x.dtype != sw.dtype:
        raise TypeError(f"x has dtype {x.dtype}, but sw is {sw.dtype}: both operands must have the same dtype")
    m, k = sw.shape
    k_rows, n = x.shape
    if k_rows != k:
        raise ValueError(f"x has {k_rows} rows, but sw has K = {k} columns (x must be [K, N] = [{k}, N])")
    if n == 0:
        raise ValueError("x has N = 0 columns")
    device_id = x.device.id
    operands.check_same_device(sw.values, "sw", device_id)
    element = dtypes.operand_name(sw.dtype)
    element_out = operands.output_type(element, out_dtype)
    np_out = dtypes.numpy_dtype(element_out)
    if out is not None:
        out = operands.check_output_like(out, "out", m, n, np_out, device_id)
    if beta != 0.0:
        if c is None:
            raise ValueError("beta is non-zero but c is None")
        c = operands.check_output_like(c, "c", m, n, np_out, device_id)
    operands.check_activation(activation, leaky_slope)
    layout_b, ldb = operands.matrix_layout(x, "x")
    split_k, split_k_mode = operands.check_split_k(split_k, split_k_mode, family)
    if element == "s8":
        operands.check_int8(layout_b, n, element_out, activation, split_k, split_k_mode)
    if workspace is not None:
        workspace = operands.as_device_array(workspace, "workspace")
        operands.check_same_device(workspace, "workspace", device_id)
    with cupy.cuda.Device(device_id):
        if _choice is None:
            _choice, split_k, split_k_mode = _profiled(sw, x, family, element, element_out, layout_b, activation,
                                                       out_dtype, config, split_k, split_k_mode,
                                                       autotune, force_profile)
        if bias is not None:
            c, beta = operands.with_bias(bias, c, beta, m, n, np_out, device_id), 1.0
        if family == "sm90":
            return sm90.run(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, config, info,
                            split_k, workspace, activation, leaky_slope, _choice, _record)
        split = sm80.Split(split_k or 1, split_k_mode or "serial")
        return sm80.run(sw, x, layout_b, ldb, out, c, alpha, beta, element, element_out, np_out, config, info,
                        split, workspace, activation, leaky_slope, _record,
                        None if _choice is None else _choice.tile)


def _profiled(sw, x, family, element, element_out, layout_b, activation, out_dtype, config, split_k,
              split_k_mode, autotune=False, force=False):
    """(profiler choice or None, split_k, split_k_mode): a recorded winner (profiling first
    if asked) applies when the caller names neither a kernel nor a split."""
    if config is not None or split_k is not None or split_k_mode is not None:
        return None, split_k, split_k_mode
    from . import profiler

    choice = profiler.choice_for(sw, x, family, element, element_out, layout_b, activation, out_dtype,
                                 autotune, force)
    if choice is None:
        return None, split_k, split_k_mode
    return choice, choice.split_k, choice.split_k_mode


def workspace_size(sw: SparseMatrix, x, *, out_dtype=None, config: str | SparseGemmConfig | None = None,
                   family: str | None = None, split_k: int | None = None, split_k_mode: str | None = None,
                   activation: str = "identity") -> int:
    """Bytes of workspace cs.matmul needs for these operands and options (0 when none).

    Pass a buffer at least this large as matmul(..., workspace=buf) to keep a call free of
    allocation (CUDA graph capture); the result is the same for any data of these shapes.
    """
    family = family or sw.layout
    x = operands.as_device_array(x, "x")
    split_k, split_k_mode = operands.check_split_k(split_k, split_k_mode, family)
    if isinstance(config, str):
        config = catalog.find(config, family)
    m, k = sw.shape
    n = x.shape[1]
    element = dtypes.operand_name(sw.dtype)
    element_out = operands.output_type(element, out_dtype)
    layout_b, _ = operands.matrix_layout(x, "x")
    # The same kernel choice as matmul's, a profiler record included.
    choice, split_k, split_k_mode = _profiled(sw, x, family, element, element_out, layout_b, activation,
                                              out_dtype, config, split_k, split_k_mode)
    if family == "sm80":
        split = sm80.Split(split_k or 1, split_k_mode or "serial")
        m_pad = sw.padded_shape[0]
        if config is not None:
            tile = config.threadblock
        elif choice is not None:
            tile = choice.tile[0]
        else:
            tile = selection.choose_tile(catalog.for_element(sm80.FAMILY, element), m_pad, n, k,
                                         operands.device_facts(x.device.id)[1])[0]
        return sum(sm80.workspace_parts(m_pad, n, tile, split))
    config, scheduling = sm90.resolve(m, n, k, x.device.id, element, element_out, layout_b, config, split_k,
                                      activation, choice)
    return sm90.workspace_size(config, x.device.id, m, n, k, scheduling)


def linear(x, sw: SparseMatrix, bias=None, activation: str = "identity", **options):
    """A Linear layer with a 2:4 sparse weight: activation(x @ w.T + bias).

    x: [tokens, K] device array; sw: the compressed weight [features, K]; bias: [features].
    Computed as w @ x.T, which reads x in place (x.T is column-major) and writes
    [features, tokens] row-major: the result is its transpose, a [tokens, features] view
    with no copy (Fortran-ordered; its .T is contiguous, and a following cs.linear reads
    it as it is). Other options go to cs.matmul.
    """
    if not isinstance(sw, SparseMatrix):
        raise TypeError(f"sw must be a cutlass_sparse.SparseMatrix (one weight), got {type(sw).__name__}")
    x = operands.as_device_array(x, "x")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, K], got shape {x.shape}")
    return matmul(sw, x.T, bias=bias, activation=activation, **options).T
