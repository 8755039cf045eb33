#!/usr/bin/env python3
"""Where eager host time goes (GPU machine): cProfile, own time, of (1) a loop over new N
(cs.linear, 4096x4096 weight, after one warm-up pass over the N ranges) and (2) repeated
torch cs.matmul / cs.linear calls of one shape. Prints per-call times first."""
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402


def per_call(fn, items):
    times = []
    for item in items:
        start = time.perf_counter()
        fn(item)
        times.append((time.perf_counter() - start) * 1e6)
    return times


def main():
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in range(1, 1025)}
    warm = sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512, 1024) for d in (0, 1)})
    for n in warm:
        cs.linear(xs[n], sw)
    torch.cuda.synchronize()
    new = [n for n in range(1, 513) if n not in warm]
    times = per_call(lambda n: cs.linear(xs[n], sw), new)
    aligned = [t for n, t in zip(new, times) if n % 8 == 0]
    other = [t for n, t in zip(new, times) if n % 8]
    print(f"new N, first sight: median {statistics.median(times):.1f} us (aligned {statistics.median(aligned):.1f}, "
          f"unaligned {statistics.median(other):.1f}); max {max(times):.0f} us")
    times = per_call(lambda n: cs.linear(xs[n], sw), new)
    print(f"same N again: median {statistics.median(times):.1f} us")
    # the same loop again under the profiler, from a cleared eager cache (warm-up again)
    from cutlass_sparse.api import eager
    from cutlass_sparse.launch import sm90_params
    from cutlass_sparse.plan import plans

    eager.clear(), plans.clear()
    sm90_params._templates.clear()
    for n in warm:
        cs.linear(xs[n], sw)
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.runcall(lambda: [cs.linear(xs[n], sw) for n in new])
    torch.cuda.synchronize()
    print("\nnew N (1..512, as above), by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(28)

    m, n, k = 128, 64, 128
    w2 = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw2 = cs.compress(w2)
    x = torch.randn(k, n, device="cuda").half()
    tokens = torch.randn(n, k, device="cuda").half()
    for _ in range(20):
        cs.matmul(sw2, x)
        cs.linear(tokens, sw2)
    torch.cuda.synchronize()
    for name, call in (("cs.matmul", lambda: cs.matmul(sw2, x)), ("cs.linear", lambda: cs.linear(tokens, sw2)),
                       ("torch.mm", lambda: torch.mm(w2, x))):
        start = time.perf_counter()
        for _ in range(2000):
            call()
        print(f"{name}: {(time.perf_counter() - start) / 2000 * 1e6:.1f} us per call")
        torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.runcall(lambda: [cs.matmul(sw2, x) for _ in range(2000)])
    torch.cuda.synchronize()
    print("\nrepeated torch cs.matmul, by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
