#!/usr/bin/env python3
"""Issues 13 and 15 (GPU machine): each large sm90 tile with C in its epilogue (what every
kernel had) against the same tile without C (`reads_c=False`: ElementC void, so the
epilogue's shared memory holds D's buffers only and the mainloop takes the room as
another stage), and with explicit stage counts, beside dense and cuSPARSELt on the same
operands, in one process, kernel-only. Every result is checked against a dense reference
(f16/bf16: the dense product; e4m3: the dequantized operands' product; s8: exact).
Run from the repository root: python scripts/device/sweep_void_c.py [dtype ...] [--round 2]"""
import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.cli import bench, bench_quantized  # noqa: E402
from cutlass_sparse.describe import catalog, dtypes  # noqa: E402
from cutlass_sparse.describe.helper_kernels import CompressorConfig  # noqa: E402
from cutlass_sparse.describe.problem import Epilogue, Problem  # noqa: E402
from cutlass_sparse.formats.matrices import SparseMatrix  # noqa: E402
from cutlass_sparse.formats.quantize import decode, decode_e4m3, quantize, quantize_e4m3  # noqa: E402
from cutlass_sparse.launch import sm90_compress  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402

CO, PP = "cooperative", "pingpong"
# dtype -> (output, x layout, alignment of x, of D)
KINDS = {"f16": ("f16", "row", 8, 8), "bf16": ("bf16", "row", 8, 8), "e4m3": ("bf16", "col", 16, 8),
         "s8": ("s32", "col", 16, 4)}
# dtype -> [(threadblock, cluster, schedule, stage counts to try without C: 0 = automatic)]
TILES = {
    "f16": [((128, 256, 64), (2, 1, 1), CO, (0,)), ((256, 128, 64), (1, 2, 1), CO, (0,)),
            ((128, 128, 128), (1, 2, 1), CO, (0,)), ((64, 32, 128), (4, 1, 1), PP, (0,))],
    "e4m3": [((128, 256, 128), (2, 1, 1), CO, (0, 5)), ((128, 128, 256), (1, 2, 1), CO, (0,))],
    "s8": [((256, 128, 128), (1, 2, 1), CO, (0,)), ((128, 256, 128), (2, 1, 1), CO, (0,))],   # s32 D: 5 stages do not fit
}
TILES["bf16"] = TILES["f16"][:3]
# `--round 2`, after cuSPARSELt's kernels were read off Nsight Compute
# (docs/ncu_cusparselt_kernels_h100.log: every one fills the 232448 bytes of shared memory;
# fp8 128x256x128 in 4x1 clusters, int8 128x256x128 in 2x1): without C only, each tile
# with CUTLASS's epilogue subtile and with a narrower one (an int32 D's buffers are twice a
# bf16 D's; 128x16 leaves room for another stage).
ROUND2 = {
    "e4m3": [((128, 256, 128), (2, 1, 1), CO, ((),)), ((128, 256, 128), (4, 1, 1), CO, ((),))],
    "s8": [((256, 128, 128), (1, 2, 1), CO, ((), (128, 16))), ((128, 256, 128), (2, 1, 1), CO, ((), (128, 16))),
           ((128, 256, 128), (4, 1, 1), CO, ((128, 16),))],
}
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (4096, 4096, 11008), (4096, 512, 4096),
          (14336, 512, 4096), (28672, 4096, 8192), (8192, 512, 28672)]
DECODE = [(4096, 16, 4096), (14336, 16, 4096)]   # f16 only: the ping-pong tile


def compile_candidates(items, jobs: int) -> None:
    """Compile a sweep's (config, arch) items (cached ones are found at once), a line each."""
    for name, _, status, _ in warmup.compile_all(items, None, jobs):
        print(f"{status[:200]:12} {name}", flush=True)


def candidates(dtype, round_=1):
    out, layout_b, align_b, align_c = KINDS[dtype]
    family = catalog.load(catalog.for_element("sm90", dtype))
    found = []
    for tb, cluster, schedule, variants in (TILES if round_ == 1 else ROUND2).get(dtype, []):
        with_c = family.config((tb, (4, 1, 1), 0, cluster, schedule, "persistent"), dtype, out, layout_b,
                               align_b, align_c)
        if round_ == 1:   # with C, then without C at each stage count
            found += [with_c] + [dataclasses.replace(with_c, reads_c=False, stages=s) for s in variants]
        else:             # without C, at each epilogue subtile
            found += [dataclasses.replace(with_c, reads_c=False, epilogue_tile=e) for e in variants]
    return found


def label(config):
    tb = "x".join(map(str, config.threadblock))
    epilogue = "x".join(map(str, config.epilogue_tile)) or "auto"
    return (f"{tb:11} c{config.cluster[0]}x{config.cluster[1]} {config.schedule[:4]} "
            f"{'C   ' if config.reads_c else 'no C'} stages {config.stages or 'auto'} epi {epilogue:6}")


def operands(dtype, m, n, k, rng):
    """(sw, x as the kernel reads it, reference float32 [m, n], alpha, peers)."""
    w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32))
    if dtype in ("f16", "bf16"):
        np_dtype = dtypes.numpy_dtype(dtype)
        w = dtypes.from_float32(w, np_dtype)
        x = dtypes.from_float32(rng.standard_normal((k, n), dtype=cupy.float32), np_dtype)
        sw = cs.compress(w, layout="sm90")
        y = cupy.matmul(w, x)
        ref = reference.to_float32(y)
        found = {"dense": lambda: cupy.matmul(w, x, out=y)}
        peer = bench.cusparselt(w, x)
        if peer is not None:
            found["cslt"] = peer[0]
        return sw, x, ref, 1.0, found
    if dtype == "e4m3":
        wq, w_scale = quantize_e4m3(w, axis=None)
        xq, x_scale = quantize_e4m3(rng.standard_normal((n, k), dtype=cupy.float32), axis=None)
        values, metadata = sm90_compress.compress(wq, "e4m3", 128)
        sw = SparseMatrix((m, k), dtypes.float8_e4m3, values, metadata, "sm90", 128)
        ref = decode_e4m3(wq, float(w_scale)) @ decode_e4m3(xq, float(x_scale)).T
        return sw, xq, ref, float(w_scale) * float(x_scale), bench_quantized.peers(wq, xq, "e4m3")
    wq, _ = quantize(w, "s8", axis=1)
    xq, _ = quantize(rng.standard_normal((n, k), dtype=cupy.float32), "s8", axis=1)
    values, metadata = sm90_compress.compress(wq, "s8", 128)
    sw = SparseMatrix((m, k), cupy.dtype(cupy.int8), values, metadata, "sm90", 128)
    ref = decode(wq, "s8") @ decode(xq, "s8").T
    return sw, xq, ref, 1.0, bench_quantized.peers(wq, xq, "s8")


def as_float32(d, dtype):
    if KINDS[dtype][0] == "bf16":
        return (d.view(cupy.uint16).astype(cupy.uint32) << 16).view(cupy.float32)
    return d.astype(cupy.float32)


def check(got, ref, dtype):
    if dtype == "s8":
        wrong = int((got != ref).sum())
        return wrong == 0, f"wrong {wrong}"
    err = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
    return err < {"f16": 2e-3, "bf16": 1.2e-2, "e4m3": 1e-2}[dtype], f"rel err {err:.1e}"


def sweep(dtype, shapes, rng, round_):
    out, layout_b, _, _ = KINDS[dtype]
    cands = candidates(dtype, round_)
    for m, n, k in shapes:
        sw, x, ref, alpha, peers = operands(dtype, m, n, k, rng)
        flops = 2.0 * m * n * k
        print(f"\n{dtype} {m}x{n}x{k}", flush=True)
        for name, run in peers.items():
            ms = reference.kernel_median_ms(run)
            print(f"  {name:44s} {ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s", flush=True)
        problem = Problem.contiguous("sm90", m, n, k, element=dtype, element_out=out, layout_b=layout_b)
        problem = dataclasses.replace(problem, epilogue=Epilogue(alpha=alpha))
        d = cupy.empty((m, n), dtype=dtypes.numpy_dtype(out))
        for config in cands:
            small = config.threadblock[1] <= 32
            if small != (n <= 128):
                continue
            try:
                plan = plans.make(problem, config)
                if not plan.direct:
                    print(f"  ours {label(config)}: staged plan, not timed here", flush=True)
                    continue
                d.fill(0)
                plan.launch_direct(sw, x.data.ptr, d.data.ptr)
                ok, what = check(as_float32(d, dtype), ref, dtype)
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, x.data.ptr, d.data.ptr))
                print(f"  ours {label(config)} {plan.compiled.shared_bytes // 1024:3d} KB "
                      f"{ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s  {what} {'ok' if ok else 'FAIL'}",
                      flush=True)
            except Exception as exc:   # noqa: BLE001 - a sweep reports and goes on
                print(f"  ours {label(config)}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)


# `--round 3`: the tile scheduler's swizzle (a run-time argument: no new kernels) for the
# 8-bit kernels selection picks at the bench's n >= 512 rows (its rule was fitted on f16).
SWIZZLE_SHAPES = [(m, n, k) for m, n, k in bench.FP8_SHAPES + bench.LLM_SHAPES if n >= 512]


def sweep_swizzle(dtype, shapes, rng):
    from cutlass_sparse.launch.sm90_choice import resolve

    out, layout_b, _, _ = KINDS[dtype]
    for m, n, k in shapes:
        sw, x, ref, alpha, peers = operands(dtype, m, n, k, rng)
        flops = 2.0 * m * n * k
        problem = dataclasses.replace(Problem.contiguous("sm90", m, n, k, element=dtype, element_out=out,
                                                         layout_b=layout_b), epilogue=Epilogue(alpha=alpha))
        chosen = resolve(problem, None)[0]
        line = [f"{dtype} {m}x{n}x{k} {label(chosen)[:22]} (rule: swz{chosen.swizzle}):"]
        for name, run in peers.items():
            if name == "cslt":
                line.append(f"cslt {flops / reference.kernel_median_ms(run) / 1e9:6.0f}")
        d = cupy.empty((m, n), dtype=dtypes.numpy_dtype(out))
        for swizzle in (1, 2, 4, 8):
            plan = plans.make(problem, dataclasses.replace(chosen, swizzle=swizzle))
            d.fill(0)
            plan.launch_direct(sw, x.data.ptr, d.data.ptr)
            ok, what = check(as_float32(d, dtype), ref, dtype)
            ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, x.data.ptr, d.data.ptr))
            line.append(f"swz{swizzle} {flops / ms / 1e9:6.0f}{'' if ok else ' FAIL ' + what}")
        print("  ".join(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dtypes", nargs="*", help=f"of {list(KINDS)}; default: all four")
    parser.add_argument("--compile-only", action="store_true", help="compile the candidates and stop")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--round", type=int, default=1, choices=[1, 2, 3], help="1: TILES (with C and without); "
                        "2: ROUND2 (without C, epilogue subtiles); 3: swizzles of the 8-bit kernels chosen")
    args = parser.parse_args()
    args.dtypes = args.dtypes or (list(KINDS) if args.round == 1 else list(ROUND2))
    if args.round == 3:
        rng = cupy.random.default_rng(0)
        for dtype in args.dtypes:
            sweep_swizzle(dtype, SWIZZLE_SHAPES, rng)
        return
    if not set(args.dtypes) <= set(KINDS):
        parser.error(f"dtypes must be of {list(KINDS)}")
    items = [(c, "sm_90a") for d in args.dtypes for c in candidates(d, args.round)]
    items += [(CompressorConfig(e), "sm_90a") for e in ("e4m3", "s8") if e in args.dtypes]
    for name, _, status, _ in warmup.compile_all(items, None, args.jobs):
        if status.startswith("failed"):
            print(f"compile {name}: {status[:300]}", flush=True)
    if args.compile_only:
        return
    rng = cupy.random.default_rng(0)
    for dtype in args.dtypes:
        sweep(dtype, SHAPES + (DECODE if dtype == "f16" and args.round == 1 else []), rng, args.round)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
