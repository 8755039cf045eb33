"""Sweep sm90 tile/cluster/schedule candidates over a few shapes on the GPU (kernel-only
timing, every result verified); prints the six fastest per shape. Used to choose
operations/sm90.toml (output: docs/tune90_h100.log). Run from the repository root."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.describe.description import SparseGemmConfig  # noqa: E402


def cand(tb, cluster, schedule):
    return SparseGemmConfig(family="sm90", element="f16", element_out="f16", layout_b="row", threadblock=tb,
                            warps=(4, 1, 1), stages=0, instruction=(64, 128, 32), alignment_a=8, alignment_b=8,
                            alignment_c=8, swizzle=1, min_compute=90, cluster=cluster, schedule=schedule)


cands = [cand((128, 256, 128), (1, 2, 1), "cooperative"), cand((128, 256, 128), (2, 1, 1), "cooperative"),
         cand((256, 128, 128), (2, 1, 1), "cooperative"), cand((128, 128, 128), (1, 2, 1), "cooperative"),
         cand((128, 128, 128), (2, 1, 1), "cooperative"), cand((128, 256, 128), (1, 1, 1), "cooperative"),
         cand((64, 128, 128), (1, 1, 1), "pingpong"), cand((64, 256, 128), (1, 1, 1), "pingpong"),
         cand((128, 128, 128), (1, 1, 1), "pingpong"), cand((64, 64, 128), (1, 1, 1), "pingpong"),
         cand((128, 64, 128), (1, 1, 1), "cooperative"), cand((64, 128, 128), (2, 1, 1), "pingpong")]
t = time.time()
res = warmup.compile_all(cands, "sm_90a", 16)
print(f"compiled in {time.time()-t:.0f}s", [r[1][:40] for r in res], flush=True)
ok = [c for c, r in zip(cands, res) if not r[1].startswith("failed")]
rng = cupy.random.default_rng(0)
for m, n, k in [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (4096, 512, 4096), (4096, 128, 4096), (4096, 16, 4096)]:
    w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
    x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
    sw = cs.compress(w, layout="sm90")
    ref = reference.to_float32(w) @ reference.to_float32(x)
    y = cupy.empty((m, n), dtype=cupy.float16)
    out = []
    for c in ok:
        try:
            cs.matmul(sw, x, out=y, config=c)
            err = reference.relative_error(y, ref)
            ms = reference.kernel_median_ms(lambda: cs.matmul(sw, x, out=y, config=c), calls=20, replays=7)
            out.append((2 * m * n * k / ms / 1e9, c.threadblock, c.cluster, c.schedule, err))
        except Exception as e:
            out.append((0, c.threadblock, c.cluster, c.schedule, str(e)[:60]))
    out.sort(reverse=True, key=lambda r: r[0])
    print((m, n, k), [(f"{r[0]:.0f}", r[1], r[2], r[3][:4], f"{r[4]:.0e}" if isinstance(r[4], float) else r[4]) for r in out[:6]], flush=True)
