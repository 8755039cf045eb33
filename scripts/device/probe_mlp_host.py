#!/usr/bin/env python3
"""The eager MLP block's host side (GPU machine): host and device time per block (up
with silu, down; cs.linear on torch tensors) at a few token counts, and how many of its
launches found their Params built, patched a host copy, or ran a setup."""
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.launch import sm90  # noqa: E402

counts = collections.Counter()


def counted(name, fn):
    def wrapper(*args, **kwargs):
        counts[name] += 1
        return fn(*args, **kwargs)
    return wrapper


def main():
    sm90.Sm90Plan._from_host = counted("patched host copy", sm90.Sm90Plan._from_host)
    sm90.Sm90Plan._build = counted("setup launch", sm90.Sm90Plan._build)
    sm90.Sm90Plan.launch = counted("launches", sm90.Sm90Plan.launch)
    width, hidden = 4096, 11008
    w_up = cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5)
    w_down = cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5)
    s_up, s_down = cs.compress(w_up), cs.compress(w_down)

    def block(x):
        return cs.linear(cs.linear(x, s_up, activation="silu"), s_down)

    for tokens in (16, 128, 512):
        x = torch.randn(tokens, width, device="cuda").half()
        for _ in range(5):
            block(x)
        torch.cuda.synchronize()
        counts.clear()
        host = []
        start_event, stop_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start_event.record()
        for _ in range(100):
            start = time.perf_counter()
            block(x)
            host.append((time.perf_counter() - start) * 1e6)
        stop_event.record()
        stop_event.synchronize()
        print(f"{tokens:5d} tokens: host {statistics.median(host):6.1f} us per block (median), "
              f"device {start_event.elapsed_time(stop_event) * 10:6.1f} us per block; per 100 blocks: {dict(counts)}")


if __name__ == "__main__":
    main()
