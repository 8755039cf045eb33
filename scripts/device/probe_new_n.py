#!/usr/bin/env python3
"""Where a new N's host time goes (GPU machine): cs.linear's eager path for N = 1..512
after a warm-up pass over the ranges (as scripts/bench_eager.py), its steps replayed one
by one with a clock around each (median per step over the loop), beside the whole call."""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

import cutlass_sparse as cs  # noqa: E402
from cutlass_sparse.api import eager, interop, matmul as api_matmul  # noqa: E402
from cutlass_sparse.launch import pdl, sm90, sm90_params  # noqa: E402
from cutlass_sparse.plan import plans  # noqa: E402


def warm_up(sw, xs):
    for n in sorted({1} | {end - d for end in (16, 32, 64, 128, 256, 512) for d in (0, 1)}):
        cs.linear(xs[n], sw)
    torch.cuda.synchronize()


def reset():
    eager._entries.clear(), eager._classes.clear(), eager._ahead.clear(), plans.clear()
    sm90_params._templates.clear()


def main():
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda").half() * 0.02)
    sw = cs.compress(w)
    xs = {n: torch.randn(n, 4096, device="cuda").half() for n in range(1, 513)}
    for n in xs:   # torch's allocator has seen every output size
        torch.empty((n, 4096), device="cuda", dtype=torch.float16)
    warm_up(sw, xs)
    whole = []
    for n in range(2, 513):
        start = time.perf_counter()
        cs.linear(xs[n], sw)
        whole.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    print(f"cs.linear, new N 2..512: median {statistics.median(whole):.1f} us, mean {statistics.mean(whole):.1f}")

    reset()
    warm_up(sw, xs)
    options = api_matmul._activation_options("identity")
    steps = {name: [] for name in ("linear_key", "lookup", "new_out", "torch_stream", "pointers", "host params",
                                   "record", "Ready", "keep ready", "launch", "total")}
    worst = 0.0
    for n in range(2, 513):
        x = xs[n]
        t = [time.perf_counter()]
        found = eager.linear_key(x, sw, options)
        t.append(time.perf_counter())
        entry = eager.lookup(found[0])
        t.append(time.perf_counter())
        y = entry.new_out(x.device, transposed=found[1])
        t.append(time.perf_counter())
        stream = interop.torch_stream(0)
        t.append(time.perf_counter())
        plan = entry.plan
        pointers = (sw.values.data.ptr, sw.metadata_for(plan.atom_k, stream).data.ptr, x.data_ptr(), y.data_ptr(),
                    y.data_ptr())
        t.append(time.perf_counter())
        nulls = plan._nulls(pointers, (0, 0, 0))
        host = plan._host_params.get(nulls)
        if host is None:
            offsets = sm90_params.pointer_maps.get((plan.compiled.key, plan.problem.device_id))
            made = plan._templates.get(nulls) or sm90_params.template(plan._host_key(pointers, (0, 0, 0)))
            host = plan._host_params[nulls] = sm90_params.HostParams(made.arrived(), offsets)
        t.append(time.perf_counter())
        record = host.record(pointers + (0, 0, 0))
        t.append(time.perf_counter())
        ready = sm90.Ready(pdl.kernel_params(record, pdl.NULL), plan._prepared(pointers).grid, held=(record,))
        t.append(time.perf_counter())
        with plan._lock:
            plan._readies[pointers] = ready
        t.append(time.perf_counter())
        plan.launch(ready, stream)
        t.append(time.perf_counter())
        for name, a, b in zip(steps, t, t[1:]):
            steps[name].append((b - a) * 1e6)
        steps["total"].append((t[-1] - t[0]) * 1e6)
        if n % 61 == 0:
            torch.cuda.synchronize()
            d = y if found[1] else y.T
            worst = max(worst, float((d.float() - x.float() @ w.float().T).norm() / (x.float() @ w.float().T).norm()))
    torch.cuda.synchronize()
    print(f"the same steps, one by one (median us per new N; results checked, worst rel err {worst:.1e}):")
    for name, values in steps.items():
        print(f"  {name:14s} {statistics.median(values):6.2f}")


if __name__ == "__main__":
    main()
