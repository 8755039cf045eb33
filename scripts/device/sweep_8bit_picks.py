#!/usr/bin/env python3
"""Issues 13 and 15 (GPU machine): the large sm90 tiles selection could pick, each timed
on the exact problem the bench's call builds (e4m3 / s8: cs.linear_fp8 / cs.linear_int8,
x.T and D column-major, e4m3 bf16 out through the scaled epilogue, s8 the raw int32
accumulator; f16 / bf16: cs.matmul, x and D row-major), with the swizzle rule's value for
its own tile, beside cuSPARSELt on the same operands, in one process, kernel-only. Every
result is checked: against the dequantized (e4m3, relative 1e-2), exact (s8) or dense
(f16 2e-3, bf16 1.2e-2) product.

Run from the repository root: python scripts/device/sweep_8bit_picks.py [dtype ...]
[--round 2]; --compile-only compiles the candidates (CPU machine) and stops."""
import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.cli import bench  # noqa: E402
from cutlass_sparse.describe import catalog, dtypes, selection  # noqa: E402

CO, PP = "cooperative", "pingpong"
# What the bench's rows run, no C: (out, its alignment, scales, layout of x and of D). The
# 8-bit calls write D column-major (the [tokens, features] result in place).
OUT = {"e4m3": ("bf16", 8, "row_col", "col"), "s8": ("s32", 4, "none", "col"),
       "f16": ("f16", 8, "none", "row"), "bf16": ("bf16", 8, "none", "row")}
# (threadblock, cluster, schedule, epilogue subtile: () = CUTLASS's)
CANDIDATES = {
    "e4m3": [((128, 256, 128), (2, 1, 1), CO, ()), ((128, 256, 128), (4, 1, 1), CO, ()),
             ((256, 128, 128), (1, 2, 1), CO, ()), ((128, 128, 256), (1, 2, 1), CO, ()),
             ((128, 128, 256), (1, 2, 1), PP, ())],
    # an int32 D's buffers are twice a bf16 D's: the 128x16 subtile leaves room for a stage
    "s8": [((256, 128, 128), (1, 2, 1), CO, ()), ((128, 256, 128), (2, 1, 1), CO, (128, 16)),
           ((128, 256, 128), (4, 1, 1), CO, (128, 16)), ((256, 128, 128), (1, 2, 1), CO, (128, 16)),
           ((128, 128, 256), (1, 2, 1), CO, ()), ((128, 128, 256), (1, 2, 1), PP, ())],
}
CANDIDATES["f16"] = CANDIDATES["bf16"] = [
    ((128, 256, 64), (2, 1, 1), CO, ()), ((128, 256, 64), (4, 1, 1), CO, ()), ((128, 128, 128), (1, 2, 1), CO, ())]
TOLERANCE = {"e4m3": 1e-2, "f16": 2e-3, "bf16": 1.2e-2}
SHAPES = [(m, n, k) for m, n, k in bench.FP8_SHAPES + bench.LLM_SHAPES if n >= 512]
# `--round 2`: N = 256 rows where selection now takes 4x1 clusters (8-bit), and the 16-bit
# rows of 512 tokens with two of 4096 for contrast
ROUND2 = {"e4m3": [(11008, 256, 4096), (14336, 256, 4096), (28672, 256, 8192)],
          "f16": [(m, n, k) for m, n, k in bench.LLM_SHAPES + [(11008, 512, 4096), (4096, 512, 4096)]
                  if n == 512] + [(14336, 256, 4096), (14336, 4096, 4096), (28672, 4096, 8192)]}
ROUND2["s8"], ROUND2["bf16"] = ROUND2["e4m3"], ROUND2["f16"][:5]
# `--round 3`: the 128x128 tile of the rows with few M tiles (M = 4096, 11008 at 512 tokens)
# in 1x2 clusters (A multicast, today's pick) against 2x1 (B multicast)
ROUND3_SHAPES = [(4096, 512, 4096), (4096, 512, 14336), (11008, 512, 4096), (4096, 256, 4096)]
# `--round 4`: the 128x256 tiles in 2x1 (1x2 for s8's 256x128) against 4x1 clusters at 1024
# and 2048 tokens, above the N the 4x1 tiles are limited to (max_n 512)
ROUND4_SHAPES = [(6144, 1024, 4096), (14336, 1024, 4096), (28672, 1024, 8192), (14336, 2048, 4096),
                 (11008, 1024, 4096), (13824, 1024, 5120)]
ROUND4 = {d: CANDIDATES[d][:2] for d in ("e4m3", "f16", "bf16")}
ROUND4["s8"] = [CANDIDATES["s8"][0], CANDIDATES["s8"][2]]
# `--round 5`: the library's kernel at swizzles 1, 2, 4 and 8 where N has few tiles
ROUND5_SHAPES = {"s8": [(14336, 1024, 4096), (28672, 1024, 8192), (8192, 1024, 8192), (14336, 2048, 4096),
                        (6144, 4096, 4096)],
                 "f16": [(14336, 2048, 4096), (28672, 1024, 8192), (8192, 2048, 8192)]}
ROUND3 = {d: [((128, 128, 256 if d in ("e4m3", "s8") else 128), c, CO, ()) for c in ((1, 2, 1), (2, 1, 1))]
          for d in CANDIDATES}
# `--round 7`: the library's kernel at swizzles 1, 2, 4 and 8 (as round 5) at the large rows
# where it trails cuSPARSELt by 1-3% on cuSPARSELt's own tile
ROUND7_SHAPES = [(16384, 16384, 16384), (8192, 8192, 8192), (11008, 4096, 4096), (8192, 4096, 28672),
                 (28672, 4096, 8192)]
# `--round 8`: f16/bf16 128x256x64 c2x1 with CUTLASS's epilogue subtile (128x32) against
# 128x64 (fewer, larger TMA stores) at ROUND7_SHAPES
ROUND8 = {d: [((128, 256, 64), (2, 1, 1), CO, ()), ((128, 256, 64), (2, 1, 1), CO, (128, 64))]
          for d in ("f16", "bf16")}
# `--round 6`: ROUND4's tiles (2x1 against 4x1 clusters) over more M at 1024 tokens, and at
# 640 and 768 (the same N range, 513..1024, runs one tile): where does 4x1 win, where lose?
ROUND6_SHAPES = [(m, 1024, 4096) for m in (4096, 5120, 8192, 11008, 12288, 13824, 14336, 18432)] + \
    [(28672, 1024, 8192), (14336, 768, 4096), (14336, 640, 4096), (11008, 768, 4096), (8192, 768, 8192)]
# `--round 9` (f16, bf16): the library's pick at each row against the same kernel with one
# wgmma batch kept in flight across k-tiles (SparseGemmConfig.mma_in_flight)
ROUND9_SHAPES = SHAPES + [(4096, 16, 4096), (4096, 16, 14336), (14336, 16, 4096), (4096, 128, 4096),
                          (4096, 64, 14336), (28672, 16, 8192)]
# `--round 10`: the same at decode rows whose picks round 9 did not reach (one wave of 64-row
# tiles alone, N of 17 to 32)
ROUND10_SHAPES = [(8192, 1, 28672), (8192, 8, 28672), (8192, 16, 28672), (4096, 32, 4096), (14336, 32, 4096),
                  (8192, 32, 28672), (4096, 24, 14336)]
# `--round 12`: the library's pick with CUTLASS's TMA epilogue against the same kernel with
# the direct store (registers to global memory, no shared memory; about half the compile
# time), A B A B, at large, 512-token and decode rows
ROUND12_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (28672, 4096, 8192), (4096, 512, 4096),
                  (14336, 512, 4096), (4096, 128, 4096), (4096, 16, 4096)]
# `--round 13`: the same at decode rows (each decode tile the library picks)
ROUND13_SHAPES = [(4096, 16, 4096), (4096, 8, 14336), (14336, 16, 4096), (6144, 1, 4096), (8192, 16, 28672),
                  (28672, 8, 8192), (4096, 64, 14336), (28672, 64, 8192)]
# `--round 14` (e4m3, s8): the library's decode pick (64x16x512) against the same kernel
# 8 wide, as the 16-bit types run N <= 8 since session 26 (x column-major in the 8-bit calls)
ROUND14_SHAPES = [(4096, 8, 14336), (14336, 8, 4096), (6144, 8, 4096), (8192, 8, 28672), (28672, 8, 8192),
                  (4096, 4, 14336), (8192, 4, 28672), (4096, 1, 14336), (6144, 1, 4096), (8192, 1, 28672)]
# `--round 15` (f16, bf16): the library's pick at the bench's n >= 512 rows against a 256x192x64
# tile in the same cluster (two consumer warpgroups of 128x192 each: 9% less shared-memory
# traffic per flop than 128x256x64, the traffic that bounds both us and cuSPARSELt there)
ROUND15_SHAPES = [(8192, 8192, 8192), (16384, 16384, 16384), (4096, 4096, 4096), (11008, 4096, 4096),
                  (4096, 4096, 11008), *((m, n, k) for m, n, k in bench.LLM_SHAPES if n >= 512)]
# `--round 16`: the same rows of 4096 tokens and more (2x1 picks) against the tall tiles ptxas
# does not serialize: 256x192x64 drained, 256x160x64 in flight
ROUND16_SHAPES = [s for s in ROUND15_SHAPES if s[1] >= 4096]
# `--round 17`: 256x192x64 drained, which led only at 16384^3 in round 16 (where both kernels
# run at the power cap), against the pick at more shapes of 2 to 18 TFLOP a call
ROUND17_SHAPES = [(8192, 8192, 16384), (16384, 4096, 16384), (12288, 12288, 12288), (28672, 8192, 8192),
                  (16384, 16384, 8192), (16384, 8192, 16384), (8192, 16384, 16384), (32768, 8192, 8192),
                  (16384, 16384, 16384), (16384, 16384, 32768)]
# `--round 18`: the same where K is long (24576 to 65536), over M and N: round 17 found the
# tall tile 10-13% ahead at 16384x16384x32768 only
ROUND18_SHAPES = [(8192, 8192, 32768), (16384, 8192, 32768), (8192, 16384, 32768), (4096, 4096, 32768),
                  (16384, 4096, 32768), (4096, 16384, 32768), (8192, 8192, 65536), (16384, 16384, 24576),
                  (12288, 12288, 32768)]
# `--round 19`: the same where N starts its range (8192, 16384], which selection gives the tile
# (and round 17-18's winners again, each tile now at its own swizzle from selection.sm90_swizzle)
ROUND19_SHAPES = [(16384, 16384, 24576), (16384, 16384, 32768), (12288, 12288, 32768), (16384, 9216, 32768),
                  (16384, 10240, 24576), (12288, 8448, 24576)]
# `--round 20`: the 8-bit picks rasterized along M against CUTLASS's heuristic (along N
# here), where selection.sm90_raster moves the 16-bit kernels along M
ROUND20_SHAPES = [(8448, 8192, 8192), (8448, 16384, 4096), (11008, 16384, 4096), (3072, 4096, 13824),
                  (3584, 4096, 18944), (5120, 8192, 5120), (18944, 4096, 3584)]
# `--round 21` (f16, bf16): the library's pick with CUTLASS's TMA epilogue against the same
# kernel with our staged store (SparseGemmConfig.staged_store: about 40% less compile time),
# A B A B, at the bench's large and 512-token rows and the tall tile's
ROUND21_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (28672, 4096, 8192), (4096, 4096, 14336),
                  (4096, 512, 4096), (14336, 512, 4096), (6144, 512, 4096), (16384, 16384, 16384)]
# `--round 22` (f16, bf16): the library's pick with CUTLASS's mainloop against the same kernel
# with our own producer and consumers (SparseGemmConfig.lean_mainloop: about a third less
# compile time and memory), A B A B, at round 21's rows and the decode and 128-token rows
ROUND22_SHAPES = ROUND21_SHAPES + [(4096, 16, 4096), (14336, 64, 4096), (4096, 128, 4096), (28672, 16, 8192)]
# Rounds that time the library's pick without and with one field set, A B A B: (field, shapes)
AB_ROUNDS = {9: ("mma_in_flight", ROUND9_SHAPES), 10: ("mma_in_flight", ROUND10_SHAPES),
             12: ("direct_store", ROUND12_SHAPES), 13: ("direct_store", ROUND13_SHAPES),
             14: ("narrow", ROUND14_SHAPES), 15: ("tall", ROUND15_SHAPES), 16: ("taller", ROUND16_SHAPES),
             17: ("tall_drained", ROUND17_SHAPES), 18: ("tall_drained", ROUND18_SHAPES),
             19: ("tall_drained", ROUND19_SHAPES), 20: ("raster", ROUND20_SHAPES),
             21: ("staged_store", ROUND21_SHAPES), 22: ("lean_mainloop", ROUND22_SHAPES)}


def ab_variant(config, field: str, on: bool):
    """An A/B round's kernel: the pick with its field off or on ("narrow": the tile 8 wide;
    "tall": a 256x192x64 tile, in flight, in the pick's cluster)."""
    if field == "narrow":
        tm, _, tk = config.threadblock
        return dataclasses.replace(config, threadblock=(tm, 8, tk)) if on else config
    if field == "tall":
        return dataclasses.replace(config, threadblock=(256, 192, 64), mma_in_flight=True) if on else config
    if field == "raster":   # CUTLASS's heuristic, then along M
        return dataclasses.replace(config, raster=selection.ALONG_M if on else 0)
    return dataclasses.replace(config, **{field: on})


def ab_kernels(config, field: str) -> list:
    """The kernels an A/B round times at one shape: the pick without and with the field, or
    for the tall-tile rounds the pick first, then its rivals ("taller": 256x192x64 drained and
    256x160x64; "tall_drained": 256x192x64 drained, or where selection takes that tile, the
    128x256x64 tile it took before)."""
    def tile(threadblock, in_flight):
        return dataclasses.replace(config, threadblock=threadblock, mma_in_flight=in_flight)

    if field == "taller":
        return [config, tile((256, 192, 64), False), tile((256, 160, 64), True)]
    if field == "tall_drained":
        return [config, tile((128, 256, 64), True) if config.threadblock == (256, 192, 64) else tile((256, 192, 64), False)]
    return [ab_variant(config, field, on) for on in (False, True)]


def library_pick(dtype, m, n, k):
    """The GEMM the bench's call plans for this row (cs.matmul for 16-bit types, x and D
    row-major; cs.linear_fp8 / linear_int8 for 8-bit ones, D column-major), found without
    a GPU or a compile (kernels.first_asked)."""
    from cutlass_sparse.build import kernels
    from cutlass_sparse.describe.problem import Epilogue, Problem
    from cutlass_sparse.plan import plans

    out, _, scales, layout = OUT[dtype]
    problem = Problem.contiguous("sm90", m, n, k, element=dtype, element_out=out, layout_b=layout,
                                 out_layout=layout, sm_count=132)
    if dtype in dtypes.EIGHT_BIT_NAMES:
        problem = dataclasses.replace(problem, epilogue=Epilogue(scales=scales))
    return kernels.first_asked(lambda: plans.make(problem))[0]


def configs(dtype, round_=1):
    if round_ in AB_ROUNDS:   # each pick without and with the field (the catalog may set either)
        field, shapes = AB_ROUNDS[round_]
        return list(dict.fromkeys(c.as_compiled() for s in shapes for c in ab_kernels(library_pick(dtype, *s), field)))
    family = catalog.load(catalog.for_element("sm90", dtype))
    out, alignment_c, scales, layout = OUT[dtype]
    base = family.config(family.tiles[0], dtype, out, layout, alignment_c if layout == "row" else 16, alignment_c,
                         reads_c=False)
    base = dataclasses.replace(base, layout_c=layout, scales=scales)
    return [dataclasses.replace(base, threadblock=tb, cluster=cluster, schedule=schedule, epilogue_tile=epi,
                                mma_in_flight=False)   # rounds 1-8 measured drained kernels
            for tb, cluster, schedule, epi in {3: ROUND3, 4: ROUND4, 6: ROUND4, 8: ROUND8}.get(round_, CANDIDATES)[dtype]]


def label(config):
    epi = "x".join(map(str, config.epilogue_tile)) or "auto"
    return (f"{'x'.join(map(str, config.threadblock)):11} c{config.cluster[0]}x{config.cluster[1]} "
            f"{config.schedule[:4]} {'flight' if config.mma_in_flight else 'drain '} "
            f"epi {'direct' if config.stores_directly else 'staged' if config.stores_staged else epi:6} "
            f"swz{config.swizzle} r{config.raster}")


def sweep(dtype, shapes, rng, round_=1):
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference
    from cutlass_sparse.api import quantized
    from cutlass_sparse.cli import bench_quantized
    from cutlass_sparse.formats.quantize import decode, quantize
    from cutlass_sparse.plan import plans

    seen = {}
    library_get = plans.get

    def spy(problem, config=None):   # the problem linear_quantized builds, kept for the candidates
        seen["problem"] = problem
        return library_get(problem, config)

    plans.get = spy
    raw, sixteen = dtype == "s8", dtype in ("f16", "bf16")
    ratios = {}
    for m, n, k in shapes:
        w = cs.prune_2to4(cupy.asarray(rng.standard_normal((m, k), dtype="float32")))
        info = {}
        if sixteen:   # cs.matmul(sw, x): x [k, n] and D row-major
            w = dtypes.from_float32(w, dtypes.numpy_dtype(dtype))
            xq = dtypes.from_float32(cupy.asarray(rng.standard_normal((k, n), dtype="float32")),
                                     dtypes.numpy_dtype(dtype))
            sw = cs.compress(w, layout="sm90")
            y = cs.matmul(sw, xq, info=info)
            expected, scales = reference.to_float32(w) @ reference.to_float32(xq), (0, 0, 0)
            cslt = bench.cusparselt(w, xq)
            peer = {"dense": lambda: cupy.matmul(w, xq), **({"cslt": cslt[0]} if cslt else {})}
        else:
            sw = quantized.quantize_weight(w, dtype)
            wq, _ = quantize(w, dtype, axis=1)
            xq, x_scales = quantized.quantize_activations(
                cupy.asarray(rng.standard_normal((n, k), dtype="float32")), dtype)
            y = quantized.linear_quantized(xq, None if raw else x_scales, sw, out_dtype=OUT[dtype][0], info=info)
            if raw:
                expected = (decode(xq, dtype) @ decode(wq, dtype).T).astype(cupy.int32)
            else:
                expected = decode(xq, dtype, x_scales[:, None]) @ decode(wq, dtype, sw.scales[:, None]).T
            scales = (0, 0, 0) if raw else (sw.scales.data.ptr, x_scales.data.ptr, 0)
            peer = bench_quantized.peers(wq, xq, dtype)
        problem = seen["problem"]
        flops = 2.0 * m * n * k
        print(f"\n{dtype} {m}x{n}x{k} (library: {info['config'].split('spgemm_')[1][:40]})", flush=True)
        tflops = {}
        for name in ("dense", "cslt"):
            if name in peer:
                tflops[name] = flops / reference.kernel_median_ms(peer[name]) / 1e9
                print(f"  {name:40s} {tflops[name]:7.0f} TFLOP/s", flush=True)
        if round_ in (5, 7):   # the library's own kernel at each swizzle
            chosen = plans.get(problem).config
            swept = [dataclasses.replace(chosen, swizzle=z) for z in (1, 2, 4, 8)]
        elif round_ in AB_ROUNDS:   # the library's own kernel without, then with the field
            chosen, field = plans.get(problem).config, AB_ROUNDS[round_][0]
            default = catalog.load(catalog.for_element("sm90", dtype)).swizzle
            swept = [c if c.threadblock == chosen.threadblock or round_ < 19 else   # another tile: its own swizzle
                     dataclasses.replace(c, swizzle=selection.sm90_swizzle(c.threadblock, m, n, problem.sm_count,
                                                                           default, c.cluster))
                     for c in ab_kernels(chosen, field)]
            if round_ >= 19 and chosen.swizzle != 8:   # and the pick at the swizzle rounds 17-18 ran it with
                swept.append(dataclasses.replace(chosen, swizzle=8))
            swept *= 2   # A B A B
        else:             # each candidate at the swizzle the rule gives its tile
            default = catalog.load(catalog.for_element("sm90", dtype)).swizzle
            swept = [dataclasses.replace(c, swizzle=selection.sm90_swizzle(c.threadblock, m, n, problem.sm_count,
                                                                           default, c.cluster))
                     for c in configs(dtype, round_)]
        for config in swept:
            try:
                plan = plans.make(problem, config)
                y.fill(0)
                plan.launch_direct(sw, xq.data.ptr, y.data.ptr, scales=scales)
                if raw:
                    wrong = int((y != expected).sum())
                    ok, what = wrong == 0, f"wrong {wrong}"
                else:
                    err = reference.relative_error(y, expected)
                    ok, what = err <= TOLERANCE[dtype], f"rel err {err:.1e}"
                ms = reference.kernel_median_ms(lambda: plan.launch_direct(sw, xq.data.ptr, y.data.ptr, scales=scales))
                ours = flops / ms / 1e9
                vs = "  ".join(f"/{p} {ours / t:.3f}" for p, t in tflops.items())
                print(f"  ours {label(config)} {plan.compiled.shared_bytes // 1024:3d} KB {ours:7.0f} TFLOP/s "
                      f"{vs}  {what} {'ok' if ok else 'FAIL'}", flush=True)
                if ok and "cslt" in tflops:
                    ratios.setdefault(label(config)[:28], []).append(ours / tflops["cslt"])
            except Exception as exc:   # noqa: BLE001 - a sweep reports and goes on
                print(f"  ours {label(config)}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    print(f"\n{dtype}: geomean ours/cuSPARSELt per candidate over the rows it ran")
    for name, values in ratios.items():
        print(f"  {name} {float(np.exp(np.mean(np.log(values)))):.3f} ({len(values)} rows)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dtypes", nargs="*", default=["s8", "e4m3"])
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--round", type=int, default=1, choices=[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22],
                        help="1: the n >= 512 rows of the bench; 2: ROUND2's rows; 3: ROUND3's tiles at ROUND3_SHAPES; "
                             "4: ROUND4's at ROUND4_SHAPES; 5: swizzles at ROUND5_SHAPES; 6: ROUND4's at ROUND6_SHAPES; "
                             "7: swizzles at ROUND7_SHAPES; 8: ROUND8's epilogue subtiles at ROUND7_SHAPES; "
                             "9, 10: the library's pick, drained and in flight, at ROUND9_SHAPES, ROUND10_SHAPES; "
                             "12, 13: the library's pick with the TMA epilogue and the direct store at ROUND12_SHAPES, "
                             "ROUND13_SHAPES; 14: the 8-bit decode pick and the same 8 wide at ROUND14_SHAPES; "
                             "15: the 16-bit pick and a 256x192x64 tile at ROUND15_SHAPES; 16: the 16-bit pick, "
                             "256x192x64 drained and 256x160x64 at ROUND16_SHAPES; 17: the 16-bit pick and "
                             "256x192x64 drained at ROUND17_SHAPES; 18, 19: the same at ROUND18_SHAPES, ROUND19_SHAPES; "
                             "20: the pick along N and along M at ROUND20_SHAPES; 21: the 16-bit pick with the TMA "
                             "epilogue and the staged store at ROUND21_SHAPES; 22: the 16-bit pick with CUTLASS's "
                             "mainloop and our own at ROUND22_SHAPES")
    args = parser.parse_args()
    if args.compile_only:
        items = [(c, "sm_90a") for d in args.dtypes for c in configs(d, args.round)]
        for name, _, status, seconds in warmup.compile_all(items, None, args.jobs):
            print(f"{status[:200]:12} {seconds:6.1f} s {name}", flush=True)
        return
    import cupy

    rng = cupy.random.default_rng(0)
    for dtype in args.dtypes:
        shapes = {1: SHAPES, 3: ROUND3_SHAPES, 4: ROUND4_SHAPES, 5: ROUND5_SHAPES.get(dtype, []),
                  6: ROUND6_SHAPES, 7: ROUND7_SHAPES, 8: ROUND7_SHAPES,
                  **{r: shapes for r, (_, shapes) in AB_ROUNDS.items()}}.get(args.round)
        sweep(dtype, ROUND2[dtype] if shapes is None else shapes, rng, args.round)


if __name__ == "__main__":
    main()
