"""What an sm90 kernel's first setup reports, recipe by recipe: CUTLASS's info (grid,
can_implement, TMA slots), where the recipe magic sits in Params, and each recipe's rank
and sizes. For the int8 raw (int32 out) calls, first in a fresh process, then after a
scaled int8 call, then again with the per-shape caches cleared.

    python scripts/device/probe_setup_recipes.py
"""
from __future__ import annotations

import cupy
import numpy as np

import cutlass_sparse as cs
from cutlass_sparse.emit.sm90 import INFO_FIELDS
from cutlass_sparse.launch import sm90_prepare, tma
from cutlass_sparse.plan import plans

_original = sm90_prepare.on_device


def inspected(plan, pointers):
    params = cupy.zeros(plan.compiled.constants["params_bytes"], dtype=cupy.uint8)
    info_out = cupy.zeros(len(INFO_FIELDS), dtype=cupy.int64)
    recipes = cupy.zeros(16 * 128, dtype=cupy.uint8)
    block = plan._setup_arguments(pointers, params.data.ptr, 0, recipes.data.ptr, info_out.data.ptr)
    plan.loaded.launch(plan.problem.device_id, (1, 1, 1), (block,), symbol=f"{plan.compiled.symbol}_setup",
                       threads=1, shared_bytes=0)
    info = dict(zip(INFO_FIELDS, (int(v) for v in info_out.get())))
    words = np.frombuffer(params.get().tobytes(), dtype=np.uint64)
    magic_at = [8 * i for i, w in enumerate(words) if int(w) == tma.MAGIC]
    found = np.frombuffer(recipes.get().tobytes(), dtype=tma.RECIPE)[:max(info["tma_slots"], 0)]
    k = plan.kernel_problem
    print(f"  {plan.compiled.symbol[-64:]} {k.m}x{k.n}x{k.k} ldb {k.x.ld} ldd {plan.ldd} block {len(bytes(block.tobytes()))} B")
    print(f"    info {info}; params {len(words) * 8} B, magic at {magic_at}")
    for i, r in enumerate(found):
        rank = int(r["rank"])
        print(f"    slot {i}: rank {rank} dims {list(r['dims'][:rank])} box {list(r['box'][:rank])} "
              f"dtype {int(r['dtype'])} address {int(r['address']):#x}")
    return _original(plan, pointers)


def raw_int8(m, n, k, seed=0):
    rng = cupy.random.default_rng(seed)
    w = cs.prune_2to4((rng.standard_normal((m, k), dtype=cupy.float32) * 0.05).astype(cupy.float16))
    sw = cs.quantize_int8(w)
    xq, x_scales = cs.quantize_activations_int8(rng.standard_normal((n, k), dtype=cupy.float32))
    return sw, xq, x_scales


def attempt(label, fn):
    print(label, flush=True)
    try:
        fn()
        cupy.cuda.Device().synchronize()
        print("  ok", flush=True)
    except Exception as exc:   # what failed, and go on to the next case
        print(f"  FAILED: {type(exc).__name__}: {str(exc)[:300]}", flush=True)


def main() -> None:
    sm90_prepare.on_device = inspected
    sw, xq, xs = raw_int8(512, 256, 1024)
    attempt("raw int32, fresh process", lambda: cs.linear_int8(xq, None, sw, out_dtype="s32"))
    sw2, xq2, xs2 = raw_int8(250, 7, 256)
    attempt("raw int32 250x7x256", lambda: cs.linear_int8(xq2, None, sw2, out_dtype="s32"))
    attempt("scaled bf16", lambda: cs.linear_int8(xq, xs, sw))
    sm90_prepare._prepared.clear()
    sm90_prepare._templates.clear()
    plans.clear()
    attempt("raw int32 again, caches cleared", lambda: cs.linear_int8(xq, None, sw, out_dtype="s32"))
    w = cs.prune_2to4(cupy.random.default_rng(1).standard_normal((512, 1024), dtype=cupy.float32).astype(cupy.float16))
    x = cupy.random.default_rng(2).standard_normal((256, 1024), dtype=cupy.float32).astype(cupy.float16)
    attempt("f16 linear", lambda: cs.linear(x, cs.compress(w)))


if __name__ == "__main__":
    main()
