#!/usr/bin/env python3
"""Host time per call of cs.matmul and of a planned call, on a tiny problem: time N
back-to-back calls (no synchronization between them) minus the GPU's kernel time for
the same N calls, divided by N. Needs a GPU.

    python scripts/host_overhead.py [--calls 2000] [--family sm80|sm90] [--cprofile]

--cprofile also prints where cs.matmul's host time goes (cProfile, by own time).
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cupy  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse import reference  # noqa: E402
from cutlass_sparse.cli.args import Parser, positive_int  # noqa: E402


def host_us(call, calls: int) -> float:
    call()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    cupy.cuda.Device().synchronize()
    kernel_ms = reference.kernel_median_ms(call, calls=50, replays=5)
    return max(host / calls * 1e6 - kernel_ms * 1e3, 0.0), kernel_ms * 1e3


def main() -> int:
    p = Parser(description=__doc__.splitlines()[0])   # a bad command line: one line, exit 2
    p.add_argument("--calls", type=positive_int, default=2000)
    p.add_argument("--family", default="sm80", choices=["sm80", "sm90"])
    p.add_argument("--cprofile", action="store_true")
    args = p.parse_args()
    rng = cupy.random.default_rng(0)
    w = cs.prune_2to4(rng.standard_normal((128, 128), dtype=cupy.float32).astype(cupy.float16))
    x = rng.standard_normal((128, 64), dtype=cupy.float32).astype(cupy.float16)
    sw = cs.compress(w, layout=args.family)
    out = cupy.empty((128, 64), dtype=cupy.float16)
    planned = cs.plan(sw, x)
    ref = reference.to_float32(w) @ reference.to_float32(x)
    for name, call in (("cs.matmul(sw, x, out=y)", lambda: cs.matmul(sw, x, out=out)),
                       ("plan(x, out=y)", lambda: planned(x, out=out)),
                       ("cupy.matmul (dense, for scale)", lambda: cupy.matmul(cupy.asarray(w), x, out=out))):
        out[...] = 0
        call()
        err = reference.relative_error(out, ref)
        overhead, kernel = host_us(call, args.calls)
        print(f"{name:34s} host {overhead:6.1f} us/call  (kernel {kernel:5.1f} us, rel err {err:.1e})")
    if args.cprofile:
        import cProfile
        import pstats

        profile = cProfile.Profile()
        profile.runcall(lambda: [cs.matmul(sw, x, out=out) for _ in range(args.calls)])
        pstats.Stats(profile).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
