"""bench --dtypes e4m3,s8: 8-bit 2:4 weights against their dense and cuSPARSELt peers on
the same quantized operands, in one process, kernel-only.

- e4m3: cs.linear_fp8 (bf16 out) against dense fp8 (torch._scaled_mm, bf16 out, also
  with fast accumulation, as ours accumulates) and cuSPARSELt fp8 (bf16 out). Checked
  against the dequantized operands' product: bf16 output, relative 1e-2.
- e5m2: the e4m3 weight with e5m2 activations (cs.linear_fp8(..., x_element="e5m2")),
  against dense fp8 on the same pair (torch._scaled_mm takes e4m3 x e5m2) and cuSPARSELt
  where torch's binding takes the pair (else left out). Checked as e4m3.
- s8: cs.linear_int8 with int32 out (the raw accumulator) against dense int8
  (torch._int_mm, int32 out) and cuSPARSELt int8 (int32 out). Checked exactly: every
  element equals the integer product (computed in float32 from int8 values, exact while
  sums stay under 2^24, which these random operands do by a wide margin).

The weight [m, k] is quantized per row and the activations [n, k] per token. The peers
get unit scales (their time does not depend on the scale values) and x column-major, the
only layout cuSPARSELt takes for 8-bit types.
"""
from __future__ import annotations

TOLERANCE = {"e4m3": 1e-2, "e5m2": 1e-2, "s8": 0.0}   # bf16 output of exact operands; int32 output exact
OUT = {"e4m3": "bf16", "e5m2": "bf16", "s8": "s32"}
# Each benchmarked dtype: (the weight's element, the activations')
ELEMENTS = {"e4m3": ("e4m3", "e4m3"), "e5m2": ("e4m3", "e5m2"), "s8": ("s8", "s8")}


def peers(wq, xq, element: str) -> dict:
    """Kernel-only callables for the dense and cuSPARSELt peers over 8-bit data (CuPy: wq
    [m, k], xq [n, k]; fp8 as uint8 bytes); a peer that torch lacks or that refuses the
    shape is left out."""
    try:
        import torch
    except ImportError:
        return {}
    w_t, x_t = torch.from_dlpack(wq), torch.from_dlpack(xq)
    fp8 = element != "s8"
    if fp8:
        w_t = w_t.view(torch.float8_e4m3fn)
        x_t = x_t.view(torch.float8_e5m2 if element == "e5m2" else torch.float8_e4m3fn)
    x_col = x_t.t()                                                  # [k, n] column-major
    out_dtype = torch.bfloat16 if fp8 else torch.int32
    found = {}
    try:
        if fp8:
            one = torch.ones((), device=w_t.device, dtype=torch.float32)
            torch._scaled_mm(w_t, x_col, scale_a=one, scale_b=one, out_dtype=out_dtype)
            found["dense"] = lambda: torch._scaled_mm(w_t, x_col, scale_a=one, scale_b=one, out_dtype=out_dtype)
            # the dense peer with fast accumulation too (ours accumulates that way: catalog sm90_fp8)
            found["dense_fast"] = lambda: torch._scaled_mm(w_t, x_col, scale_a=one, scale_b=one, out_dtype=out_dtype,
                                                           use_fast_accum=True)
        else:   # [n, k] @ [k, m]: torch._int_mm wants more than 16 rows in its first operand
            w_col = w_t.t()
            torch._int_mm(x_t, w_col)
            found["dense"] = lambda: torch._int_mm(x_t, w_col)
    except RuntimeError:
        pass
    try:
        compressed = torch._cslt_compress(w_t)
        alg = torch._cslt_sparse_mm_search(compressed, x_col, out_dtype=out_dtype)
        alg_id = alg[0] if isinstance(alg, tuple) else alg
        torch._cslt_sparse_mm(compressed, x_col, alg_id=alg_id, out_dtype=out_dtype)
        found["cslt"] = lambda: torch._cslt_sparse_mm(compressed, x_col, alg_id=alg_id, out_dtype=out_dtype)
    except (RuntimeError, TypeError):
        pass
    return found


def bench_one(m: int, n: int, k: int, rng, element: str = "e4m3") -> dict:
    """One row: ours (checked) and the peers, kernel-only, in ms and TFLOP/s (2mnk)."""
    import cupy

    import cutlass_sparse as cs
    from .. import reference
    from ..api import quantized
    from ..formats.quantize import decode, quantize

    w_element, x_element = ELEMENTS[element]
    w = cs.prune_2to4(cupy.asarray(rng.standard_normal((m, k), dtype="float32")))
    sw = quantized.quantize_weight(w, w_element)
    wq, _ = quantize(w, w_element, axis=1)
    xq, x_scales = quantized.quantize_activations(cupy.asarray(rng.standard_normal((n, k), dtype="float32")),
                                                  x_element)
    info: dict = {}
    raw = element == "s8"
    y = quantized.linear_quantized(xq, None if raw else x_scales, sw, out_dtype=OUT[element], info=info,
                                   x_element=x_element)
    if raw:
        expected = decode(xq, element) @ decode(wq, element).T
        err = reference.relative_error(y.astype(cupy.float32), expected)
        ok = bool((y == expected.astype(cupy.int32)).all())
    else:
        expected = decode(xq, x_element, x_scales[:, None]) @ decode(wq, w_element, sw.scales[:, None]).T
        err = reference.relative_error(y, expected)
        ok = err <= TOLERANCE[element]
    row = {"m": m, "n": n, "k": k, "dtype": element, "config": info.get("config", "?"), "split_k": 1,
           "rel_err": err, "ok": ok}
    contestants = {"ours": lambda: quantized.linear_quantized(xq, None if raw else x_scales, sw, out_dtype=OUT[element],
                                                              out=y, x_element=x_element),
                   **peers(wq, xq, element)}
    row.update({f"{name}_ms": ms for name, ms in reference.kernel_medians_ms(contestants).items()})
    row.setdefault("dense_ms", float("nan"))
    for key in ("ours", "dense", "cslt"):
        if f"{key}_ms" in row:
            row[f"{key}_tflops"] = 2.0 * m * n * k / row[f"{key}_ms"] / 1e9
    return row
