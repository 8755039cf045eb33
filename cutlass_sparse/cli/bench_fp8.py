"""bench --dtypes e4m3: fp8 2:4 (cs.linear_fp8, bf16 out) against dense fp8
(torch._scaled_mm) and cuSPARSELt fp8 on the same quantized operands, in one process.

The weight [m, k] is quantized per row and the activations [n, k] per token; ours is
checked against the dequantized operands' product (bf16 output: relative 1e-2). The
peers get unit scales (their time does not depend on the scale values) and x
column-major, the only layout cuSPARSELt takes for 8-bit types.
"""
from __future__ import annotations

TOLERANCE = 1e-2   # bf16 output of exact (dequantized) operands, float32 accumulation


def peers(wq, xq) -> dict:
    """Kernel-only callables for dense fp8 and cuSPARSELt fp8 over e4m3 bytes (CuPy uint8:
    wq [m, k], xq [n, k]); a peer that torch lacks or that refuses the shape is left out."""
    try:
        import torch
    except ImportError:
        return {}
    w_t = torch.from_dlpack(wq).view(torch.float8_e4m3fn)          # [m, k] row-major
    x_t = torch.from_dlpack(xq).view(torch.float8_e4m3fn).t()      # [k, n] column-major
    one = torch.ones((), device=w_t.device, dtype=torch.float32)
    found = {}
    try:
        torch._scaled_mm(w_t, x_t, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        found["dense"] = lambda: torch._scaled_mm(w_t, x_t, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        # the dense peer with fast accumulation too (ours accumulates that way: catalog sm90_fp8)
        found["dense_fast"] = lambda: torch._scaled_mm(w_t, x_t, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                                       use_fast_accum=True)
    except RuntimeError:
        pass
    try:
        compressed = torch._cslt_compress(w_t)
        alg = torch._cslt_sparse_mm_search(compressed, x_t, out_dtype=torch.bfloat16)
        alg_id = alg[0] if isinstance(alg, tuple) else alg
        torch._cslt_sparse_mm(compressed, x_t, alg_id=alg_id, out_dtype=torch.bfloat16)
        found["cslt"] = lambda: torch._cslt_sparse_mm(compressed, x_t, alg_id=alg_id, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError):
        pass
    return found


def bench_one(m: int, n: int, k: int, rng) -> dict:
    """One row: ours (checked) and the peers, kernel-only, in ms and TFLOP/s (2mnk)."""
    import cupy

    import cutlass_sparse as cs
    from .. import reference
    from ..formats.quantize import decode_e4m3, quantize_e4m3

    w = cs.prune_2to4(cupy.asarray(rng.standard_normal((m, k), dtype="float32")))
    sw = cs.quantize_fp8(w)
    w_bytes, _ = quantize_e4m3(w, axis=1)
    xq, x_scales = cs.quantize_activations_fp8(cupy.asarray(rng.standard_normal((n, k), dtype="float32")))
    info: dict = {}
    y = cs.linear_fp8(xq, x_scales, sw, info=info)
    expected = decode_e4m3(xq, x_scales[:, None]) @ decode_e4m3(w_bytes, sw.scales[:, None]).T
    err = reference.relative_error(y, expected)
    row = {"m": m, "n": n, "k": k, "dtype": "e4m3", "config": info.get("config", "?"), "split_k": 1,
           "rel_err": err, "ok": err <= TOLERANCE}
    row["ours_ms"] = reference.kernel_median_ms(lambda: cs.linear_fp8(xq, x_scales, sw, out=y))
    for name, run in peers(w_bytes, xq).items():
        row[f"{name}_ms"] = reference.kernel_median_ms(run)
    row.setdefault("dense_ms", float("nan"))
    for key in ("ours", "dense", "cslt"):
        if f"{key}_ms" in row:
            row[f"{key}_tflops"] = 2.0 * m * n * k / row[f"{key}_ms"] / 1e9
    return row
