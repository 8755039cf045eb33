#!/usr/bin/env python3
"""Issue 13 sweep (GPU machine): sm90 candidates with tile K 64 (metadata atom 64) and
clusters for multicast, against the catalog's K-128 tiles, dense cuBLAS and cuSPARSELt,
in one process. Every candidate's result is checked against the dense one; the metadata
conversion between atoms is checked byte for byte against CUTLASS's compressor.
Prints, per shape, the peers and the six fastest candidates. Run from the repository root."""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.build import warmup  # noqa: E402
from cutlass_sparse.cli.bench import cusparselt  # noqa: E402
from cutlass_sparse.describe import catalog  # noqa: E402
from cutlass_sparse.describe.helper_kernels import CompressorConfig  # noqa: E402
from cutlass_sparse.formats import sm90_layout  # noqa: E402
from cutlass_sparse.launch import sm90_compress  # noqa: E402


def cand(tb, cluster, schedule, scheduler="persistent"):
    """A candidate tile as the catalog would make it (f16 in and out, row-major x)."""
    return catalog.load("sm90").config((tb, (4, 1, 1), 0, cluster, schedule, scheduler), "f16", "f16", "row", 8, 8)


CO, PP = "cooperative", "pingpong"
LARGE = [cand((256, 128, 128), (1, 2, 1), CO), cand((128, 256, 128), (1, 2, 1), CO),
         cand((128, 128, 128), (1, 2, 1), CO),
         cand((128, 256, 64), (2, 1, 1), CO), cand((128, 256, 64), (1, 2, 1), CO), cand((128, 256, 64), (1, 1, 1), CO),
         cand((256, 128, 64), (1, 2, 1), CO), cand((256, 128, 64), (2, 1, 1), CO),
         cand((128, 128, 64), (1, 2, 1), CO), cand((128, 128, 64), (2, 1, 1), CO), cand((128, 128, 64), (1, 2, 1), PP),
         cand((64, 256, 64), (1, 2, 1), PP)]
SMALL = [cand((64, 32, 128), (1, 1, 1), PP), cand((64, 64, 128), (1, 1, 1), PP), cand((64, 128, 128), (1, 1, 1), PP),
         cand((64, 32, 128), (4, 1, 1), PP), cand((64, 64, 128), (4, 1, 1), PP),
         cand((64, 32, 64), (1, 1, 1), PP), cand((64, 64, 64), (1, 1, 1), PP), cand((64, 128, 64), (1, 1, 1), PP),
         cand((64, 64, 64), (2, 1, 1), PP), cand((64, 64, 64), (4, 1, 1), PP), cand((64, 64, 64), (8, 1, 1), PP),
         cand((64, 32, 64), (4, 1, 1), PP), cand((64, 16, 128), (1, 1, 1), PP),
         cand((128, 64, 64), (1, 1, 1), CO, "streamk"), cand((128, 32, 128), (1, 1, 1), CO, "streamk")]
LARGE_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (11008, 4096, 4096), (4096, 4096, 11008),
                (4096, 512, 4096), (11008, 512, 4096), (14336, 512, 4096), (4096, 512, 14336), (28672, 4096, 8192)]
SMALL_SHAPES = [(4096, 16, 4096), (4096, 128, 4096), (4096, 64, 4096), (14336, 16, 4096), (4096, 16, 14336),
                (28672, 16, 8192), (4096, 8, 14336), (11008, 128, 4096)]


def timed(fn, flops):
    calls = 5 if flops > 2e11 else 20
    return reference.kernel_median_ms(fn, calls=calls, replays=7, spin_ms=3.0)


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    cands = (LARGE if which in ("all", "large") else []) + (SMALL if which in ("all", "small") else [])
    t = time.time()
    items = [(c, "sm_90a") for c in cands] + [(CompressorConfig("f16", atom_k=a), "sm_90a") for a in (64, 128)]
    res = warmup.compile_all(items, None, 16)
    failed = {r[0]: r[2] for r in res if r[2].startswith("failed")}
    print(f"compiled in {time.time() - t:.0f}s; failed: {failed}", flush=True)
    rng = cupy.random.default_rng(0)
    shapes = (LARGE_SHAPES if which in ("all", "large") else []) + (SMALL_SHAPES if which in ("all", "small") else [])
    for m, n, k in shapes:
        w = cs.prune_2to4(rng.standard_normal((m, k), dtype=cupy.float32).astype(cupy.float16))
        x = rng.standard_normal((k, n), dtype=cupy.float32).astype(cupy.float16)
        sw = cs.compress(w, layout="sm90")
        _, direct64 = sm90_compress.compress(w, "f16", 64)
        converted = sw.metadata_for(64)
        rows = cupy.arange(m)[:, None]
        groups = cupy.arange(k // 8)[None, :]
        index = sm90_layout.byte_index(rows, groups, m, 64)
        same = bool((converted[index] == direct64[index]).all())
        y_dense = cupy.matmul(w, x)
        ref = reference.to_float32(y_dense)
        flops = 2.0 * m * n * k
        dense_ms = timed(lambda: cupy.matmul(w, x, out=y_dense), flops)
        peer = cusparselt(w, x)
        cslt_ms = timed(peer[0], flops) if peer else float("nan")
        y = cupy.empty((m, n), dtype=cupy.float16)
        out = []
        pool = LARGE if n >= 512 else SMALL
        for c in pool:
            if c.name in failed or c not in cands:
                continue
            splits = (1, 2, 4) if c.tile_scheduler == "streamk" else (None,)
            for s in splits:
                try:
                    y.fill(0)
                    cs.matmul(sw, x, out=y, config=c, split_k=s)
                    err = reference.relative_error(y, ref)
                    ms = timed(lambda: cs.matmul(sw, x, out=y, config=c, split_k=s), flops)
                    out.append((dense_ms / ms, ms, c, s, err))
                except Exception as e:   # noqa: BLE001 - a sweep reports and goes on
                    out.append((0.0, 0.0, c, s, f"{type(e).__name__}: {str(e)[:80]}"))
        out.sort(reverse=True, key=lambda r: r[0])
        bad = [r for r in out if not isinstance(r[4], float) or r[4] > 2e-3]
        print(f"\n{m}x{n}x{k}: dense {dense_ms * 1e3:.1f} us, cuSPARSELt {cslt_ms * 1e3:.1f} us "
              f"(LT/dense {dense_ms / cslt_ms:.2f}); metadata conversion {'exact' if same else 'DIFFERS'}; "
              f"{len(bad)} bad", flush=True)
        for vs_dense, ms, c, s, err in out[:7]:
            tb, cl = "x".join(map(str, c.threadblock)), "x".join(map(str, c.cluster[:2]))
            print(f"  {tb:11} c{cl} {c.schedule[:4]} {c.tile_scheduler[:3]} s{s or 1}  {ms * 1e3:8.1f} us  "
                  f"/dense {vs_dense:.3f}  /LT {cslt_ms / ms if ms else 0:.3f}  err {err:.1e}", flush=True)
        for r in bad[:4]:
            print(f"  BAD {r[2].name} s{r[3]}: {r[4]}")


if __name__ == "__main__":
    main()
