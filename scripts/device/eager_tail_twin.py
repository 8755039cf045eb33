#!/usr/bin/env python3
"""Issue 13 (GPU machine): the stream-K twin as a user calls it. At shapes where default
selection runs the twin (sm90_choice.tail_twin), eager cs.matmul on torch tensors against
the same call pinned to the persistent kernel it replaced, dense torch.mm and cuSPARSELt
(torch._cslt_sparse_mm, its algorithm searched once), each timed with CUDA events around 20
calls queued back to back (host included), the four taking turns; every result checked.
Then a loop over new N of one twin range (a serving loop's new token counts) with the GPU
kept busy: host time per call, and how many calls waited for the GPU (a twin's new shape is
prepared on the host, no synchronizing setup).
--new-n-only: just the new-N loops, library then dense torch.mm then both again (the same N:
the first loop's are new to the process, the second's known), and with --profile the
process's first library loop under cProfile (own time, top 30).
Run from the repository root: python scripts/device/eager_tail_twin.py [--rows f16:4608x2048x8192,...]"""
import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROWS = ("f16:4608x2048x8192,f16:6144x1536x4096,f16:3584x4096x18944,f16:4096x1280x14336,f16:5120x2048x13824,"
        "bf16:4608x2048x8192,bf16:6144x1536x4096")
# N of the (1024, 2048] range at M 4608, K 8192, in whole 16-byte rows (nothing staged): the
# twin's (8 N tiles: the last wave splits) and the persistent kernel's (6-7 N tiles), 32 each
NEW_N = {"twin": range(1792 + 8, 2049, 8), "persistent": range(1536, 1792, 8)}


def main():
    import torch

    import cutlass_sparse as cs
    from bench_eager import device_ms, relative_error, spin
    from sustained import parse_rows

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=ROWS)
    parser.add_argument("--rounds", type=int, default=3, help="turns of the four contestants")
    parser.add_argument("--new-n-only", action="store_true", help="only the new-N loops (and dense's)")
    parser.add_argument("--profile", action="store_true", help="the process's first library loop under cProfile")
    parser.add_argument("--kernels", default="twin,persistent", help="--new-n-only: whose N ranges, in order")
    parser.add_argument("--setup-params", action="store_true",
                        help="as before session 33: no pointer map for the twin, so its launches read Params "
                             "its setup writes (a setup per new N or new pointers)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.setup_params:
        from cutlass_sparse.launch import sm90_params

        mapped = sm90_params.map_pointers
        sm90_params.map_pointers = lambda plan, templates, scaled, stream_k=False: (
            None if stream_k else mapped(plan, templates, scaled))
    if args.new_n_only:
        for kernel in args.kernels.split(","):
            for call in ("library", "dense", "library", "dense"):
                new_n_loop(torch, cs, spin, relative_error, kernel, list(NEW_N[kernel]), dense=call == "dense",
                           profile=args.profile and call == "library")
                args.profile = args.profile and call != "library"   # the process's first loop only
        return
    print(f"{'row':24} {'twin ms':>8} {'pers. ms':>8} {'dense ms':>8} {'cslt ms':>8}  twin/pers twin/dense "
          f"twin/cslt  kernel, errors")
    for dtype, (m, n, k) in parse_rows(args.rows):
        kind = getattr(torch, {"f16": "float16", "bf16": "bfloat16"}[dtype])
        w = cs.prune_2to4(torch.randn(m, k, device="cuda", dtype=kind))
        x = torch.randn(k, n, device="cuda", dtype=kind)
        sw = cs.compress(w)
        info = {}
        y = cs.matmul(sw, x, info=info)
        persistent = info["config"].replace("_streamk", "").replace("_ld56", "")
        pinned = {}
        cs.matmul(sw, x, config=persistent, info=pinned)
        compressed = torch._cslt_compress(w)
        alg = torch._cslt_sparse_mm_search(compressed, x)
        alg = alg[0] if isinstance(alg, tuple) else alg
        ref = w.float() @ x.float()
        calls = {"twin": lambda: cs.matmul(sw, x), "persistent": lambda: cs.matmul(sw, x, config=persistent),
                 "dense": lambda: torch.mm(w, x), "cslt": lambda: torch._cslt_sparse_mm(compressed, x, alg_id=alg)}
        errors = {name: relative_error(call(), ref) for name, call in calls.items()}
        times = {name: [] for name in calls}
        for turn in range(args.rounds):   # turns, the order reversed every other one (a warming card)
            for name in (list(calls) if turn % 2 == 0 else list(reversed(calls))):
                times[name].append(device_ms(torch, calls[name]))
        ms = {name: statistics.median(t) for name, t in times.items()}
        ok = all(e < 2e-2 for e in errors.values()) and "_streamk" in info["config"]
        print(f"{dtype} {m}x{n}x{k:<8} {ms['twin']:8.3f} {ms['persistent']:8.3f} {ms['dense']:8.3f} "
              f"{ms['cslt']:8.3f}  {ms['persistent'] / ms['twin']:9.3f} {ms['dense'] / ms['twin']:10.3f} "
              f"{ms['cslt'] / ms['twin']:9.3f}  {'ok' if ok else 'FAIL'} {info['decomposition']} "
              f"{pinned['decomposition']} " + " ".join(f"{k}={v:.1e}" for k, v in errors.items()), flush=True)
        del y
    for kernel, ns in NEW_N.items():
        new_n_loop(torch, cs, spin, relative_error, kernel, list(ns))


def new_n_loop(torch, cs, spin, relative_error, kernel, ns, dense=False, profile=False):
    """New N of one range, the GPU kept busy: a call that synchronizes shows as a wait.
    dense: torch.mm on the same operands instead (what the allocator and a launch cost alone)."""
    m, k = 4608, 8192
    w = cs.prune_2to4(torch.randn(m, k, device="cuda", dtype=torch.float16))
    sw = cs.compress(w)
    xs = {n: torch.randn(k, n, device="cuda", dtype=torch.float16) for n in ns}
    matmul = (lambda sw, x, info=None: torch.mm(w, x)) if dense else cs.matmul
    matmul(sw, xs[ns[0]])     # the range's first call (its kernel's first setup reads back)
    for n in ns:                  # each output size once for torch's allocator, as a serving loop has
        torch.empty((m, n), device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    segments = torch.cuda.memory_stats().get("segment.all.allocated", 0)   # cudaMalloc calls so far
    gc_before = [g["collections"] for g in gc.get_stats()]
    busy = torch.cuda.Event()
    times, waits, twins, results = [], 0, 0, {}
    profiler = None
    if profile:
        import cProfile
        profiler = cProfile.Profile()
    for i, n in enumerate(ns[1:]):
        if busy.query():
            spin(torch, 20)
            busy.record()
        info = {} if i % 8 == 0 else None   # a few calls report and are checked
        if profiler:
            profiler.enable()
        start = time.perf_counter()
        y = matmul(sw, xs[n], info=info)
        took = time.perf_counter() - start
        if profiler:
            profiler.disable()
        waits += took > 5e-3
        times.append(took * 1e6)
        if info is not None:
            twins += "_streamk" in info.get("config", "")
            results[n] = y
    segments = torch.cuda.memory_stats().get("segment.all.allocated", 0) - segments
    collections = [g["collections"] - b for g, b in zip(gc.get_stats(), gc_before)]
    torch.cuda.synchronize()
    worst = max(relative_error(y, w.float() @ xs[n].float()) for n, y in results.items())
    print(f"new N loop ({kernel}{', dense torch.mm' if dense else ''}{', cProfile' if profile else ''}), M {m} K {k}, N {ns[1]}..{ns[-1]} step 8: {len(times)} calls, host median "
          f"{statistics.median(times):.1f} us, max {max(times):.1f} us, {waits} waited for the GPU; "
          f"checked {sorted(results)} ({twins} ran the twin), memory held {torch.cuda.memory_allocated() >> 20} MiB "
          f"(torch) + {cupy_held() >> 20} MiB (CuPy's pool), {segments} cudaMalloc by torch, gc collections by "
          f"generation {collections}, worst error {worst:.1e} "
          f"{'ok' if worst < 2e-2 else 'FAIL'}", flush=True)
    print("  host us per call, in order: " + " ".join(f"{t:.0f}" for t in times))
    if profiler:
        import pstats
        stats = pstats.Stats(profiler).stats   # {function: (calls, primitive, own s, cumulative s, callers)}
        for order, column in (("own", 2), ("cumulative", 3)):
            rows = sorted(stats.items(), key=lambda item: -item[1][column])[:30]
            print(f"  by {order} time: {'own us/loop':>11} {'cum us/loop':>11} {'calls':>6}  function "
                  f"(the loop's {len(times)} calls)")
            for (path, line, name), (calls, _, own, cumulative, _) in rows:
                print(f"  {own * 1e6:11.1f} {cumulative * 1e6:11.1f} {calls:6d}  {Path(path).name}:{line}({name})")


def cupy_held() -> int:
    import cupy

    return cupy.get_default_memory_pool().used_bytes()


if __name__ == "__main__":
    main()
