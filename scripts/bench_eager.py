#!/usr/bin/env python3
"""The user's path, timed in one process: eager calls as a user writes them, sparse
(cutlass-sparse, torch tensors in and out) against dense torch, every result checked.

- host time per call (tiny problem, so the GPU never holds the host back): cs.matmul,
  cs.linear, a cs.plan call, torch.mm, CuPy's matmul;
- an MLP block (up-projection with its activation, down-projection) at 1, 16, 128, 512
  and 4096 tokens, for 4096/11008 and 4096/14336: time per block, eager, CUDA events
  around 20 blocks queued back to back (host overhead included, as a user pays it);
- a 32-layer decode loop (the same block 32 times per token step) at 1 and 16 tokens;
- odd shapes against their even neighbours: N = 4095 vs 4096 and 7 vs 8;
- a loop over N = 1..512 (every N new to the plan cache, after a warm-up pass over the N
  ranges, an aligned and an unaligned N each; torch's allocator has seen each output size
  once, its first-sight cost timed apart): host time per call and how many calls
  waited for the GPU (a spin kernel keeps the GPU busy; a call that takes longer than 5 ms
  waited for it); results checked at every 37th N.

    python scripts/bench_eager.py [--json out.json] [--quick]
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MLP_SHAPES = ((4096, 11008), (4096, 14336))          # (model width, hidden width)
TOKENS = (1, 16, 128, 512, 4096)
DECODE_TOKENS = (1, 16)
ODD_PAIRS = ((4096, 4095, 4096), (4096, 7, 4096))    # (M, N, K) with N and N+1
HOST_SHAPE = (128, 64, 128)
NEW_N = range(1, 513)
ACTIVATION = "silu"


def spin(torch, ms: float) -> None:
    """Keep the current stream busy for about `ms` (a CUDA sleep kernel)."""
    torch.cuda._sleep(int(ms * 1.4e6))


def host_us(torch, call, calls: int = 200) -> float:
    """Host time of one call: calls back to back, no synchronization, GPU idle-fast problem."""
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def device_ms(torch, call, repeats: int = 20, rounds: int = 5) -> float:
    """Time per call with CUDA events around `repeats` eager calls (host included), median of rounds."""
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / repeats)
    return statistics.median(times)


def relative_error(y, ref) -> float:
    return float((y.float() - ref.float()).norm() / ref.float().norm())


def host_rows(torch, cs, cupy):
    m, n, k = HOST_SHAPE
    w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
    sw = cs.compress(w)
    x = torch.randn(k, n, device="cuda").half()
    xt = x.T.contiguous().T            # [K, N] column-major: what cs.linear's x.T is
    tokens = torch.randn(n, k, device="cuda").half()
    planned = cs.plan(sw, x)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    wc, xc, outc = cupy.asarray(w), cupy.asarray(x), cupy.asarray(out)
    planned_c = cs.plan(sw, xc)
    checks = {"cs.matmul": cs.matmul(sw, x), "cs.plan": planned(x), "cs.linear": cs.linear(tokens, sw).T}
    ref = w.float() @ x.float()
    errors = {name: relative_error(y, ref if name != "cs.linear" else w.float() @ tokens.float().T)
              for name, y in checks.items()}
    rows = {
        "cs.matmul(sw, x)": host_us(torch, lambda: cs.matmul(sw, x)),
        "cs.matmul(sw, x, out=y)": host_us(torch, lambda: cs.matmul(sw, x, out=out)),
        "cs.matmul(sw, x_colmajor)": host_us(torch, lambda: cs.matmul(sw, xt)),
        "cs.linear(tokens, sw)": host_us(torch, lambda: cs.linear(tokens, sw)),
        "plan(x, out=y)": host_us(torch, lambda: planned(x, out=out)),
        "torch.mm(w, x)": host_us(torch, lambda: torch.mm(w, x)),
        "torch.mm(w, x, out=y)": host_us(torch, lambda: torch.mm(w, x, out=out)),
        "cupy.matmul(w, x)": host_us(torch, lambda: cupy.matmul(wc, xc)),
        "cs.matmul(sw, x) [cupy x]": host_us(torch, lambda: cs.matmul(sw, xc)),
        "cs.matmul(sw, x, out=y) [cupy]": host_us(torch, lambda: cs.matmul(sw, xc, out=outc)),
        "plan(x, out=y) [cupy]": host_us(torch, lambda: planned_c(xc, out=outc)),
    }
    return rows, errors


def mlp_rows(torch, cs, quick: bool):
    rows = []
    for width, hidden in MLP_SHAPES[:1] if quick else MLP_SHAPES:
        w_up = cs.prune_2to4(torch.randn(hidden, width, device="cuda").half() * width ** -0.5)
        w_down = cs.prune_2to4(torch.randn(width, hidden, device="cuda").half() * hidden ** -0.5)
        s_up, s_down = cs.compress(w_up), cs.compress(w_down)
        act = torch.nn.functional.silu

        def dense(x):
            return torch.mm(act(torch.mm(x, w_up.T)), w_down.T)

        def sparse(x):
            return cs.linear(cs.linear(x, s_up, activation=ACTIVATION), s_down)

        for tokens in TOKENS[:3] if quick else TOKENS:
            x = torch.randn(tokens, width, device="cuda").half()
            err = relative_error(sparse(x), dense(x))
            d_ms, s_ms = device_ms(torch, lambda: dense(x)), device_ms(torch, lambda: sparse(x))
            rows.append({"width": width, "hidden": hidden, "tokens": tokens, "dense_ms": d_ms, "sparse_ms": s_ms,
                         "speedup": d_ms / s_ms, "rel_err": err, "ok": err < 2e-2})
        for tokens in DECODE_TOKENS:
            x = torch.randn(tokens, width, device="cuda").half()

            def layers(block, x=x):
                for _ in range(32):
                    y = block(x)
                return y

            d_ms, s_ms = device_ms(torch, lambda: layers(dense), 3, 5), device_ms(torch, lambda: layers(sparse), 3, 5)
            rows.append({"width": width, "hidden": hidden, "tokens": tokens, "decode_32_layers": True,
                         "dense_ms": d_ms, "sparse_ms": s_ms, "speedup": d_ms / s_ms,
                         "rel_err": relative_error(sparse(x), dense(x)), "ok": True})
    return rows


def odd_rows(torch, cs):
    rows = []
    for m, n_odd, k in ODD_PAIRS:
        w = cs.prune_2to4(torch.randn(m, k, device="cuda").half())
        sw = cs.compress(w)
        for n in (n_odd, n_odd + 1):
            x = torch.randn(k, n, device="cuda").half()
            err = relative_error(cs.matmul(sw, x), w.float() @ x.float())
            rows.append({"m": m, "n": n, "k": k, "sparse_ms": device_ms(torch, lambda: cs.matmul(sw, x)),
                         "dense_ms": device_ms(torch, lambda: torch.mm(w, x)), "rel_err": err, "ok": err < 2e-2})
    return rows


def new_n_row(torch, cs):
    from cutlass_sparse.describe.selection import n_range

    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in NEW_N}
    # warm-up: one pass over the N ranges (selection.n_range), an aligned and an unaligned N each
    warm = sorted({1} | {end - d for end in {n_range(n) for n in NEW_N} for d in (0, 1)})
    for n in warm:
        cs.linear(xs[n], sw)
    # torch's allocator sees each output size once first (as a serving loop's steady state
    # does), so neither loop below pays its first sight of a size; that cost is timed apart
    first_sight = []
    for n in NEW_N:
        start = time.perf_counter()
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
        first_sight.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    busy = torch.cuda.Event()
    times, waits, results = [], 0, {}
    for n in NEW_N:
        if busy.query():       # keep the GPU busy so a synchronizing call shows as a wait
            spin(torch, 20)
            busy.record()
        start = time.perf_counter()
        y = cs.linear(xs[n], sw)
        took = time.perf_counter() - start
        waits += took > 5e-3
        times.append(took * 1e6)
        if n % 37 == 1:
            results[n] = y
    torch.cuda.synchronize()
    worst = max(relative_error(y, xs[n].float() @ w.float().T) for n, y in results.items())
    # the share of torch's allocator: the same outputs allocated alone
    alloc_times = []
    for n in NEW_N:
        start = time.perf_counter()
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
        alloc_times.append((time.perf_counter() - start) * 1e6)
    # dense torch in the same loop (its own first sight of each N, the same allocations)
    dense_times = []
    for n in NEW_N:
        start = time.perf_counter()
        torch.mm(xs[n], w.T)
        dense_times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return {"calls": len(times), "warm_up_n": warm, "median_host_us": statistics.median(times),
            "mean_host_us": statistics.mean(times), "calls_that_waited_for_the_gpu": waits,
            "dense_median_host_us": statistics.median(dense_times),
            "alloc_median_us": statistics.median(alloc_times),
            "alloc_first_sight_median_us": statistics.median(first_sight),
            "checked_n": sorted(results), "worst_rel_err": worst, "ok": worst < 2e-2}


def profile_decode(torch, cs, tokens: int = 16) -> None:
    """cProfile of 32 sparse decode layers (up, silu, down) at `tokens` tokens, own time."""
    import cProfile
    import pstats

    width, hidden = MLP_SHAPES[0]
    s_up = cs.compress(cs.prune_2to4(torch.randn(hidden, width, device="cuda").half()))
    s_down = cs.compress(cs.prune_2to4(torch.randn(width, hidden, device="cuda").half()))
    x = torch.randn(tokens, width, device="cuda").half()

    def step():
        for _ in range(32):
            y = cs.linear(cs.linear(x, s_up, activation=ACTIVATION), s_down)
        return y

    step()
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.runcall(lambda: [step() for _ in range(5)])
    print(f"\nhost time of 5 x 32 sparse decode layers at {tokens} tokens, by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)


def main(argv=None) -> int:
    from cutlass_sparse.cli.args import Parser   # a bad command line: one line, exit 2

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--quick", action="store_true", help="one MLP shape, three token counts")
    parser.add_argument("--cprofile", action="store_true",
                        help="also print where the host time of a sparse decode step goes (cProfile, own time)")
    args = parser.parse_args(argv)
    import cupy
    import torch

    import cutlass_sparse as cs

    results = {"device": torch.cuda.get_device_name()}
    host, errors = host_rows(torch, cs, cupy)
    results["host_us"], results["host_check_rel_err"] = host, errors
    print(f"host time per call ({'x'.join(map(str, HOST_SHAPE))} f16; results checked: "
          + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()) + ")")
    for name, us in host.items():
        print(f"  {name:28s} {us:7.1f} us   {us / host['torch.mm(w, x)']:5.2f}x torch.mm")
    results["mlp"] = mlp_rows(torch, cs, args.quick)
    print(f"\nMLP block, eager (up {ACTIVATION} down, f16, torch tensors), per block:")
    print(f"  {'width':>5s} {'hidden':>6s} {'tokens':>6s} {'dense ms':>9s} {'sparse ms':>9s} {'speedup':>7s}  check")
    for r in results["mlp"]:
        label = "decode x32" if r.get("decode_32_layers") else ""
        print(f"  {r['width']:5d} {r['hidden']:6d} {r['tokens']:6d} {r['dense_ms']:9.3f} {r['sparse_ms']:9.3f} "
              f"{r['speedup']:7.3f}  {'ok' if r['ok'] else 'WRONG'} ({r['rel_err']:.1e}) {label}")
    results["odd"] = odd_rows(torch, cs)
    print("\nodd N against even N (cs.matmul and torch.mm, eager, per call):")
    for r in results["odd"]:
        print(f"  {r['m']}x{r['n']}x{r['k']}: sparse {r['sparse_ms'] * 1e3:8.1f} us  dense {r['dense_ms'] * 1e3:8.1f} us"
              f"  {'ok' if r['ok'] else 'WRONG'} ({r['rel_err']:.1e})")
    results["new_n"] = new_n_row(torch, cs)
    r = results["new_n"]
    print(f"\nnew N every call (cs.linear, 4096x4096 weight, N = 1..512): host {r['median_host_us']:.1f} us median, "
          f"{r['mean_host_us']:.1f} us mean (dense torch.mm in the same loop: {r['dense_median_host_us']:.1f} us; "
          f"torch.empty of the output alone: {r['alloc_median_us']:.1f} us, at its first sight of each size, "
          f"before both loops: {r['alloc_first_sight_median_us']:.1f} us); "
          f"{r['calls_that_waited_for_the_gpu']} of {r['calls']} calls waited "
          f"for the GPU (warm-up N {r['warm_up_n']}); results checked at N {r['checked_n']}: "
          f"{'ok' if r['ok'] else 'WRONG'} ({r['worst_rel_err']:.1e})")
    if args.cprofile:
        profile_decode(torch, cs)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    ok = all(r["ok"] for r in results["mlp"] + results["odd"] + [results["new_n"]])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
