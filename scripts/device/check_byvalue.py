"""Params by value on the GPU: a decode shape's calls through each way a launch gets its
Params (the setup's buffer on a first call, a patched host copy by value after it, the
range built ahead for new N, a CUDA graph capturing a by-value launch), each checked
against torch's dense product. Prints one line per way and the kernels used.

    python scripts/device/check_byvalue.py
"""
from __future__ import annotations

import torch

import cutlass_sparse as cs
from cutlass_sparse.api import eager, eager_keys


def rel_err(got, want) -> float:
    return float((got.float() - want).norm() / want.norm())


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    w = cs.prune_2to4(torch.randn(4096, 4096, device="cuda", generator=g).half() * 0.02)
    sw = cs.compress(w)
    wf = w.float()
    worst: dict[str, float] = {}

    def check(way, x, y):
        worst[way] = max(worst.get(way, 0.0), rel_err(y, x.float() @ wf.T))

    # N of one range whose D is row-major (N a multiple of 8): one kernel for all of them
    xs = {n: torch.randn(n, 4096, device="cuda", generator=g).half() for n in (8, 16)}
    check("first call (setup's buffer)", xs[16], cs.linear(xs[16], sw))
    torch.cuda.synchronize()   # the host copy of Params lands
    for _ in range(3):          # new pointers each time: by value
        x = torch.randn(16, 4096, device="cuda", generator=g).half()
        check("new pointers (by value)", x, cs.linear(x, sw))
    check("new N (built ahead)", xs[8], cs.linear(xs[8], sw))   # the range built ahead on the first call
    torch.cuda.synchronize()
    for n in (8, 16):
        x = torch.randn(n, 4096, device="cuda", generator=g).half()
        check("new N, new pointers (by value)", x, cs.linear(x, sw))
    plan = eager.lookup(eager_keys.linear_key(xs[16], sw, eager_options())[0]).plan
    print("kernel", plan.config.name, "host Params kept:", len(plan._host_params))

    static_x = torch.randn(16, 4096, device="cuda", generator=g).half()
    static_y = torch.empty(4096, 16, device="cuda", dtype=torch.float16)
    cs.matmul(sw, static_x.T, out=static_y)   # warm: the first call of this pointer set
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            cs.matmul(sw, static_x.T, out=static_y)
    for _ in range(3):
        static_x.copy_(torch.randn(16, 4096, device="cuda", generator=g).half())
        graph.replay()
        torch.cuda.synchronize()
        check("graph replay", static_x, static_y.T)
    for way, err in worst.items():
        print(f"{way:34s} worst rel err {err:.2e}  {'ok' if err < 1e-2 else 'WRONG'}")
    print("all ok" if all(err < 1e-2 for err in worst.values()) else "SOME WRONG")


def eager_options():
    from cutlass_sparse.api import matmul as api_matmul

    return api_matmul._options({})


if __name__ == "__main__":
    main()
