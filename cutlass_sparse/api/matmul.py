"""cs.matmul, cs.linear, cs.workspace_size, cs.tune: the public calls. Operands are checked
into a Problem (api.operands), the Problem gets its plan (plan.plans: looked up, or made
with the kernel chosen from config, profiler record or heuristic), and the plan launches.
"""
from __future__ import annotations

import functools

from ..describe import catalog, dtypes, selection
from ..describe.description import SparseGemmConfig
from ..formats.matrices import SparseBatch, SparseMatrix
from ..launch import graphs
from ..plan import plans, stand_in
from ..profiler import tune as profiler
from . import batched, eager, eager_keys, operands, options, tokens
from .interop import is_torch, torch_io


def _torch_out(sw, x, *, out_dtype=None, tokens_major=False, **_):
    """For torch operands: the [M, N] torch tensor a 2-D call writes, allocated by torch
    (tokens_major: its transpose, [N, M])."""
    import torch

    if not (isinstance(sw, SparseMatrix) and is_torch(x) and x.is_cuda and x.dim() == 2):
        return None
    if out_dtype is None and not tokens_major and eager_keys.padded_out(sw.layout, x.shape[1], x.element_size()):
        return None   # the library's padded D, handed over as an [M, N] view (api.eager_keys.padded_out)
    if out_dtype is None:
        dtype = torch.int32 if x.dtype == torch.int8 else x.dtype
    else:
        try:
            dtype = eager.torch_out_dtype(dtypes.parse(out_dtype))
        except (KeyError, ValueError):
            dtype = None
        if dtype is None:
            return None   # cs.matmul says what is wrong with it
    shape = (x.shape[1], sw.shape[0]) if tokens_major else (sw.shape[0], x.shape[1])
    return torch.empty(shape, dtype=dtype, device=x.device)


_FAST_OPTIONS = {"alpha": 1.0, "beta": 0.0, "activation": "identity", "leaky_slope": 0.01, "out_dtype": None,
                 "config": None, "family": None, "split_k": None, "split_k_mode": None}
_DEFAULT_OPTIONS = tuple(_FAST_OPTIONS.values())


def _options(kwargs: dict) -> tuple:
    """The options part of an eager key, as cs.matmul builds it from its parameters."""
    if not kwargs or (len(kwargs) == 1 and "out" in kwargs):
        return _DEFAULT_OPTIONS
    return tuple(kwargs.get(name, default) for name, default in _FAST_OPTIONS.items())


@functools.lru_cache(maxsize=64)
def _activation_options(activation) -> tuple:
    return _options({"activation": activation})


def _fast_options(kwargs: dict) -> bool:
    """Whether every option is one the eager path takes (others go the full way)."""
    return all(k in _FAST_OPTIONS or k in ("out", "bias") or v is None or v is False for k, v in kwargs.items())


def _torch_fast_path(fn):
    """A torch call that repeats an earlier one (or its class, api.eager) runs from the
    tensors' own attributes and pointers, with no CuPy view made; others go on to `fn`."""
    @functools.wraps(fn)
    def wrapper(sw, x, **kwargs):
        bias = kwargs.get("bias")
        if not is_torch(x) or (kwargs and not _fast_options(kwargs)) or (bias is not None and not is_torch(bias)):
            return fn(sw, x, **kwargs)
        out = kwargs.get("out")
        fast = eager_keys.torch_key(sw, x, out, _options(kwargs), bias)
        entry = None if fast is None else eager.lookup(fast)
        if entry is not None and eager.takes_torch_bias(entry, bias):
            return eager.torch_run(entry, sw, x, out, bias)
        if out is None:
            out = _torch_out(sw, x, **kwargs)
            if out is not None:
                kwargs["out"] = out   # the miss runs with it, so its plan is kept under the key above
        return fn(sw, x, **kwargs)
    return wrapper


@_torch_fast_path
@torch_io(make_out=_torch_out, device=True)
def matmul(sw: SparseMatrix, x, *, out=None, alpha: float = 1.0, beta: float = 0.0, c=None, bias=None,
           activation: str = "identity", leaky_slope: float = 0.01, out_dtype=None,
           config: str | SparseGemmConfig | None = None, family: str | None = None,
           split_k: int | None = None, split_k_mode: str | None = None, workspace=None,
           autotune: bool = False, force_profile: bool = False, info: dict | None = None):
    """y = activation(alpha * (sw @ x) + beta * c + bias), by a CUTLASS 2:4 sparse tensor-core kernel.

    sw: SparseMatrix [M, K] (from cs.compress, on the device). x: device array [K, N],
    row- or column-major, same dtype as sw; or [batch, K, N] (sw shared by the batch; out
    and c are then [batch, M, N]). sw may also be a SparseBatch (cs.compress of a
    [batch, M, K] array): each matrix times its x[i], or times one shared 2-D x. c (read when beta != 0) and out: [M, N]
    row-major of the output dtype (x's dtype, or f32 with out_dtype="f32"). Returns a
    CuPy [M, N] row-major array (`out` if given; a torch tensor for torch operands). On
    sm90, where N is not in whole 16-byte vectors, the array the library allocates is an
    [M, N] view of rows padded to them (nothing is copied out). Runs on the current CuPy
    stream (torch's for torch operands) and never synchronizes. `info`, if a dict,
    receives what was chosen.

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
    problem's signature (cs.tune); else a heuristic. Where that is an sm90 GEMM the
    kernel cache lacks and neither family nor config is named, it compiles in a
    background process (a minute or two) while these calls run on the sm80 family
    (plan.stand_in; CUTLASS_SPARSE_STAND_IN=0 waits instead). autotune=True profiles on a miss;
    force_profile=True profiles again. Profiling synchronizes and takes seconds to minutes.
    """
    import cupy

    fast = None
    if c is None and workspace is None and info is None and not (autotune or force_profile):
        fast = eager_keys.key(sw, x, out, bias, (alpha, beta, activation, leaky_slope, out_dtype, config, family,
                                                 split_k, split_k_mode))
        entry = None if fast is None else eager.lookup(fast)
        if entry is not None:
            return eager.run(entry, sw, x, out, bias)
    may_stand_in = family is None and config is None and not (autotune or force_profile)
    # a call the fast path did not take: every rule that needs no GPU, before anything touches CUDA
    family = operands.check_sparse(sw, family)
    x = operands.as_device_array(x, "x")
    config = _config(config, family)
    operands.check_call(sw, x, family=family, out=out, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation,
                        leaky_slope=leaky_slope, out_dtype=out_dtype, split_k=split_k, split_k_mode=split_k_mode,
                        workspace=workspace, info=info)
    # what the call allocates for itself is kept by a graph the stream may be capturing
    with graphs.Temporaries():
        epilogue = dict(alpha=alpha, beta=beta, c=c, bias=bias, activation=activation, leaky_slope=leaky_slope,
                        out_dtype=out_dtype, split_k=split_k)
        if (isinstance(sw, SparseBatch) or x.ndim == 3) and family == "sm90":
            return _as_one_wide_gemm(sw, x, out=out, config=config, info=info,
                                     family=None if may_stand_in else "sm90", **epilogue)
        if isinstance(sw, SparseBatch) or x.ndim == 3:
            return batched.matmul(sw, x, out=out, config=config, info=info, **epilogue)
        call = operands.gemm_call(sw, x, family=family, out=out, split_k_mode=split_k_mode, **epilogue)
        if workspace is not None:
            workspace = operands.as_device_array(workspace, "workspace")
            operands.check_same_device(workspace, "workspace", call.problem.device_id)
        with cupy.cuda.Device(call.problem.device_id):
            if (autotune or force_profile) and config is None and split_k is None and split_k_mode is None:
                profiler.tune(call.problem, sw, call.x, force=force_profile)   # records the winner plans.get uses
            stood_in_for = None
            if may_stand_in and call.problem.family == "sm90":
                awaited = stand_in.awaited_kernel(call.problem)
                sw80 = None if awaited is None else stand_in.sm80_weight(sw, awaited)
                if sw80 is not None:   # the sm90 GEMM compiles elsewhere: the sm80 family runs this call
                    stood_in_for, sw, fast = awaited[0].name, sw80, None    # (not remembered)
                    call = operands.gemm_call(sw, x, family="sm80", out=out, split_k_mode=split_k_mode, **epilogue)
            plan = plans.get(call.problem, config)
            vector = operands.bias_vector_of(call)   # a row bias the sm90 epilogue adds by pointer
            scales = {} if vector is None else {"scales": operands.row_bias_scales(vector)}
            result = call.finish(plan.run(sw, call.x, call.out, operands.folded_c(call), workspace, **scales))
    if fast is not None:
        eager.remember(fast, call, x, out, plan)
    if info is not None:
        info.update(plan.info())
        if stood_in_for is not None:
            info["stand_in_for"] = stood_in_for
    return result


def _config(config, family: str):
    """The SparseGemmConfig a call names (by its procedural name, in the family's catalog), or None."""
    if config is None or isinstance(config, SparseGemmConfig):
        return config
    if not isinstance(config, str):
        raise TypeError(f"config must be a configuration name (str) or a SparseGemmConfig, got {type(config).__name__}")
    try:
        return catalog.find(config, family)
    except ValueError as exc:
        raise ValueError(f"config: {exc}") from None


def _as_one_wide_gemm(sw, x, *, out, alpha, beta, c, bias, activation, leaky_slope, out_dtype, config, split_k,
                      info, family):
    """sm90, one weight times a batch of x: one GEMM over the concatenated columns,
    sw @ [x[0] | x[1] | ...], which is what a batched kernel would compute with a wider N.
    A batch of column-major x[i] stored one after another is read in place; other layouts
    cost one copy of x. The result is a [batch, M, N] view of the [M, batch*N] D."""
    import cupy

    if isinstance(sw, SparseBatch):
        raise ValueError("a SparseBatch is compressed in the sm80 layout; the sm90 family takes one shared weight")
    batch, k_rows, n = x.shape
    m, k = sw.shape
    if batch == 0 or k_rows != k:
        raise ValueError(f"x must be [batch >= 1, {k}, N], got {x.shape}")
    wide_x = x.transpose(1, 0, 2).reshape(k, batch * n)      # a view when each x[i] is column-major
    if bias is not None and bias.shape == (1, n):
        bias = cupy.tile(bias, (1, batch))
    if beta != 0.0 and c is not None and c.ndim == 3:
        c = c.transpose(1, 0, 2).reshape(m, batch * n)
    elif beta != 0.0 and c is not None:
        c = cupy.tile(c, (1, batch))
    wide = matmul(sw, wide_x, alpha=alpha, beta=beta, c=c, bias=bias, activation=activation,
                  leaky_slope=leaky_slope, out_dtype=out_dtype, config=config, family=family, split_k=split_k,
                  info=info)
    y = wide.reshape(m, batch, n).transpose(1, 0, 2)
    if out is None:
        return y
    out = operands.as_device_array(out, "out")
    if out.shape != y.shape or out.dtype != y.dtype:
        raise ValueError(f"out must be {list(y.shape)} of dtype {y.dtype}, got {out.shape} {out.dtype}")
    out[...] = y
    return out


@torch_io(device=True)
def workspace_size(sw: SparseMatrix, x, *, out_dtype=None, config: str | SparseGemmConfig | None = None,
                   family: str | None = None, split_k: int | None = None, split_k_mode: str | None = None,
                   activation: str = "identity") -> int:
    """Bytes of workspace cs.matmul needs for these operands and options (0 when none).

    Pass a buffer at least this large as matmul(..., workspace=buf) to keep a call free of
    allocation (CUDA graph capture); the result is the same for any data of these shapes.
    """
    import cupy

    family = operands.check_sparse(sw, family)
    x = operands.as_device_array(x, "x", "workspace_size")
    config = _config(config, family)
    call = operands.gemm_call(sw, x, family=family, out_dtype=out_dtype, split_k=split_k,
                              split_k_mode=split_k_mode, activation=activation)
    with cupy.cuda.Device(call.problem.device_id):
        return plans.get(call.problem, config).workspace_bytes


@torch_io(device=True)
def tune(sw, x, *, out_dtype=None, activation: str = "identity", family: str | None = None,
         force: bool = False, jobs: int | None = None, progress=None):
    """Profile every candidate kernel for sw @ x, record the fastest verified one for this
    problem's signature and return (winner, table of rows). With a record already there
    and force=False, returns it without profiling. progress(done, total, text) is called
    as work finishes. Synchronizes; takes seconds to minutes."""
    import cupy

    family = operands.check_sparse(sw, family)
    x = operands.as_device_array(x, "x", "tune")
    call = operands.gemm_call(sw, x, family=family, out_dtype=out_dtype, activation=activation)
    with cupy.cuda.Device(call.problem.device_id):
        return profiler.tune(call.problem, sw, call.x, force=force, jobs=jobs, progress=progress)


def linear(x, sw: SparseMatrix, bias=None, activation: str = "identity", **options):
    """A Linear layer with a 2:4 sparse weight: activation(x @ w.T + bias).

    x: [tokens, K] device array, or [..., K] with any leading dimensions as torch.nn.Linear
    takes it (folded into tokens; the result is [..., features]); sw: the compressed weight
    [features, K]; bias: [features].
    Computed as w @ x.T, which reads x in place (x.T is column-major). The result is the
    transpose of the [features, tokens] D, a [tokens, features] view with no copy:
    Fortran-ordered where D is row-major, contiguous where the sm90 family writes D
    column-major (token counts that are not whole 16-byte vectors, such as a decode step's,
    so nothing is staged). A following cs.linear reads either as it is. Other options go to
    cs.matmul (out=: the [features, tokens] array it writes).
    """
    if not isinstance(sw, SparseMatrix):
        raise TypeError(f"sw must be a cutlass_sparse.SparseMatrix (one weight), got {type(sw).__name__}")
    if getattr(x, "ndim", 2) != 2:   # [..., K]: leading dimensions folded into tokens (api.tokens)
        x, lead = tokens.folded(x)
        if lead is not None:
            if options.get("out") is not None:
                raise ValueError("out= (matmul's [features, tokens] D) takes a 2-D x only; x is "
                                 f"{[*lead, x.shape[-1]]}")
            return tokens.unfolded(linear(x, sw, bias, activation, **options), lead)
    if type(activation) is str and "out" not in options and (not options or _fast_options(options)):
        # a call seen before (api.eager): from the operands' attributes to one launch
        torch_x = is_torch(x)
        if (bias is None or is_torch(bias)) if torch_x else (bias is None and type(x) is eager_keys.array_type()):
            fast = _options(dict(options, activation=activation)) if options else _activation_options(activation)
            done = eager.torch_linear(x, sw, fast, bias) if torch_x else eager.cupy_linear(x, sw, fast)
            if done is not None:
                return done
    if not is_torch(x):   # a torch x stays one: matmul takes it and gives torch back
        x = operands.as_device_array(x, "x", "linear")
    elif not getattr(x, "is_cuda", True):   # a CPU tensor
        operands.check_device_array(x, "x", "linear")
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D [tokens, K], got shape {tuple(x.shape)}")
    if "out" not in options and (options.get("family") or sw.layout) == "sm90" and \
            selection.linear_out_layout(x.shape[0], _itemsize(x)) == "col":
        # A token count a row-major D cannot take in place: the sm90 kernels write D
        # column-major, a contiguous [tokens, features] result, with nothing staged.
        tokens_major = _linear_out(sw, x, options.get("out_dtype"))
        if tokens_major is not None:
            options["out"] = tokens_major.T
    return matmul(sw, x.T, bias=bias, activation=activation, **options).T


def _itemsize(x) -> int:
    return x.element_size() if is_torch(x) else x.dtype.itemsize


def _linear_out(sw, x, out_dtype):
    """The [tokens, features] array cs.linear writes (its .T is matmul's column-major out),
    or None where matmul should allocate (an out_dtype matmul will refuse)."""
    if is_torch(x):
        return _torch_out(sw, x.T, out_dtype=out_dtype, tokens_major=True)
    import cupy

    try:
        element_out = options.output_type(dtypes.operand_name(sw.dtype), out_dtype)
    except (TypeError, ValueError):
        return None
    with cupy.cuda.Device(x.device.id):
        return cupy.empty((x.shape[0], sw.shape[0]), dtype=dtypes.numpy_dtype(element_out))
