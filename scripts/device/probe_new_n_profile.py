#!/usr/bin/env python3
"""Where a new N's host time goes (GPU machine), in scripts/bench_eager.py's new-N loop
(cs.linear, 4096x4096 weight, N = 1..512 after one warm-up pass over the ranges):
  (no option)  the loop timed plainly, twice in one process (median per call; the second
               weight's calls find their pointers known), and how many plans were made from
               a class sibling's (eager._for_n) instead of found
  --first      the process's first loop under cProfile, by own time
  --stages     a first call's cost taken apart: every N's first call, a known N with x at a
               new address, then the same calls again
  --gc-off     with Python's garbage collector off"""
import cProfile
import gc
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager  # noqa: E402

NEW_N = range(1, 513)
WARM = sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512) for d in (0, 1)})


def loop(profile=None):
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in NEW_N}
    for n in WARM:
        cs.linear(xs[n], sw)
    for n in NEW_N:
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    found = {"sibling": 0}
    original = eager._for_n

    def sibling(entry, key):
        found["sibling"] += 1
        return original(entry, key)
    eager._for_n = sibling
    times = []
    if profile:
        profile.enable()
    for n in NEW_N:
        start = time.perf_counter()
        cs.linear(xs[n], sw)
        times.append((time.perf_counter() - start) * 1e6)
    if profile:
        profile.disable()
    eager._for_n = original
    torch.cuda.synchronize()
    return statistics.median(times), found


def split(sw, xs):
    """Median us per call over NEW_N (p10, p90) with these x tensors."""
    times = []
    for n in NEW_N:
        start = time.perf_counter()
        cs.linear(xs[n], sw)
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    q = statistics.quantiles(times, n=10)
    return f"{statistics.median(times):5.1f} us median (p10 {q[0]:.1f}, p90 {q[-1]:.1f})"


def stages():
    """The first-use cost taken apart: every N's first call; the same N with x at new
    addresses (host Params known, a new pointer set); the same calls again (all known)."""
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in NEW_N}
    for n in WARM:
        cs.linear(xs[n], sw)
    for n in NEW_N:
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    print("first call of each N:      ", split(sw, xs))
    others = {n: torch.randn(n, 4096, device="cuda").half() for n in NEW_N}
    torch.cuda.synchronize()
    print("known N, x at new address: ", split(sw, others))
    print("known N, known x:          ", split(sw, others))


def main():
    if "--gc-off" in sys.argv:
        gc.disable()
    if "--stages" in sys.argv:
        stages()
        return
    if "--first" in sys.argv:   # the process's first loop under the profiler: every N's first call
        profile = cProfile.Profile()
        median, found = loop(profile)
        print(f"new N under cProfile, first loop: {median:.1f} us median per call; siblings made: {found['sibling']}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(40)
        return
    median, found = loop()
    print(f"new N, plain: {median:.1f} us median per call; class siblings made: {found['sibling']}")
    median, _ = loop()
    print(f"new N, plain, a second weight: {median:.1f} us median per call")


if __name__ == "__main__":
    main()
