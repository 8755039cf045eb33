#!/usr/bin/env python3
"""Params by value against the setup entry, in one process with interleaved rounds (GPU
machine): host time of repeated torch cs.matmul calls (torch's allocator moves `out` on
most calls, so most calls meet new pointers) and eager MLP blocks at few tokens."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.launch import sm90  # noqa: E402

BY_VALUE = sm90.Sm90Plan._by_value


def mode(by_value: bool) -> None:
    sm90.Sm90Plan._by_value = BY_VALUE if by_value else (lambda self, pointers: None)


def host_us(call, calls=400):
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    took = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return took


def block_ms(call, repeats=20):
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        call()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / repeats


def main():
    w = cs.prune_2to4(torch.randn(128, 128, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(128, 64, device="cuda").half()
    width, hidden = 4096, 11008
    s_up = cs.compress(cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5))
    s_down = cs.compress(cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5))
    xs = {t: torch.randn(t, width, device="cuda").half() for t in (1, 16)}
    rows = {"cs.matmul host us": lambda: host_us(lambda: cs.matmul(sw, x)),
            "torch.mm host us": lambda: host_us(lambda: torch.mm(w, x))}
    for t, xt in xs.items():
        rows[f"MLP block ms, {t} tokens"] = lambda xt=xt: block_ms(
            lambda: cs.linear(cs.linear(xt, s_up, activation="silu"), s_down))
    for by_value in (True, False):   # warm both paths
        mode(by_value)
        for measure in rows.values():
            measure()
    results = {(name, by_value): [] for name in rows for by_value in (True, False)}
    for _ in range(7):
        for by_value in (True, False):
            mode(by_value)
            for name, measure in rows.items():
                results[(name, by_value)].append(measure())
    mode(True)
    for name in rows:
        on, off = (statistics.median(results[(name, b)]) for b in (True, False))
        print(f"{name:28s} by value {on:8.3f}   setup entry {off:8.3f}")


if __name__ == "__main__":
    main()
