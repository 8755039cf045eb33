#!/usr/bin/env python3
"""One verified 2:4 sparse GEMM, timed against dense cuBLAS (CuPy matmul) in the same run.

    python scripts/run_gemm.py --m 4096 --n 4096 --k 4096 [--dtype f16|bf16] [--layout-b row|col]
        [--config NAME] [--emit-only] [--arch sm_XX] [--out-dtype f16|bf16|f32]

With no GPU it says so, emits and compiles the kernel for --arch (warming the cache) and
exits 0 when that worked. With a GPU it exits 1 if the result does not match the dense
reference.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout too

import numpy as np  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.build import cache, kernels, warmup  # noqa: E402
from cutlass_sparse.describe import catalog, dtypes, selection  # noqa: E402
from cutlass_sparse.profiler.tune import format_table  # noqa: E402
from cutlass_sparse import reference  # noqa: E402

# Relative error (Frobenius) allowed against a float32 dense reference.
TOLERANCE = {"f16": 2e-3, "bf16": 1e-2}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, required=True)
    p.add_argument("--n", type=int, required=True)
    p.add_argument("--k", type=int, required=True)
    p.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    p.add_argument("--out-dtype", default=None, choices=["f16", "bf16", "f32"])
    p.add_argument("--layout-b", default="row", choices=["row", "col"])
    p.add_argument("--config", default=None, help="procedural name of a catalog configuration")
    p.add_argument("--family", default=None, choices=["sm80", "sm90"],
                   help="kernel family (default: sm90 on an sm_90 GPU or for --arch sm_90a, else sm80)")
    p.add_argument("--arch", default=None, help="compile target without a GPU (default sm_80), e.g. sm_90")
    p.add_argument("--emit-only", action="store_true", help="write the emitted C++ and stop")
    p.add_argument("--emit-path", default=None, help="where --emit-only writes (default: stdout)")
    p.add_argument("--split-k", type=int, default=None, help="K slices (default: chosen per shape)")
    p.add_argument("--split-k-mode", default=None, choices=["serial", "parallel"],
                   help="serial: slices add into D in the GEMM; parallel (sm80): fp32 partials + reduction kernel")
    p.add_argument("--activation", default="identity", help="epilogue activation (relu, gelu, silu, ...)")
    p.add_argument("--profile", action="store_true",
                   help="time every catalog candidate first (checked against dense), record the winner, use it")
    p.add_argument("--repeats", type=int, default=20, help="calls per timed CUDA graph")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def planned_config(args, sm_count: int):
    """The configuration matmul would choose for contiguous operands of this shape."""
    if args.config:
        return catalog.find(args.config, args.family)
    return selection.config_for_shape(args.m, args.n, args.k, args.dtype, args.out_dtype or args.dtype,
                                      args.layout_b, sm_count, args.family)


def compile_only(args) -> int:
    arch = kernels.normalize_arch(args.arch or "sm_80")
    args.family = args.family or ("sm90" if arch == "sm_90a" else "sm80")
    config = planned_config(args, sm_count=132)
    print(f"config        {config.name}")
    print(f"arch          {arch}")
    compiled = kernels.get(config, arch)
    source = "cache" if compiled.from_cache else f"compiled in {compiled.compile_seconds:.2f} s"
    print(f"kernel        {source} ({len(compiled.cubin)} byte cubin, {compiled.shared_bytes} B shared)")
    return 0


def run_on_gpu(args) -> int:
    import cupy

    rng = np.random.default_rng(args.seed)
    np_dtype = dtypes.numpy_dtype(args.dtype)
    w = cupy.asarray(rng.standard_normal((args.m, args.k), dtype=np.float32).astype(np_dtype))
    x_host = rng.standard_normal((args.k, args.n), dtype=np.float32).astype(np_dtype)
    x = cupy.asarray(x_host) if args.layout_b == "row" else cupy.asfortranarray(cupy.asarray(x_host))
    w = cs.prune_2to4(w)
    sw = cs.compress(w, layout=args.family)

    if args.profile:
        print(f"profiling {args.m} x {args.n} x {args.k} ...", flush=True)
        winner, rows = cs.tune(sw, x, out_dtype=args.out_dtype, activation=args.activation, force=True,
                               progress=warmup.print_progress_text)
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
    t_sparse = reference.kernel_median_ms(run_sparse, calls=args.repeats)
    t_dense = reference.kernel_median_ms(run_dense, calls=args.repeats)
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
    print(f"sparse        {t_sparse:.4f} ms  {flops / t_sparse / 1e9:8.1f} TFLOP/s")
    print(f"dense cuBLAS  {t_dense:.4f} ms  {flops / t_dense / 1e9:8.1f} TFLOP/s")
    print(f"ratio         {t_dense / t_sparse:.3f}x dense (>1 is faster); kernel-only: median of 15 "
          f"timings of {args.repeats} back-to-back calls queued behind a busy GPU")
    print(f"per call      sparse {call_sparse * 1e3:.1f} us, dense {call_dense * 1e3:.1f} us "
          f"(CUDA events around one Python call: includes host overhead)")
    print(f"error         rel {err:.2e}, max abs {max_abs:.3e} vs float32 dense reference "
          f"({'PASS' if ok else 'FAIL'}, tolerance {TOLERANCE[args.dtype]:.0e})")
    return 0 if ok else 1


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.emit_only:
        args.family = args.family or ("sm90" if args.arch and kernels.normalize_arch(args.arch) == "sm_90a" else "sm80")
        config = planned_config(args, sm_count=132)
        source = cs.emit_source(config)
        if args.emit_path:
            Path(args.emit_path).write_text(source)
            print(f"{config.name}: source written to {args.emit_path}")
        else:
            print(source)
        return 0
    if not reference.gpu_available():
        print("no GPU found: compiling only, to warm the kernel cache "
              f"({os.environ.get('CUTLASS_SPARSE_CACHE') or 'default cache path'})")
        return compile_only(args)
    return run_on_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
