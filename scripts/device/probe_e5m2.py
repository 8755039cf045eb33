"""e5m2 activations beside an e4m3 weight (GPU machine): cs.linear_fp8's kernel-only time
with e5m2 x against e4m3 x on the same weight, in one process, each result checked
against the dequantized operands' product.

    python scripts/device/probe_e5m2.py
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = ((4096, 7, 4096), (512, 256, 1024), (4096, 512, 4096))   # (features, tokens, K)


def main():
    import cupy

    import cutlass_sparse as cs
    from cutlass_sparse import reference
    from cutlass_sparse.formats.quantize import decode, quantize_e4m3

    print("features x tokens x K   e4m3 x us   e5m2 x us   e5m2/e4m3   rel err (e4m3, e5m2)   e5m2 kernel")
    for m, n, k in SHAPES:
        rng = cupy.random.default_rng(m + n)
        w = cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))
        sw = cs.quantize_fp8(w)
        w_bytes, _ = quantize_e4m3(reference.to_float32(w), axis=1)
        w_deq = decode(w_bytes, "e4m3", sw.scales[:, None])
        x = rng.standard_normal((n, k), dtype=cupy.float32).astype(cupy.float16)
        row, errs, info = [], [], {}
        for element in ("e4m3", "e5m2"):
            xq, scales = cs.quantize_activations_fp8(x, element)
            y = cs.linear_fp8(xq, scales, sw, x_element=element, info=info)
            errs.append(reference.relative_error(y, decode(xq, element, scales[:, None]) @ w_deq.T))
            row.append(reference.kernel_median_ms(lambda: cs.linear_fp8(xq, scales, sw, x_element=element)) * 1e3)
        ok = all(e <= 1e-2 for e in errs)
        print(f"{m:5d} x {n:4d} x {k:5d}      {row[0]:8.2f}    {row[1]:8.2f}    {row[1] / row[0]:8.3f}    "
              f"{errs[0]:.1e}, {errs[1]:.1e} {'ok' if ok else 'WRONG'}   {info['config']}")


if __name__ == "__main__":
    main()
