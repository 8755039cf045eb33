#!/usr/bin/env python3
"""Issue 15 (GPU machine): candidate tiles of the sm90 8-bit catalogs, through the plan
layer. fp8 (default): a 2:4 weight quantized to e4m3 with one scale, activations e4m3
with one scale, bf16 out (alpha = the product of the scales); checked against the
dequantized operands' product in float32, then timed against dense fp8
(torch._scaled_mm) and cuSPARSELt fp8, kernel-only, in the same process. `--dtype s8`:
int8 operands, int32 out (the raw accumulator), checked exactly, against torch._int_mm
and cuSPARSELt int8. fp8 data lives in uint8 CuPy arrays (torch views them as
float8_e4m3fn). Run from the repository root."""
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.cli import bench_quantized  # noqa: E402
from cutlass_sparse.describe import dtypes  # noqa: E402
from cutlass_sparse.describe import catalog  # noqa: E402
from cutlass_sparse.describe.helper_kernels import CompressorConfig  # noqa: E402
from cutlass_sparse.describe.problem import Epilogue, Problem  # noqa: E402
from cutlass_sparse.formats.matrices import SparseMatrix  # noqa: E402
from cutlass_sparse.formats.quantize import decode, decode_e4m3, quantize, quantize_e4m3  # noqa: E402
from cutlass_sparse.launch import sm90_compress  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402

def cand(tb, cluster, schedule):
    """A candidate tile of the fp8 catalog's kind (e4m3 in, bf16 out, x K-major)."""
    return catalog.load("sm90_fp8").config((tb, (4, 1, 1), 0, cluster, schedule, "persistent"), "e4m3", "bf16",
                                           "col", 16, 8)


CANDIDATES = [cand((128, 256, 128), (2, 1, 1), "cooperative"), cand((128, 128, 128), (1, 2, 1), "cooperative"),
              cand((64, 128, 128), (1, 1, 1), "pingpong"), cand((64, 64, 128), (4, 1, 1), "pingpong"),
              cand((64, 32, 128), (4, 1, 1), "pingpong"),
              # tile K 256: the bytes of fp16's K 128 tiles (the metadata atom stays 64 x 128)
              cand((128, 128, 256), (1, 2, 1), "cooperative"), cand((64, 64, 256), (4, 1, 1), "pingpong"),
              cand((64, 32, 256), (4, 1, 1), "pingpong"),
              # for 128 tokens at M = 4096 (the weak row: 4096x128x4096 at 0.78x dense with the catalog)
              cand((64, 128, 256), (2, 1, 1), "pingpong"), cand((64, 128, 256), (1, 1, 1), "pingpong"),
              cand((64, 64, 256), (1, 1, 1), "pingpong"),
              # the int8 sweep's large-shape winner (docs/sweep_int8_h100.log), and its 1x2 sibling
              cand((256, 128, 128), (1, 2, 1), "cooperative"), cand((128, 256, 128), (1, 2, 1), "cooperative"),
              # the precise mainloop (a second accumulator), for the cost of fast accumulation
              dataclasses.replace(cand((128, 128, 128), (1, 2, 1), "cooperative"), fast_accum=False)]
# Per-row weight scales and per-token activation scales in the epilogue (scales "row_col").
SCALED = [dataclasses.replace(CANDIDATES[0], scales="row_col"), dataclasses.replace(CANDIDATES[4], scales="row_col")]
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (4096, 512, 4096), (4096, 128, 4096),
          (4096, 32, 4096), (14336, 16, 4096)]
# `--shapes small`: the fp8 rows at 128 tokens and below only (a shorter run)
SMALL = [(4096, 128, 4096), (14336, 128, 4096), (4096, 64, 14336), (6144, 128, 4096)]


def cand_s8(tb, cluster, schedule):
    """A candidate tile of the int8 catalog's kind (s8 in, int32 out, x K-major)."""
    return catalog.load("sm90_s8").config((tb, (4, 1, 1), 0, cluster, schedule, "persistent"), "s8", "s32",
                                          "col", 16, 4)


# The fp8 candidates' tiles (same bytes per element), and cuSPARSELt's 16-bit large tile.
CANDIDATES_S8 = [cand_s8(c.threadblock, c.cluster, c.schedule) for c in CANDIDATES if c.fast_accum]
# `--large`: deeper K tiles (256) and the other cluster for the large shapes, where both
# 8-bit catalogs trail cuSPARSELt by 3-8%, beside each catalog's current large tile.
_LARGE = [((256, 128, 256), (1, 2, 1)), ((128, 256, 256), (2, 1, 1)), ((256, 128, 128), (2, 1, 1))]
LARGE_FP8 = [cand(tb, cl, "cooperative") for tb, cl in _LARGE] + [cand((128, 256, 128), (2, 1, 1), "cooperative")]
# (int8's 128x256x256 c2x1 failed to compile with NVRTC; not looked into)
LARGE_S8 = [cand_s8(tb, cl, "cooperative") for tb, cl in _LARGE if tb != (128, 256, 256)] + [
    cand_s8((256, 128, 128), (1, 2, 1), "cooperative")]
LARGE_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (14336, 512, 4096),
                (28672, 4096, 8192), (8192, 512, 28672)]
LLM_SHAPES = [(4096, 512, 14336), (14336, 512, 4096), (28672, 4096, 8192), (4096, 64, 14336), (14336, 8, 4096)]


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="e4m3", choices=["e4m3", "s8", "both"], help="both: s8, then e4m3")
    parser.add_argument("--fp8-shapes", default="all", choices=["all", "small", "both"],
                        help="all: issue 15's table; small: more rows at n <= 128; both")
    parser.add_argument("--large", action="store_true", help="LARGE_FP8 / LARGE_S8 at LARGE_SHAPES only")
    parser.add_argument("--s8-shapes", default="all", choices=["all", "n8"],
                        help="n8: 14336x8x4096 alone, each step named first (run with CUDA_LAUNCH_BLOCKING=1)")
    args = parser.parse_args()
    if args.large:
        global CANDIDATES, CANDIDATES_S8, SCALED
        CANDIDATES, CANDIDATES_S8, SCALED = LARGE_FP8, LARGE_S8, []
        if args.dtype in ("s8", "both"):
            main_s8(LARGE_SHAPES)
        if args.dtype in ("e4m3", "both"):
            main_fp8(LARGE_SHAPES)
        return
    if args.dtype in ("s8", "both"):
        main_s8([(14336, 8, 4096)] if args.s8_shapes == "n8" else SHAPES + LLM_SHAPES, args.s8_shapes == "n8")
    if args.dtype in ("e4m3", "both"):
        main_fp8({"all": SHAPES, "small": SMALL, "both": SHAPES + SMALL[1:]}[args.fp8_shapes])


def main_fp8(shapes):
    items = [(c, "sm_90a") for c in CANDIDATES + SCALED] + [(CompressorConfig("e4m3"), "sm_90a")]
    print(warmup.compile_all(items, None, 16), flush=True)
    rng = cupy.random.default_rng(0)
    for m, n, k in shapes:
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32))
        wq, w_scale = quantize_e4m3(w, axis=None)
        xq, x_scale = quantize_e4m3(rng.standard_normal((n, k), dtype=cupy.float32), axis=None)   # x.T: [K, N]
        w_scale, x_scale = float(w_scale), float(x_scale)
        values, metadata = sm90_compress.compress(wq, "e4m3", 128)
        sw = SparseMatrix((m, k), dtypes.float8_e4m3, values, metadata, "sm90", 128)
        ref = decode_e4m3(wq, w_scale) @ decode_e4m3(xq, x_scale).T
        flops = 2.0 * m * n * k
        print(f"\n{m}x{n}x{k}", flush=True)
        for name, run in bench_quantized.peers(wq, xq, "e4m3").items():
            ms = reference.kernel_median_ms(run)
            print(f"  {name:24s} {ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s", flush=True)
        problem = Problem.contiguous("sm90", m, n, k, element="e4m3", element_out="bf16", layout_b="col")
        problem = dataclasses.replace(problem, epilogue=Epilogue(alpha=w_scale * x_scale))
        d = cupy.empty((m, n), dtype=cupy.uint16)                                # bf16 bits
        for config in CANDIDATES:
            try:
                plan = plans.make(problem, config)
                d.fill(0)
                plan.launch_direct(sw, xq.data.ptr, d.data.ptr)
                got = (d.astype(cupy.uint32) << 16).view(cupy.float32)   # bf16 bits -> float32
                err = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, xq.data.ptr, d.data.ptr))
                tb = "x".join(map(str, config.threadblock))
                print(f"  ours {tb:11} c{config.cluster[0]}x{config.cluster[1]} {config.schedule[:4]}"
                      f"{'' if config.fast_accum else ' precise'} "
                      f"{ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s  rel err {err:.1e} "
                      f"{'ok' if err < 2e-2 else 'FAIL'}", flush=True)
            except Exception as exc:   # noqa: BLE001 - a first check reports and goes on
                print(f"  ours {config.name}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        scaled_check(w, rng, m, n, k, sw_of(w), d)


def sw_of(w):
    """The weight quantized per row (its scales kept beside it) and compressed."""
    wq, row_scales = quantize_e4m3(w, axis=1)
    values, metadata = sm90_compress.compress(wq, "e4m3", 128)
    return SparseMatrix((w.shape[0], w.shape[1]), dtypes.float8_e4m3, values, metadata, "sm90", 128), wq, row_scales


def scaled_check(w, rng, m, n, k, quantized, d):
    """Per-row weight scales and per-token activation scales applied by the epilogue."""
    sw, wq, row_scales = quantized
    xq, token_scales = quantize_e4m3(rng.standard_normal((n, k), dtype=cupy.float32) * 3, axis=1)
    ref = decode_e4m3(wq, row_scales) @ decode_e4m3(xq, token_scales).T
    rows, cols = cupy.ascontiguousarray(row_scales.ravel()), cupy.ascontiguousarray(token_scales.ravel())
    problem = Problem.contiguous("sm90", m, n, k, element="e4m3", element_out="bf16", layout_b="col")
    problem = dataclasses.replace(problem, epilogue=Epilogue(scales="row_col"))
    for config in SCALED:
        try:
            plan = plans.make(problem, config)
            d.fill(0)
            plan.launch_direct(sw, xq.data.ptr, d.data.ptr, scales=(rows.data.ptr, cols.data.ptr, 0))
            got = (d.astype(cupy.uint32) << 16).view(cupy.float32)
            err = float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref))
            ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, xq.data.ptr, d.data.ptr,
                                                                       scales=(rows.data.ptr, cols.data.ptr, 0)))
            tb = "x".join(map(str, config.threadblock))
            print(f"  ours scaled {tb:11} {ms * 1e3:8.1f} us {2.0 * m * n * k / ms / 1e9:7.0f} TFLOP/s  "
                  f"rel err {err:.1e} {'ok' if err < 2e-2 else 'FAIL'}", flush=True)
        except Exception as exc:   # noqa: BLE001
            print(f"  ours scaled {config.name}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)


def main_s8(shapes, verbose=False):
    items = [(c, "sm_90a") for c in CANDIDATES_S8] + [(CompressorConfig("s8"), "sm_90a")]
    print(warmup.compile_all(items, None, 16), flush=True)
    rng = cupy.random.default_rng(0)
    step = (lambda what: print(f"  step: {what}", flush=True)) if verbose else (lambda what: None)
    for m, n, k in shapes:
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32))
        wq, _ = quantize(w, "s8", axis=1)
        xq, _ = quantize(rng.standard_normal((n, k), dtype=cupy.float32), "s8", axis=1)   # x.T: [K, N]
        step("compress")
        values, metadata = sm90_compress.compress(wq, "s8", 128)
        sw = SparseMatrix((m, k), cupy.dtype(cupy.int8), values, metadata, "sm90", 128)
        step("reference")
        exact = (decode(wq, "s8") @ decode(xq, "s8").T).astype(cupy.int32)   # integer sums far below 2^24
        flops = 2.0 * m * n * k
        print(f"\n{m}x{n}x{k}", flush=True)
        step("peers")
        for name, run in bench_quantized.peers(wq, xq, "s8").items():
            step(name)
            ms = reference.kernel_median_ms(run)
            print(f"  {name:24s} {ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s", flush=True)
        problem = Problem.contiguous("sm90", m, n, k, element="s8", element_out="s32", layout_b="col")
        d = cupy.empty((m, n), dtype=cupy.int32)
        for config in CANDIDATES_S8:
            try:
                step(f"plan {config.name}")
                plan = plans.make(problem, config)
                d.fill(0)
                if not plan.direct:   # the library stages this D (row-major int32 of 8 columns)
                    print(f"  ours {config.name}: staged plan, not timed here", flush=True)
                    continue
                step("launch")
                plan.launch_direct(sw, xq.data.ptr, d.data.ptr)
                cupy.cuda.runtime.deviceSynchronize()
                wrong = int((d != exact).sum())
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, xq.data.ptr, d.data.ptr))
                tb = "x".join(map(str, config.threadblock))
                print(f"  ours {tb:11} c{config.cluster[0]}x{config.cluster[1]} {config.schedule[:4]} "
                      f"{ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s  wrong {wrong} "
                      f"{'ok' if wrong == 0 else 'FAIL'}", flush=True)
            except Exception as exc:   # noqa: BLE001 - a sweep reports and goes on
                print(f"  ours {config.name}: {type(exc).__name__}: {str(exc)[:160]}", flush=True)


if __name__ == "__main__":
    main()
