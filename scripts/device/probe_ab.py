#!/usr/bin/env python3
"""Issue 11 A/B (GPU machine): host copies of Params (launch/sm90_params) on and off in one
process, interleaved: host time of a new-N loop (cs.linear, 4096x4096, N = 1..512 after
a warm pass), of 32 sparse decode MLP layers at 1 and 16 tokens, and of repeated calls
whose output moves; then where the new-N loop's host time goes (cProfile)."""
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager  # noqa: E402
from cutlass_sparse.launch import sm90_params  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402

MAPS = {}


def set_host_params(on: bool):
    """Turn the host-Params path on or off, and forget everything made so far."""
    if not on and sm90_params.pointer_maps:
        MAPS.update(sm90_params.pointer_maps)
    sm90_params.pointer_maps.clear()
    if on:
        sm90_params.pointer_maps.update(MAPS)
    sm90_params._templates.clear()
    eager.clear()
    plans.clear()


def new_n(sw, xs):
    for n in sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512) for d in (0, 1)}):
        cs.linear(xs[n], sw)
    torch.cuda.synchronize()
    times = []
    for n in range(1, 513):
        start = time.perf_counter()
        cs.linear(xs[n], sw)
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def decode(s_up, s_down, x, layers=32):
    def step():
        for _ in range(layers):
            y = cs.linear(cs.linear(x, s_up, activation="silu"), s_down)
        return y
    step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(5):
        step()
    host = (time.perf_counter() - start) / 5 / layers * 1e6
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(5):
        step()
    end.record()
    end.synchronize()
    return host, begin.elapsed_time(end) / 5 / layers * 1e3


def main():
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in range(1, 513)}
    s_up = cs.compress(cs.prune_2to4(torch.randn(11008, 4096, device="cuda").half() * 0.02))
    s_down = cs.compress(cs.prune_2to4(torch.randn(4096, 11008, device="cuda").half() * 0.02))
    rows = {}
    new_n(sw, xs)   # warm everything once (kernels loaded, TMA templates, pointer maps)
    for rnd in range(3):
        for on in (False, True):
            set_host_params(on)
            label = "host Params" if on else "setup launch"
            rows.setdefault(("new N median host us", label), []).append(new_n(sw, xs))
            for tokens in (1, 16):
                host, per_layer = decode(s_up, s_down, xs[tokens])
                rows.setdefault((f"decode {tokens} tok host us/layer", label), []).append(host)
                rows.setdefault((f"decode {tokens} tok GPU+host us/layer", label), []).append(per_layer)
    for (what, label), values in rows.items():
        print(f"{what:34s} {label:13s} " + " ".join(f"{v:7.1f}" for v in values), flush=True)
    set_host_params(True)
    new_n(sw, xs)
    profile = cProfile.Profile()
    fresh = list(range(1, 513))
    set_host_params(True)
    for n in sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512) for d in (0, 1)}):
        cs.linear(xs[n], sw)
    torch.cuda.synchronize()
    profile.runcall(lambda: [cs.linear(xs[n], sw) for n in fresh])
    torch.cuda.synchronize()
    print("\nnew N loop with host Params, by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
