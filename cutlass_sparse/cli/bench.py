"""bench: cutlass-sparse against dense cuBLAS and cuSPARSELt on the same operands, in one process (GPU).

Every peer is timed kernel-only the same way (a spin kernel keeps the GPU busy while 20
calls are enqueued, two events time them back to back, median of 15), the peers taking
turns (reference.kernel_medians_ms). Our result is
checked against the dense one in the same run; a shape that fails the check is
reported as FAIL and left out of the means. cuSPARSELt runs through torch
(_cslt_sparse_mm with the algorithm _cslt_sparse_mm_search picks, plan made once)
when torch is importable; otherwise its columns are empty. Writes --json and --png.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import re
from pathlib import Path

import numpy as np

from ..describe import dtypes
from . import args as types
from . import bench_ncu, bench_quantized

log = logging.getLogger("cutlass_sparse")

# The peers' table in ../shared/FACTS.md: (m, n, k).
DEFAULT_SHAPES = [(8192, 8192, 8192), (16384, 16384, 16384), (4096, 4096, 4096), (11008, 4096, 4096),
                  (4096, 4096, 11008), (4096, 512, 4096), (11008, 512, 4096), (4096, 128, 4096),
                  (4096, 16, 4096)]
# Llama-class projections (M = output features, K = input features) at decode to prefill token counts.
LLM_SHAPES = [(m, n, k) for m, k in ((4096, 14336), (14336, 4096), (6144, 4096), (8192, 28672), (28672, 8192))
              for n in (1, 8, 16, 64, 512, 4096)]
TOLERANCE = {"f16": 2e-3, "bf16": 1.2e-2, **bench_quantized.TOLERANCE}
QUANTIZED = tuple(bench_quantized.TOLERANCE)
# 8-bit shapes of issue 15's table (m, n, k)
FP8_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (4096, 512, 4096), (4096, 128, 4096),
              (4096, 32, 4096), (14336, 16, 4096)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dtypes", default=["f16", "bf16"], type=types.choice_list(tuple(TOLERANCE)),
                   help="comma-separated: f16, bf16, e4m3 (fp8 weights and activations, bf16 out, against "
                        "dense fp8 and cuSPARSELt fp8), e5m2 (e4m3 weights, e5m2 activations, against dense "
                        "fp8 on the same pair), s8 (int8, int32 out, against torch._int_mm and "
                        "cuSPARSELt int8); default f16,bf16")
    p.add_argument("--shapes", default=None, type=types.shape_list, help="comma-separated MxNxK")
    p.add_argument("--llm", action="store_true", help="also the Llama-class projection shapes (LLM_SHAPES)")
    p.add_argument("--family", default=None, choices=["sm80", "sm90"])
    p.add_argument("--json", default="bench.json", help="results as JSON (default bench.json)")
    p.add_argument("--png", default="bench.png", help="bar chart (default bench.png; needs matplotlib)")
    p.add_argument("--ncu", action="store_true",
                   help="after the timings, Nsight Compute's DRAM and SM throughput of the kernel each 16-bit row "
                        "with n <= 128 (and 8192^3) ran, in a process of its own (needs ncu on PATH)")
    p.add_argument("--tune", action="store_true",
                   help="profile each shape first (cs.tune) and benchmark the recorded winner")


def cusparselt(w, x):
    """A callable computing w @ x with cuSPARSELt through torch, plan and algorithm chosen
    once; None where torch is missing or cuSPARSELt refuses the shape."""
    try:
        import torch
    except ImportError:
        return None
    w_t, x_t = torch.from_dlpack(w), torch.from_dlpack(x)
    try:
        compressed = torch._cslt_compress(w_t)
        alg = torch._cslt_sparse_mm_search(compressed, x_t)
        alg_id = alg[0] if isinstance(alg, tuple) else alg
        out = torch._cslt_sparse_mm(compressed, x_t, alg_id=alg_id)
    except RuntimeError as exc:   # e.g. N = 1 with a row-major x: cuSPARSELt refuses it
        log.info("cuSPARSELt cannot run this shape: %s", str(exc).splitlines()[0][:120])
        return None

    def run():
        torch._cslt_sparse_mm(compressed, x_t, alg_id=alg_id)
    return run, out


def bench_one(m, n, k, dtype, family, rng, tune=False):
    import cupy

    import cutlass_sparse as cs
    from .. import reference

    np_dtype = dtypes.numpy_dtype(dtype)
    w = cs.prune_2to4(dtypes.from_float32(cupy.asarray(rng.standard_normal((m, k), dtype=np.float32)), np_dtype))
    x = dtypes.from_float32(cupy.asarray(rng.standard_normal((k, n), dtype=np.float32)), np_dtype)
    sw = cs.compress(w, layout=family)
    if tune:   # profile once (checked candidates); the calls below then run the recorded winner
        cs.tune(sw, x)
    y = cs.matmul(sw, x)
    info = {}
    cs.matmul(sw, x, out=y, info=info)
    y_dense = cupy.matmul(w, x)
    err = reference.relative_error(y, reference.to_float32(y_dense))
    flops = 2.0 * m * n * k
    row = {"m": m, "n": n, "k": k, "dtype": dtype, "config": info["config"], "split_k": info.get("split_k", 1),
           "rel_err": err, "ok": err <= TOLERANCE[dtype]}
    contestants = {"ours": lambda: cs.matmul(sw, x, out=y), "dense": lambda: cupy.matmul(w, x, out=y_dense)}
    peer = cusparselt(w, x)
    if peer is not None:
        contestants["cslt"], out = peer
        row["cslt_err"] = reference.relative_error(cupy.from_dlpack(out), reference.to_float32(y_dense))
    row.update({f"{name}_ms": ms for name, ms in reference.kernel_medians_ms(contestants).items()})
    for key in ("ours", "dense", "cslt"):
        if f"{key}_ms" in row:
            row[f"{key}_tflops"] = flops / row[f"{key}_ms"] / 1e9
    return row


def kernel_label(name: str) -> str:
    """A kernel's tile, cluster and schedule from its procedural name: '128x256x64 c2x1 coop'
    (' sk': the stream-K scheduler; ' fl': wgmma kept in flight, SparseGemmConfig.mma_in_flight;
    ' ds': D stored from registers, SparseGemmConfig.direct_store)."""
    found = re.search(r"_(\d+x\d+x\d+)_(\d+)x(\d+)x1_.*?(cooperative|pingpong|swz\d)", name)
    if not found:
        return name[-24:]
    tile, cm, cn, schedule = found.groups()
    return (f"{tile} c{cm}x{cn} {schedule[:4]}" + (" sk" if "_streamk" in name else "")
            + (" fl" if "_inflight" in name else "") + (" ds" if "_epi_nosmem" in name else ""))


def geomean(values):
    values = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(args) -> int:
    from .. import reference

    if not reference.gpu_available():
        raise RuntimeError("bench times kernels on a GPU; none is visible")
    shapes = (args.shapes or DEFAULT_SHAPES) + (LLM_SHAPES if args.llm else [])
    rng = np.random.default_rng(0)
    rows = []
    header = (f"{'dtype':5} {'m':>6} {'n':>6} {'k':>6}  {'ours':>7} {'dense':>7} {'cuSPLt':>7}  "
              f"{'ours/dense':>10} {'ours/cSLt':>9}  {'kernel':24} check")
    print(header)
    for dtype in args.dtypes:
        for m, n, k in (shapes if dtype not in QUANTIZED or args.shapes else FP8_SHAPES + (LLM_SHAPES if args.llm else [])):
            row = bench_quantized.bench_one(m, n, k, rng, dtype) if dtype in QUANTIZED else \
                bench_one(m, n, k, dtype, args.family, rng, args.tune)
            rows.append(row)
            row["vs_dense"] = row["dense_ms"] / row["ours_ms"]
            row["vs_cslt"] = row["cslt_ms"] / row["ours_ms"] if "cslt_ms" in row else None
            print(f"{dtype:5} {m:6} {n:6} {k:6}  {row['ours_tflops']:7.1f} {row['dense_tflops']:7.1f} "
                  f"{row.get('cslt_tflops', float('nan')):7.1f}  {row['vs_dense']:10.3f} "
                  f"{row['vs_cslt'] or float('nan'):9.3f}  {kernel_label(row['config']):24} {'ok' if row['ok'] else 'FAIL'} "
                  f"({row['rel_err']:.1e}){_fast_accum_note(row)}", flush=True)
    good = [r for r in rows if r["ok"]]
    for dtype in args.dtypes:   # per type: each has its own peers and targets
        for label, pick in (("n >= 512", lambda r: r["n"] >= 512), ("n <= 128", lambda r: r["n"] <= 128)):
            sel = [r for r in good if pick(r) and r["dtype"] == dtype]
            fast = [r["vs_dense_fast"] for r in sel if "vs_dense_fast" in r]
            print(f"geomean {dtype} {label}: ours/dense {geomean([r['vs_dense'] for r in sel]):.3f}, "
                  f"ours/cuSPARSELt {geomean([r['vs_cslt'] for r in sel]):.3f}  ({len(sel)} shapes)"
                  + (f"; ours/dense fast-accum {geomean(fast):.3f}" if fast else ""))
    print("TFLOP/s counted as 2*m*n*k (dense-equivalent); kernel-only timing as described in the docstring")
    if args.ncu:
        bench_ncu.report(rows, kernel_label)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    try:
        _plot(rows, args.png)
    except ImportError:
        log.warning("matplotlib not installed: no plot")
    return 0 if all(r["ok"] for r in rows) else 1


def _fast_accum_note(row) -> str:
    """fp8 rows: dense fp8 with fast accumulation as well (ours accumulates that way)."""
    if "dense_fast_ms" not in row:
        return ""
    row["vs_dense_fast"] = row["dense_fast_ms"] / row["ours_ms"]
    return f"  dense fast-accum {2.0 * row['m'] * row['n'] * row['k'] / row['dense_fast_ms'] / 1e9:.0f} " \
           f"TFLOP/s, ours/that {row['vs_dense_fast']:.3f}"


def _plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['dtype']} {r['m']}x{r['n']}x{r['k']}" for r in rows]
    xs = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.6), 4.5))
    for i, (key, name) in enumerate((("ours", "cutlass-sparse"), ("dense", "dense cuBLAS"), ("cslt", "cuSPARSELt"))):
        ax.bar(xs + (i - 1) * 0.27, [r.get(f"{key}_tflops", 0) for r in rows], 0.27, label=name)
    ax.set_xticks(xs, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("TFLOP/s (2mnk)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
