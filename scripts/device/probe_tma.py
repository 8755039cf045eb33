#!/usr/bin/env python3
"""Which fields of CuTe's TMA recipes change with the problem shape (GPU machine): for a
few sm90 kernels and many (M, N, K), the static part of each descriptor slot (rank, box,
element strides, type, swizzle) and the encoded template with address, sizes and strides
masked out. One template per kernel is only right if these never change."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import dataclasses

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from cutlass_sparse.build import kernels  # noqa: E402
from cutlass_sparse.describe import catalog  # noqa: E402
from cutlass_sparse.describe.problem import Problem  # noqa: E402
from cutlass_sparse.emit.sm90 import INFO_FIELDS  # noqa: E402
from cutlass_sparse.launch import tma  # noqa: E402
from cutlass_sparse.launch.sm90 import Sm90Plan  # noqa: E402


def recipes(plan, ptr):
    params = cupy.empty(plan.compiled.constants["params_bytes"], dtype=cupy.uint8)
    info = cupy.zeros(len(INFO_FIELDS), dtype=cupy.int64)
    out = cupy.zeros(16 * 128, dtype=cupy.uint8)
    block = plan._setup_arguments((ptr,) * 5, params.data.ptr, 0, out.data.ptr, info.data.ptr)
    plan.loaded.launch(0, (1, 1, 1), (block,), symbol=f"{plan.compiled.symbol}_setup", threads=1, shared_bytes=0)
    slots = int(info.get()[INFO_FIELDS.index("tma_slots")])
    parsed = np.frombuffer(out.get().tobytes(), dtype=tma.RECIPE, count=slots)
    return [(int(r["rank"]), tuple(r["box"]), tuple(r["elem"]), int(r["dtype"]), int(r["swizzle_bits"]),
             tuple(r["dims"]), tuple(int(s) for s in r["strides"])) for r in parsed]


def main():
    fam = catalog.load("sm90")
    scratch = cupy.empty(1 << 20, dtype=cupy.uint8)
    ptr = scratch.data.ptr
    shapes = [(m, n, k) for m in (64, 200, 4096) for n in (1, 8, 9, 16, 64, 512) for k in (64, 256, 4096)]
    for tile in fam.tiles[:8]:
        for layout_b, layout_c in (("row", "row"), ("col", "col")):
            try:
                config = fam.config(tile, "f16", "f16", layout_b, 8, 8)
            except ValueError:
                continue
            config = dataclasses.replace(config, layout_c=layout_c)
            if not kernels.cached(config, "sm_90a"):
                continue
            seen = {}
            for m, n, k in shapes:
                n_k = n if layout_b == layout_c == "col" else -(-n // 8) * 8
                problem = Problem.contiguous("sm90", m, n_k, k, layout_b=layout_b,
                                             out_layout=layout_c if layout_c == "col" else None)
                try:
                    plan = Sm90Plan(problem, config)
                except Exception as exc:   # not compiled here
                    print(f"skip {config.name}: {type(exc).__name__}")
                    break
                found = recipes(plan, ptr)
                static = tuple(r[:5] for r in found)
                seen.setdefault(static, []).append((m, n_k, k))
            if seen:
                print(f"{config.name}: {len(seen)} distinct static recipe sets")
                if len(seen) > 1:
                    for static, where in seen.items():
                        print(f"   {static}\n      at {where[:6]}{' ...' if len(where) > 6 else ''}")


if __name__ == "__main__":
    main()
