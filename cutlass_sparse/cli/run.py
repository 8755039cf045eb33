"""run: one verified 2:4 sparse GEMM, timed against dense cuBLAS (CuPy matmul) in the same run.

With a GPU it exits 1 if the result does not match the dense reference. With no GPU it
compiles, for --arch, exactly the kernels that run will need on the GPU (the GEMM for
the split and epilogue asked; for parallel split-K also the reduction kernel; for the
sm90 family also the compressor), says which were compiled and which found cached,
and exits 0. --emit-only writes the GEMM's C++ and stops.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from pathlib import Path

import numpy as np

from ..describe import catalog, dtypes, selection
from ..describe.description import ACTIVATIONS
from ..describe.problem import Problem, Split, x_layout
from . import args as types
from .args import UsageError

log = logging.getLogger("cutlass_sparse")

# Relative error (Frobenius) allowed against a float32 dense reference.
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2}
DEFAULT_SM_COUNT = 132   # an H100 SXM; the tile choice depends on it (--sm-count)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--m", type=types.gemm_size, required=True, help="rows of the sparse A and of D")
    p.add_argument("--n", type=types.gemm_size, required=True, help="columns of x and of D")
    p.add_argument("--k", type=types.gemm_size, required=True, help="the reduced dimension")
    p.add_argument("--dtype", default="f16", choices=list(TOLERANCE), help="A and x (default f16)")
    p.add_argument("--out-dtype", default=None, choices=["f16", "bf16", "f32"], help="D (default: --dtype)")
    p.add_argument("--layout-b", default="row", choices=["row", "col"], help="x row- or column-major")
    p.add_argument("--config", default=None, help="procedural name of a catalog configuration")
    p.add_argument("--family", default=None, choices=["sm80", "sm90"],
                   help="kernel family (default: sm90 on an sm_90 GPU or for --arch sm_90a, else sm80)")
    p.add_argument("--arch", default=None, type=types.arch,
                   help="compile target without a GPU: sm_80, sm_86, sm_89, sm_90 (sm80 family) or sm_90a "
                        "(sm90 family); default sm_80, or sm_90a with --family sm90")
    p.add_argument("--sm-count", type=types.positive_int, default=DEFAULT_SM_COUNT,
                   help=f"SMs of the GPU the compile-only run prepares for (the tile choice depends on it; "
                        f"default {DEFAULT_SM_COUNT}, an H100)")
    p.add_argument("--emit-only", action="store_true", help="write the emitted C++ of the GEMM and stop")
    p.add_argument("--emit-path", default=None, type=types.output_file,
                   help="where --emit-only writes (default: stdout)")
    p.add_argument("--split-k", type=types.positive_int, default=None, help="K slices (default: chosen per shape)")
    p.add_argument("--split-k-mode", default=None, choices=["serial", "parallel"],
                   help="serial: slices add into D in the GEMM; parallel (sm80): fp32 partials + reduction kernel")
    p.add_argument("--activation", default="identity", choices=sorted(ACTIVATIONS), metavar="NAME",
                   help=f"epilogue activation: {', '.join(sorted(ACTIVATIONS))}")
    p.add_argument("--profile", action="store_true",
                   help="time every catalog candidate first (checked against dense), record the winner, use it "
                        "(GPU)")
    p.add_argument("--no-stand-in", action="store_true",
                   help="on a cold cache, wait for the sm90 kernels to compile (a minute or two) instead of "
                        "running the sm80 family meanwhile while they compile in a background process")
    p.add_argument("--repeats", type=types.positive_int, default=20, help="calls per timed CUDA graph")
    p.add_argument("--seed", type=types.non_negative_int, default=0, help="operands' random seed (default 0)")


def main(args) -> int:
    from .. import reference

    if args.emit_path and not args.emit_only:
        raise UsageError("argument --emit-path: only with --emit-only")
    if args.profile and args.emit_only:
        raise UsageError("argument --profile: not with --emit-only (--profile times kernels on a GPU; "
                         "--emit-only only writes the source)")
    config = _named_config(args.config, args.family)
    hint = args.family or (None if config is None else "sm90" if config.family == "sm90" else "sm80")
    family, target = types.family_arch(hint, args.arch)
    if args.split_k_mode == "parallel" and family == "sm90":
        raise UsageError("argument --split-k-mode: 'parallel' is sm80 only (the sm90 family reduces K slices "
                         "inside the GEMM kernel): use serial, or --family sm80")
    if args.split_k_mode == "parallel" and (args.split_k or 1) == 1:
        log.warning("--split-k-mode parallel without --split-k 2 or more runs unsplit")
    if args.emit_only:
        return emit_only(args, family, config)
    if reference.gpu_available():
        if args.arch:
            log.info("a GPU is visible: --arch is ignored (kernels compile for the GPU's own arch)")
        return run_on_gpu(args, config)
    if args.profile:
        raise RuntimeError("--profile times kernels on a GPU; none is visible")
    return compile_only(args, family, target, config)


def _named_config(name: str | None, family: str):
    if name is None:
        return None
    try:
        return catalog.find(name, family)
    except (KeyError, ValueError) as exc:
        raise UsageError(f"argument --config: {exc}") from None


def problem_of(args, family: str, target: str, sm_count: int | None = None) -> Problem:
    """The Problem a GPU run of these arguments makes (fresh operands, D allocated)."""
    problem = Problem.contiguous(family, args.m, args.n, args.k, element=args.dtype, element_out=args.out_dtype,
                                 layout_b=x_layout(args.layout_b, args.k, args.n), activation=args.activation,
                                 arch="sm_90" if family == "sm90" else target, sm_count=sm_count or args.sm_count)
    return dataclasses.replace(problem, split_k=args.split_k, split_k_mode=args.split_k_mode)


def missing_sm90_kernels(problem: Problem, config=None) -> list:
    """The (kernel, arch) an sm90 run of problem needs (its GEMM: compressing compiles
    nothing) that the cache lacks; [] for other families, or where compiling is forbidden."""
    from .. import env
    from ..build import kernels
    from ..plan import stand_in

    if problem.family != "sm90" or env.compile_disabled():
        return []
    kernel = stand_in.gemm_kernel(problem, config)   # None: refused, needed_kernels or the run reports it
    return [] if kernel is None or kernels.cached(*kernel) else [kernel]


def stand_in(problem: Problem) -> str | None:
    """On a cold cache, start the sm90 kernels' compile in a detached process and say what
    this run does meanwhile (the sm80 family, whose kernels compile in seconds); None
    where the sm90 kernels are cached, cannot be kept, or compiling is forbidden."""
    from ..build import background, kernels

    missing = missing_sm90_kernels(problem)
    if not missing or not background.can_start():
        return None
    pid, log_path = background.start(missing)
    started = f"started in a background process (pid {pid})" if pid else "compiling in another process already"
    about = kernels.compile_estimate(missing[0][0])   # the GEMM (compressing compiles nothing)
    return (f"sm80 family stand-in: the sm90 GEMM {started}, about {about}, log {log_path}; later runs "
            f"use them (--no-stand-in waits instead)")


def _plan(problem: Problem, config=None):
    """The plan cs.matmul makes for `problem` (no GPU is touched: loading is lazy)."""
    from ..plan import plans

    try:
        return plans.make(problem, config)
    except ValueError as exc:   # the library refuses this problem: a usage error
        raise UsageError(str(exc).splitlines()[0]) from None


def needed_kernels(problem: Problem, config=None) -> list:
    """Compile (or find cached) every kernel a GPU run of `problem` launches; returns the
    CompiledKernels."""
    plan = _plan(problem, config)
    if problem.family == "sm90":
        return [plan.compiled]
    found = [plan.gemm.kernel.compiled]
    if plan.reduction is not None:
        found.append(plan.reduction.kernel.compiled)
    return found


def compile_only(args, family: str, target: str, config=None) -> int:
    from .. import env
    from ..build import kernels
    from ..build.compiler import CompileError

    problem = problem_of(args, family, target)
    # The plan's own checks (a --split-k beyond K's tiles, say) before anything is printed:
    # first_asked stops the plan at its first kernel, compiling nothing.
    kernels.first_asked(lambda: _plan(problem, config))
    print(f"no GPU found: compiling only, to warm the kernel cache ({env.cache_path()})", flush=True)
    try:
        compiled = needed_kernels(problem, config)
    except CompileError as exc:
        if not env.compile_disabled():
            raise
        # NVRTC never ran: say so, as warmup does, not "NVRTC failed to compile"
        raise RuntimeError(f"compilation disabled by CUTLASS_SPARSE_NO_COMPILE and the kernel cache "
                           f"({env.cache_path()}) lacks {exc.name}") from exc
    split = problem.split
    print(f"config        {compiled[-1 if family == 'sm90' else 0].config.name}")
    print(f"arch          {compiled[0].arch}")
    print(f"split-K       {split.slices} {split.mode if split.slices > 1 else '(none)'}, "
          f"activation {problem.activation}")
    for kernel in compiled:
        source = "cache" if kernel.from_cache else f"compiled in {kernel.compile_seconds:.2f} s"
        print(f"kernel        {source} ({len(kernel.cubin)} byte cubin, {kernel.shared_bytes} B shared)  "
              f"{kernel.config.name}")
    return 0


def emit_only(args, family: str, config) -> int:
    from .. import emit_source

    if config is None:
        try:
            config = selection.config_for_shape(args.m, args.n, args.k, args.dtype, args.out_dtype or args.dtype,
                                                args.layout_b, args.sm_count, family)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if family == "sm80":
        config = selection.gemm_variant(config, Split(args.split_k or 1, args.split_k_mode or "serial"),
                                        args.activation)
    else:
        config = dataclasses.replace(config, activation=args.activation)
    source = emit_source(config)
    if args.emit_path:
        try:
            Path(args.emit_path).write_text(source)
        except OSError as exc:   # what the argument check cannot see: permissions, a read-only disk
            raise UsageError(f"argument --emit-path: cannot write {str(args.emit_path)!r} "
                             f"({exc.strerror or exc})") from None
        print(f"{config.name}: source written to {args.emit_path}")
    else:
        print(source)
    return 0


def run_on_gpu(args, config=None) -> int:
    import cupy

    import cutlass_sparse as cs
    from .. import reference
    from ..build import cache
    from ..profiler.tune import format_table

    gpu = cupy.cuda.Device()
    layout, standing_in = args.family, None
    if (args.family or ("sm90" if gpu.compute_capability == "90" else "sm80")) == "sm90":
        problem = problem_of(args, "sm90", types.SM90_TARGET, gpu.attributes["MultiProcessorCount"])
        if args.family is None and config is None and not (args.profile or args.no_stand_in):
            standing_in = stand_in(problem)
        if standing_in:
            layout = "sm80"
            log.info("%s", standing_in)

    rng = np.random.default_rng(args.seed)
    np_dtype = dtypes.numpy_dtype(args.dtype)
    w = cupy.asarray(rng.standard_normal((args.m, args.k), dtype=np.float32).astype(np_dtype))
    x_host = rng.standard_normal((args.k, args.n), dtype=np.float32).astype(np_dtype)
    x = cupy.asarray(x_host) if args.layout_b == "row" else cupy.asfortranarray(cupy.asarray(x_host))
    w = cs.prune_2to4(w)
    sw = cs.compress(w, layout=layout)

    if args.profile:
        log.info("profiling %d x %d x %d ...", args.m, args.n, args.k)
        winner, rows = cs.tune(sw, x, out_dtype=args.out_dtype, activation=args.activation, force=True,
                               progress=progress_text)
        print(format_table(rows))
        print(f"winner        {winner.label} (recorded in {cache.default_cache().path})")

    info: dict = {}
    start = time.perf_counter()
    options = dict(out_dtype=args.out_dtype, config=args.config, split_k=args.split_k,
                   split_k_mode=args.split_k_mode, activation=args.activation)
    y = cs.matmul(sw, x, info=info, **options)
    cupy.cuda.get_current_stream().synchronize()
    first_call = time.perf_counter() - start

    ref = reference.activation(args.activation, reference.to_float32(w) @ reference.to_float32(x))
    err = reference.relative_error(y, ref)
    max_abs = float(cupy.abs(reference.to_float32(y) - ref).max())
    ok = err <= TOLERANCE[args.dtype]

    # Kernel-only times (launches queued behind a busy GPU), then the per-call time a
    # Python caller sees.
    run_sparse = lambda: cs.matmul(sw, x, out=y, **options)  # noqa: E731
    y_dense = cupy.empty((args.m, args.n), dtype=np_dtype)
    run_dense = lambda: cupy.matmul(w, x, out=y_dense)  # noqa: E731
    timed = reference.kernel_medians_ms({"sparse": run_sparse, "dense": run_dense}, calls=args.repeats)
    t_sparse, t_dense = timed["sparse"], timed["dense"]
    call_sparse = reference.median_ms(run_sparse, 20)
    call_dense = reference.median_ms(run_dense, 20)
    flops = 2.0 * args.m * args.n * args.k
    device = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()

    print(f"problem       {args.m} x {args.n} x {args.k}  {args.dtype} -> {args.out_dtype or args.dtype}, "
          f"B {args.layout_b}-major")
    print(f"device        {device} ({info['arch']})")
    print(f"config        {info['config']}  (split-K {info.get('split_k', 1)} {info.get('split_k_mode', '')}, "
          f"activation {args.activation})")
    compile_text = "from cache" if info["from_cache"] else f"compiled, {info['compile_seconds']:.2f} s"
    print(f"kernel        {compile_text}; first call {first_call * 1e3:.1f} ms")
    if standing_in:
        print(f"stand-in      {standing_in}")
    print(f"sparse        {t_sparse:.4f} ms  {flops / t_sparse / 1e9:8.1f} TFLOP/s")
    print(f"dense cuBLAS  {t_dense:.4f} ms  {flops / t_dense / 1e9:8.1f} TFLOP/s")
    print(f"ratio         {t_dense / t_sparse:.3f}x dense (>1 is faster); kernel-only: median of 15 "
          f"timings of {args.repeats} back-to-back calls queued behind a busy GPU, the two taking turns")
    print(f"per call      sparse {call_sparse * 1e3:.1f} us, dense {call_dense * 1e3:.1f} us "
          f"(CUDA events around one Python call: includes host overhead)")
    print(f"error         rel {err:.2e}, max abs {max_abs:.3e} vs float32 dense reference "
          f"({'PASS' if ok else 'FAIL'}, tolerance {TOLERANCE[args.dtype]:.0e})")
    return 0 if ok else 1


def progress_text(done: int, total: int, text: str) -> None:
    """The profiler's progress, one log line per step (stderr, through the cutlass_sparse logger)."""
    log.info("[%d/%d] %s", done, total, text)
