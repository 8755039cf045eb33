#!/usr/bin/env python3
"""Randomized stress test of the library's caches across streams, threads and CUDA graph
captures (GPU machine, sm_90): the eager plan cache (api/eager.py), each plan's launches
(Sm90Plan.ready), host Params copies (launch/sm90_params.py), kept bias vectors
(eager.Entry.bias_vector), converted metadata (SparseMatrix.metadata_for), staging
buffers (launch/staging.py) and torch's allocator (launch/torch_memory.py). A busy stream
(torch.cuda._sleep) makes the work queued behind it late, so a missing wait shows as a
wrong result. Every result is checked against a float32 torch reference (relative error
below 2e-2), each scenario on fresh weights so that their first-use paths run:

1. streams: two or three torch streams, each made busy first, take a random sequence of
   eager cs.matmul / cs.linear / cs.plan calls (with and without out= and a bias; shared,
   fresh and in-place-changed biases; N new to their range), never synchronized with each
   other; checked after one synchronize.
2. threads: the same from two Python threads at once, each on streams of its own, on
   shared weights, inputs and plans; then one thread captures a CUDA graph (torch's
   default global capture mode) while the other runs eager calls, new N of warm ranges
   included.
3. graphs: a sequence of calls captured after one eager warm-up per call on other buffers;
   eager calls on the same buffers before the replay, calls that churn the caches (other
   biases, new N, new outputs, new plans; one variant also drops the library's plans),
   NaN-filled allocations taking freed memory, then the replays, checked (and the filled
   memory checked untouched). A variant whose capture is a fresh 4096^3 weight's first use.
4. metadata: a fresh 4096^3 weight (its tile-K-64 kernel converts the metadata on first
   use) used first on a busy stream and at once on others; the same from two threads;
   and a capture on another stream while the first use's conversion is still queued.

Only problems whose kernels the carried cache holds (tests/gpu_cases.py: linear_problems,
vector_bias_problems, eager_problems, pdl_problems, graph_problems, 4096^3); a preflight
says whether the cache has every one (a missing one would compile, and run on a stand-in).
Run from the repository root:

    python3 scripts/device/stress_streams.py [--seed 7] [--only 1,3] [--quick] [--no-preflight]

Prints a line per scenario and `stress: N wrong of M checked` (exceptions count as
wrong); exit status 1 if any result was wrong.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import random
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cutlass_sparse.describe.selection import n_range  # noqa: E402

TOLERANCE = 2e-2
CYCLES_PER_MS = 1.4e6   # torch.cuda._sleep cycles per millisecond, as scripts/bench_eager.py's spin
SHOW = 12               # wrong results printed per scenario


def span(first: int, last: int, step: int = 1) -> tuple[int, ...]:
    return tuple(range(first, last + 1, step))


# name -> (M, K, dtype): weights of problems the carried kernel cache has (tests/gpu_cases.py)
WEIGHTS = {
    "a": (192, 256, "f16"),     # linear_problems: 192x40x256 silu
    "b": (256, 512, "f16"),     # linear_problems 256x{7,10,12,1}x512; vector_bias 256x64x512; pdl 256x{16,32,64}x512
    "h": (256, 512, "bf16"),    # linear_problems: 256x7x512 bf16 relu
    "c": (200, 256, "f16"),     # vector_bias_problems: 200x64x256 relu
    "d": (128, 128, "f16"),     # scripts/bench_eager.py HOST_SHAPE: matmul row/col x, linear
    "g": (512, 256, "f16"),     # pdl_problems: 512x{16,64}x256 relu
    "e": (256, 4096, "f16"),    # graph_problems: 256x255x4096 (odd N: x staged, D padded)
    "f": (4096, 4096, "f16"),   # 4096^3 (tile K 64: metadata converted on first use); linear 1..512 tokens
}


@dataclasses.dataclass(frozen=True)
class Op:
    """One kind of call. ns: N (tokens for cs.linear) whose kernels are in the carried cache
    (every one checked against it on the CPU machine; the preflight checks a few per range);
    bias_ns: those that may also take a bias."""

    name: str
    weight: str
    api: str                  # "linear": cs.linear(x [N, K], sw); "matmul": cs.matmul(sw, x [K, N]); "plan": cs.plan
    activations: tuple
    layout: str               # x [K, N] of matmul / plan: "row" or "col" (linear: x [tokens, K] contiguous)
    ns: tuple
    bias_ns: tuple = ()
    out: bool = False         # out= may be passed (an [M, N] row-major tensor)
    share: float = 1.0        # how often it is drawn


DECODE = span(1, 7) + span(9, 15)   # token counts below 16 not in whole 16-byte rows: cs.linear's D column-major
OPS = (
    Op("linear-a", "a", "linear", ("silu",), "row", span(1, 16) + span(24, 80, 8), span(24, 80, 8)),
    Op("linear-b-relu", "b", "linear", ("relu",), "row", DECODE, DECODE),
    Op("linear-b", "b", "linear", ("identity",), "row", span(1, 80), span(1, 16)),
    Op("linear-h", "h", "linear", ("relu",), "row", DECODE, DECODE),
    Op("linear-d", "d", "linear", ("identity",), "row", span(1, 80)),
    Op("linear-f", "f", "linear", ("identity",), "row", span(1, 512), share=0.4),
    Op("matmul-b-relu", "b", "matmul", ("relu",), "row", span(1, 80), span(17, 80), out=True),
    Op("matmul-b", "b", "matmul", ("identity",), "row", span(1, 80), out=True),
    Op("matmul-b-col", "b", "matmul", ("identity",), "col", span(1, 80), out=True),
    Op("matmul-c", "c", "matmul", ("relu",), "row", span(1, 80), span(17, 80), out=True),
    Op("matmul-d", "d", "matmul", ("identity",), "row", span(1, 80), out=True),
    Op("matmul-d-col", "d", "matmul", ("identity",), "col", span(1, 80), out=True),
    Op("matmul-g", "g", "matmul", ("relu",), "row", span(1, 80), out=True),
    Op("matmul-e", "e", "matmul", ("identity",), "row", span(1, 512), out=True, share=0.7),
    Op("matmul-f", "f", "matmul", ("identity",), "row", (1024, 2048, 4096), out=True, share=0.3),
    Op("plan-b", "b", "plan", ("identity", "relu"), "row", span(1, 80), span(17, 80), out=True),
    Op("plan-c", "c", "plan", ("relu",), "row", span(1, 80), span(17, 80), out=True),
    Op("plan-d", "d", "plan", ("identity",), "col", span(1, 80), out=True),
    Op("plan-e", "e", "plan", ("identity",), "row", span(1, 512), out=True, share=0.4),
)
OP = {op.name: op for op in OPS}

# Scenario 3's captured sequence: (op, N, activation, which shared bias or None, out=)
CAPTURED = (
    ("matmul-b-relu", 48, "relu", None, True),
    ("linear-a", 40, "silu", 0, False),       # bias vector, row-major D
    ("linear-b-relu", 7, "relu", 0, False),   # bias vector, column-major D
    ("plan-b", 64, "relu", 1, True),          # the plan's folded C
    ("plan-d", 32, "identity", None, False),
    ("matmul-e", 255, "identity", None, True),   # x staged, D copied into out
    ("matmul-c", 64, "relu", 0, False),       # cs.matmul's row bias as a vector
    ("linear-b", 12, "identity", None, False),
    ("matmul-d-col", 24, "identity", None, False),
    ("linear-h", 10, "relu", 0, False),       # bf16
)


def in_part(n: int, part: int | None) -> bool:
    """Scenarios 1 and 2 draw N from alternate ranges (n_range 16, 64, 256... against 32,
    128, 512...), so that each meets ranges new to the process (their first call, the
    build-ahead) as well as new N of a range."""
    return part is None or (n_range(n).bit_length() % 2 == 1) == (part == 0)


def part_ns(ns, part):
    return [n for n in ns if in_part(n, part)] or list(ns)


# ----------------------------------------------------------------------------------------
# What the carried cache must hold (no GPU needed): each op's problems, as
# tests/gpu_cases.py plans the problems the cache was compiled for.

def op_problems(op: Op, n: int, activation: str, bias: bool, out: bool, sm_count: int = 132):
    """The Problems one call asks of the sm90 family (a plan: its direct launch and the
    cs.matmul its call with out= runs where it is not direct)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import gpu_cases
    from cutlass_sparse.describe.problem import MAX_ALIGN, Operand, Problem, folded_c

    m, k, dtype = WEIGHTS[op.weight]
    if op.api == "linear":   # D column-major for decode token counts; else row-major, which torch allocates
        found = [gpu_cases.linear_problem(m, n, k, activation, sm_count, dtype)]
        if found[0].out is None:
            found.append(found[0].with_(out=Operand("row", n, MAX_ALIGN)))
        return [p.with_bias() if bias else p for p in found]

    def problem(with_out):
        return Problem.contiguous("sm90", m, n, k, element=dtype, layout_b=op.layout, activation=activation,
                                  sm_count=sm_count, out_layout="row" if with_out else None)

    if op.api == "matmul":
        p = problem(out)
        return [p.with_bias() if bias else p]
    found = [problem(False)] + ([problem(True)] if out else [])
    if bias:   # a plan folds its bias into C once (beta 1)
        found = [p.with_(c=folded_c("row" if p.out is None else p.out.layout, m, n),
                         epilogue=dataclasses.replace(p.epilogue, beta=1.0)) for p in found]
    return found


def all_problems(sm_count: int = 132, every_n: bool = False):
    """(label, Problem) of every call this script may make: every N (every_n), else the
    first and last N of each class (range, whole 16-byte rows, N = 1), which run one kernel."""
    for op in OPS:
        for bias_set, bias in ((op.ns, False), (op.bias_ns, True)):
            classes: dict[tuple, list[int]] = {}
            for n in bias_set:
                classes.setdefault((n_range(n), n % 8 == 0, n == 1), []).append(n)
            ns = sorted(set(bias_set if every_n else [v for c in classes.values() for v in (c[0], c[-1])]))
            for n in ns:
                for activation in op.activations:
                    for out in ((False, True) if op.out else (False,)):
                        label = f"{op.name} N={n} {activation}{' bias' if bias else ''}{' out=' if out else ''}"
                        for p in op_problems(op, n, activation, bias, out, sm_count):
                            yield label, p


def missing_kernels(sm_count: int = 132, every_n: bool = False) -> list[str]:
    """Labels of calls whose kernel the kernel cache lacks (they would compile)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import gpu_cases
    from cutlass_sparse.build import kernels

    named = list(all_problems(sm_count, every_n))
    configs = gpu_cases.planned_configs([p for _, p in named])
    if all(kernels.cached(c, arch) for c, arch in configs):
        return []
    missing = []
    for label, p in named:   # name them (one planning each)
        if not all(kernels.cached(c, arch) for c, arch in gpu_cases.planned_configs([p])):
            missing.append(label)
    return missing


# ----------------------------------------------------------------------------------------
# Checks

class Checks:
    """Results waiting for a check (after a synchronize), and the counts."""

    def __init__(self, name: str):
        self.name = name
        self.pending: list = []
        self.checked = self.wrong = self.errors = self.shown = 0
        self.lock = threading.Lock()

    def add(self, label: str, y, ref) -> None:
        """ref: a callable giving the float32 reference (run after the synchronize)."""
        with self.lock:
            self.pending.append((label, y, ref))

    def flag(self, label: str, ok: bool, detail: str = "") -> None:
        with self.lock:
            self.checked += 1
            if not ok:
                self.wrong += 1
                self._show(f"  WRONG {label} {detail}")

    def error(self, label: str, text: str) -> None:
        with self.lock:
            self.checked += 1
            self.wrong += 1
            self.errors += 1
        print(f"  EXCEPTION in {label}:\n{text}", flush=True)

    def _show(self, line: str) -> None:
        if self.shown < SHOW:
            print(line, flush=True)
        elif self.shown == SHOW:
            print("  (more wrong results not shown)", flush=True)
        self.shown += 1

    def run(self, env) -> None:
        """Synchronize, then check every pending result."""
        env.torch.cuda.synchronize()
        with self.lock:
            items, self.pending = self.pending, []
        for label, y, ref in items:
            try:
                err = relative_error(env, y, ref())
                detail = f"rel err {err:.3g}"
                ok = err < TOLERANCE   # NaN is not
            except Exception as exc:   # noqa: BLE001 - a shape or dtype surprise is a wrong result
                ok, detail = False, f"check raised {type(exc).__name__}: {exc}"
            self.flag(label, ok, detail)


def relative_error(env, y, ref) -> float:
    torch = env.torch
    if not isinstance(y, torch.Tensor):
        y = torch.as_tensor(y, device="cuda")
    return float((y.float() - ref).norm() / ref.norm())


def reference(env, api: str, w, x, bias, activation: str):
    """float32 torch: act(x @ w.T + bias) for cs.linear, act(w @ x + bias[:, None]) else."""
    torch = env.torch
    wf = w.float()
    if api == "linear":
        r = x.float() @ wf.T
        if bias is not None:
            r = r + bias.float()
    else:
        r = wf @ x.float()
        if bias is not None:
            r = r + bias.float()[:, None]
    if activation == "relu":
        return torch.relu(r)
    if activation == "silu":
        return torch.nn.functional.silu(r)
    assert activation == "identity", activation
    return r


def busy(torch, ms: float) -> None:
    """Keep the current stream busy for about `ms`."""
    torch.cuda._sleep(int(ms * CYCLES_PER_MS))


def guarded(env, checks: Checks, label: str, fn, *args) -> None:
    """fn(*args); an exception is printed with its traceback and counted as a wrong result,
    and the scenario goes on with its next part."""
    try:
        fn(*args)
    except Exception:   # noqa: BLE001 - reported and counted
        checks.error(label, traceback.format_exc())
        try:
            env.torch.cuda.synchronize()
        except Exception:   # noqa: BLE001 - a sticky CUDA error: later parts will say so too
            pass


# ----------------------------------------------------------------------------------------
# Weights, inputs and calls

class Env:
    def __init__(self, torch, cs, cupy, seed: int):
        self.torch, self.cs, self.cupy, self.seed = torch, cs, cupy, seed
        self.dtypes = {"f16": torch.float16, "bf16": torch.bfloat16}


class World:
    """Fresh weights (the dense pruned one and its compressed form), shared biases and
    shared inputs (made on the default stream and synchronized: every stream may read
    them), and the plans made so far (shared by threads)."""

    def __init__(self, env, rng: random.Random, names, seed: int, part: int | None = None, shared: bool = True):
        torch, cs = env.torch, env.cs
        self.env = env
        self.gen = torch.Generator(device="cuda").manual_seed(seed)
        self.w, self.sw, self.biases = {}, {}, {}
        for name in names:
            m, k, dtype = WEIGHTS[name]
            w = cs.prune_2to4(torch.randn(m, k, device="cuda", generator=self.gen).to(env.dtypes[dtype]))
            self.w[name], self.sw[name] = w, cs.compress(w)
            self.biases[name] = [self.new_bias(name, self.gen) for _ in range(3)]
        self.shared: dict[str, list] = {}
        if shared:
            for op in OPS:
                if op.weight in self.w:
                    ns = part_ns(op.ns, part)
                    self.shared[op.name] = [(n, self.new_x(op, n, self.gen)) for n in rng.sample(ns, min(2, len(ns)))]
        self.plans: dict[tuple, tuple] = {}
        self.plan_lock = threading.Lock()
        torch.cuda.synchronize()

    def dtype(self, weight: str):
        return self.env.dtypes[WEIGHTS[weight][2]]

    def new_bias(self, weight: str, gen):
        """A bias [M] on the current stream."""
        return self.env.torch.randn(WEIGHTS[weight][0], device="cuda", generator=gen, dtype=self.dtype(weight))

    def new_x(self, op: Op, n: int, gen):
        """x on the current stream: [N, K] for cs.linear, else [K, N] in the op's layout."""
        torch = self.env.torch
        _, k, _ = WEIGHTS[op.weight]
        dtype = self.dtype(op.weight)
        if op.api == "linear":
            return torch.randn(n, k, device="cuda", generator=gen, dtype=dtype)
        if op.layout == "row":
            return torch.randn(k, n, device="cuda", generator=gen, dtype=dtype)
        return torch.randn(n, k, device="cuda", generator=gen, dtype=dtype).T

    def new_out(self, op: Op, n: int):
        """out [M, N] on the current stream, NaN where the call writes nothing."""
        return self.env.torch.full((WEIGHTS[op.weight][0], n), float("nan"), device="cuda", dtype=self.dtype(op.weight))

    def plan(self, op: Op, n: int, activation: str, bias, x):
        """The plan for (op, N, activation, bias): made on the current stream from x on its
        first use, then shared (by every stream and thread)."""
        key = (op.name, n, activation, None if bias is None else id(bias))
        with self.plan_lock:
            found = self.plans.get(key)
            if found is None:
                options = {"activation": activation} if activation != "identity" else {}
                if bias is not None:
                    options["bias"] = bias
                found = self.plans[key] = (self.env.cs.plan(self.sw[op.weight], x, **options), bias)
        return found[0]

    def call(self, op: Op, x, activation: str, bias, out, explicit: bool = True):
        """One call as a user writes it (activation named or left at its default)."""
        cs, sw = self.env.cs, self.sw[op.weight]
        if op.api == "plan":
            plan = self.plan(op, x.shape[1], activation, bias, x)
            return plan(x) if out is None else plan(x, out=out)
        kwargs = {}
        if activation != "identity" or explicit:
            kwargs["activation"] = activation
        if bias is not None:
            kwargs["bias"] = bias
        if op.api == "linear":
            return cs.linear(x, sw, **kwargs)
        if out is not None:
            kwargs["out"] = out
        return cs.matmul(sw, x, **kwargs)

    def ref(self, op: Op, x, bias, activation: str):
        return functools.partial(reference, self.env, "linear" if op.api == "linear" else "matmul",
                                 self.w[op.weight], x, bias, activation)


def draw_op(rng: random.Random, names) -> Op:
    ops = [op for op in OPS if op.weight in names]
    return rng.choices(ops, weights=[op.share for op in ops])[0]


def random_call(world: World, rng: random.Random, gen, part, checks: Checks, where: str) -> None:
    """One random call on the current stream, its result queued for the check."""
    op = draw_op(rng, world.w)
    activation = rng.choice(op.activations)
    shared = world.shared.get(op.name)
    if shared and rng.random() < 0.35:
        n, x = rng.choice(shared)
        source = "shared x"
    else:
        n = rng.choice(part_ns(op.ns, part))
        x, source = world.new_x(op, n, gen), "fresh x"
    bias, bias_kind = None, ""
    if n in op.bias_ns and rng.random() < 0.5:
        r = rng.random()
        if r < 0.55 or op.api == "plan" and r >= 0.8:
            bias, bias_kind = rng.choice(world.biases[op.weight]), "shared bias"
        elif r < 0.8:
            bias, bias_kind = world.new_bias(op.weight, gen), "fresh bias"
        else:
            bias_kind = "in-place bias"
    out = world.new_out(op, n) if op.out and rng.random() < 0.4 else None
    explicit = rng.random() < 0.5
    label = f"{where} {op.name} N={n} {activation} {source} {bias_kind} {'out=' if out is not None else ''}"
    if bias_kind == "in-place bias":   # a bias of this stream's own, changed in place between two calls
        bias = world.new_bias(op.weight, gen)
        for step in range(2):
            y = world.call(op, x, activation, bias, out, explicit)
            y = y.clone() if out is not None else y   # the second call writes out again
            used = bias.clone()                       # as the call read it (this stream's order)
            checks.add(f"{label} call {step + 1}", y, world.ref(op, x, used, activation))
            bias.mul_(-0.5).add_(0.25)
        return
    y = world.call(op, x, activation, bias, out, explicit)
    checks.add(label, y, world.ref(op, x, bias, activation))


# ----------------------------------------------------------------------------------------
# Scenario 1: streams

def scenario_streams(env, checks: Checks, rounds: int, calls: int) -> None:
    for r in range(rounds):
        guarded(env, checks, f"streams round {r}", streams_round, env, checks, r, calls)
        print(f"  round {r}: {calls} calls; {checks.wrong} wrong of {checks.checked} so far", flush=True)


def streams_round(env, checks: Checks, r: int, calls: int) -> None:
    torch = env.torch
    seed = env.seed * 1000 + 100 + r
    rng = random.Random(seed)
    world = World(env, rng, WEIGHTS, seed, part=0)
    streams = [torch.cuda.Stream() for _ in range(rng.choice((2, 3)))]
    calls_on_streams(world, streams, rng, world.gen, 0, checks, calls, f"round {r}", 25)
    checks.run(env)


def calls_on_streams(world, streams, rng, gen, part: int, checks: Checks, calls: int, label: str,
                     first_busy_ms: float) -> None:
    """Each stream made busy, then random calls spread over them, now and then a stream
    made busy again; nothing synchronized between them."""
    torch = world.env.torch
    for s in streams:
        with torch.cuda.stream(s):
            busy(torch, rng.uniform(5, first_busy_ms))
    for _ in range(calls):
        i = rng.randrange(len(streams))
        with torch.cuda.stream(streams[i]):
            if rng.random() < 0.08:
                busy(torch, rng.uniform(0.5, 4))
            random_call(world, rng, gen, part, checks, f"{label} stream {i} of {len(streams)}:")


# ----------------------------------------------------------------------------------------
# Scenario 2: threads

def scenario_threads(env, checks: Checks, rounds: int, calls: int) -> None:
    for r in range(rounds):
        guarded(env, checks, f"threads round {r}", threads_round, env, checks, r, calls)
        print(f"  round {r}: 2 threads x 2 streams, {calls} calls each; {checks.wrong} wrong of {checks.checked} "
              "so far", flush=True)
    guarded(env, checks, "capture beside eager", capture_beside_eager, env, checks)
    print(f"  capture in one thread, eager calls in another: {checks.wrong} wrong of {checks.checked} so far",
          flush=True)


def threads_round(env, checks: Checks, r: int, calls: int) -> None:
    torch = env.torch
    seed = env.seed * 1000 + 200 + r
    world = World(env, random.Random(seed), WEIGHTS, seed, part=1)
    barrier = threading.Barrier(2, timeout=120)

    def body(t: int) -> None:
        rng = random.Random(seed * 10 + t)
        gen = torch.Generator(device="cuda").manual_seed(seed * 10 + t)
        streams = [torch.cuda.Stream() for _ in range(2)]
        barrier.wait()
        calls_on_streams(world, streams, rng, gen, 1, checks, calls, f"round {r} thread {t}", 20)

    run_threads(env, checks, [functools.partial(body, t) for t in range(2)], f"threads round {r}")
    checks.run(env)


def run_threads(env, checks: Checks, bodies, label: str) -> None:
    """Run each body in a thread of its own; an exception is reported and counted."""
    errors: list[tuple[int, str]] = []

    def catching(i, body):
        try:
            body()
        except Exception:   # noqa: BLE001 - reported, the scenario goes on
            errors.append((i, traceback.format_exc()))

    threads = [threading.Thread(target=catching, args=(i, body)) for i, body in enumerate(bodies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, text in errors:
        checks.error(f"{label} thread {i}", text)


def capture_beside_eager(env, checks: Checks) -> None:
    """Thread A captures scenario 3's sequence (global capture mode) while thread B runs
    eager cs.matmul calls with out= on ranges warmed before: new N (Params built ahead,
    found by event queries), then repeats, until A's capture ends. B allocates nothing
    itself, so a failed capture is the library's doing. Then the replay, B's results and
    the replay's are checked."""
    torch = env.torch
    seed = env.seed * 1000 + 250
    world = World(env, random.Random(seed), ("a", "b", "c", "d", "e", "g", "h"), seed, shared=False)
    # B's first calls below go the full path and build their ranges' Params ahead now (not
    # Params of earlier scenarios' build-ahead, which later ones may have evicted: B would
    # then build and allocate during A's capture, which a global capture forbids)
    forget_caches()
    eager_calls = []
    stream_b, stream_a = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(stream_b):   # B's ranges: the first N runs now (the range built ahead)
        for name, first, later in (("matmul-b", 40, (48, 56, 64)), ("matmul-b", 72, (80,)),
                                   ("matmul-d", 8, (16,)), ("matmul-g", 24, (32,))):
            op = OP[name]
            for n in (first, *later):
                eager_calls.append((op, n, world.new_x(op, n, world.gen), world.new_out(op, n)))
            op, n, x, out = eager_calls[-1 - len(later)]
            world.call(op, x, op.activations[0], None, out)   # B's own buffers: its repeats find their Params
    capture = CaptureSet(world, stream_a)
    capture.warm(checks, "2b warm-up")
    torch.cuda.synchronize()
    capturing, done = threading.Event(), threading.Event()
    barrier = threading.Barrier(2, timeout=120)
    graph = torch.cuda.CUDAGraph()
    passes = [0]

    def thread_a():
        barrier.wait()
        try:
            with torch.cuda.graph(graph, stream=stream_a):
                capturing.set()
                for i in range(len(CAPTURED)):
                    capture.captured[i] = capture.run(i, capture.static[i])
                    time.sleep(0.001)   # B's calls run meanwhile
        finally:
            capturing.set()
            done.set()

    def thread_b():
        barrier.wait()
        capturing.wait(timeout=60)
        with torch.cuda.stream(stream_b):
            while passes[0] < 200 and (passes[0] == 0 or not done.is_set()):
                for op, n, x, out in eager_calls:
                    world.call(op, x, op.activations[0], None, out)
                passes[0] += 1

    run_threads(env, checks, [thread_a, thread_b], "2b (capture beside eager)")
    print(f"  2b: thread B made {passes[0]} passes of {len(eager_calls)} calls during thread A's capture", flush=True)
    for op, n, x, out in eager_calls:
        checks.add(f"2b eager beside a capture: {op.name} N={n}", out, world.ref(op, x, None, op.activations[0]))
    checks.run(env)
    if all(y is not None for y in capture.captured):
        capture.replay(graph, stream_a, checks, "2b replay", junk=False)
    graph = None   # destroyed (a closure reads the name, so not del)
    gc.collect()


# ----------------------------------------------------------------------------------------
# Scenario 3: graphs

class CaptureSet:
    """CAPTURED's calls on fresh weights: static buffers (captured), warm-up buffers (the
    eager first calls, same shapes), the plans (made at warm-up)."""

    def __init__(self, world: World, stream):
        self.world, self.stream = world, stream
        self.specs = [(OP[name], n, act, None if b is None else world.biases[OP[name].weight][b], out)
                      for name, n, act, b, out in CAPTURED]
        self.static = [self.buffers(i) for i in range(len(self.specs))]
        self.warmup = [self.buffers(i) for i in range(len(self.specs))]
        self.captured = [None] * len(self.specs)
        world.env.torch.cuda.synchronize()

    def buffers(self, i: int):
        op, n, _, _, out = self.specs[i]
        return self.world.new_x(op, n, self.world.gen), self.world.new_out(op, n) if out else None

    def run(self, i: int, buffers, bias="same"):
        op, _, act, spec_bias, _ = self.specs[i]
        x, out = buffers
        return self.world.call(op, x, act, spec_bias if bias == "same" else bias, out)

    def ref(self, i: int, buffers, bias="same"):
        op, _, act, spec_bias, _ = self.specs[i]
        return self.world.ref(op, buffers[0], spec_bias if bias == "same" else bias, act)

    def label(self, i: int) -> str:
        op, n, act, bias, out = self.specs[i]
        return f"{op.name} N={n} {act}{' bias' if bias is not None else ''}{' out=' if out else ''}"

    def warm(self, checks: Checks, what: str, stream=None) -> None:
        """Each call twice on the warm-up buffers (same biases: vectors kept for the stream)."""
        torch = self.world.env.torch
        with torch.cuda.stream(stream or self.stream):
            for i in range(len(self.specs)):
                for _ in range(2):
                    y = self.run(i, self.warmup[i])
                checks.add(f"{what}: {self.label(i)}", y, self.ref(i, self.warmup[i]))

    def eager_same_buffers(self, checks: Checks, what: str, stream) -> None:
        torch = self.world.env.torch
        with torch.cuda.stream(stream):
            for i in range(len(self.specs)):
                y = self.run(i, self.static[i]).clone()   # out is the graph's too: kept as it is now
                checks.add(f"{what}: {self.label(i)}", y, self.ref(i, self.static[i]))

    def churn(self, checks: Checks, what: str, rng: random.Random, streams) -> None:
        """Calls that replace kept bias vectors (other biases), meet new N (new entries,
        build-ahead), allocate new outputs, make new plans."""
        torch, world = self.world.env.torch, self.world
        for i, (op, n, act, bias, out) in enumerate(self.specs):
            with torch.cuda.stream(rng.choice(streams)):
                if bias is not None:   # another bias with the static x: the kept vector replaced
                    other = rng.choice(world.biases[op.weight][1:] + [world.new_bias(op.weight, world.gen)])
                    x = self.static[i][0]
                    y = world.call(op, x, act, other, None if not out else world.new_out(op, n))
                    checks.add(f"{what}: {self.label(i)} other bias", y, world.ref(op, x, other, act))
                for _ in range(2):   # new N of the op's ranges, fresh x and out
                    m = rng.choice(op.bias_ns if bias is not None else op.ns)
                    x = world.new_x(op, m, world.gen)
                    o = world.new_out(op, m) if out and rng.random() < 0.5 else None
                    y = world.call(op, x, act, bias, o)
                    checks.add(f"{what}: {op.name} N={m} (new N)", y, world.ref(op, x, bias, act))

    def replay(self, graph, stream, checks: Checks, what: str, junk: bool = True) -> None:
        """NaN into the graph's outputs, memory taken by NaN-filled allocations, replay on
        `stream`, check the outputs (and that the allocations are untouched)."""
        torch = self.world.env.torch
        torch.cuda.synchronize()
        filled = fill_freed(self.world.env, [stream, torch.cuda.default_stream()]) if junk else None
        with torch.cuda.stream(stream):
            for y in self.captured:
                y.fill_(float("nan"))
            graph.replay()
        for i in range(len(self.specs)):
            checks.add(f"{what}: {self.label(i)}", self.captured[i], self.ref(i, self.static[i]))
        checks.run(self.world.env)
        if filled is not None:
            checks.flag(f"{what}: allocations made after the capture untouched by the replay",
                        untouched(self.world.env, filled))


def fill_freed(env, streams):
    """NaN-filled torch tensors (on each stream) and 0xA5-filled CuPy blocks of many sizes:
    they take memory the pools hold freed, which a graph must not still use."""
    torch, cupy = env.torch, env.cupy
    tensors, blocks = [], []
    for s in streams:
        with torch.cuda.stream(s):
            for n in (64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20):
                tensors += [torch.full((n,), float("nan"), device="cuda") for _ in range(3)]
    for nbytes in (512, 2048, 8192, 65536, 1 << 20, 4 << 20):
        for _ in range(3):
            block = cupy.empty(nbytes, dtype=cupy.uint8)
            cupy.cuda.runtime.memsetAsync(block.data.ptr, 0xA5, nbytes, cupy.cuda.get_current_stream().ptr)
            blocks.append(block)
    return tensors, blocks


def untouched(env, filled) -> bool:
    torch = env.torch
    torch.cuda.synchronize()
    tensors, blocks = filled
    return all(bool(t.isnan().all()) for t in tensors) and \
        all(bool((torch.as_tensor(b, device="cuda") == 0xA5).all()) for b in blocks)


def forget_caches() -> None:
    """Drop every plan the library keeps, as its bounded caches do when they fill (as
    tests/test_gpu_graphs.py's _forget_plans)."""
    from cutlass_sparse.api import eager
    from cutlass_sparse.plan import plans

    eager.clear()
    plans.clear()
    gc.collect()


def scenario_graphs(env, checks: Checks, variants) -> None:
    for v, variant in enumerate(variants):
        guarded(env, checks, f"graphs variant {variant!r}", graphs_variant, env, checks, v, variant)
        print(f"  variant {variant!r}: {checks.wrong} wrong of {checks.checked} so far", flush=True)
    guarded(env, checks, "first-use capture", first_use_capture, env, checks)
    print(f"  capture as a fresh 4096^3 weight's first use: {checks.wrong} wrong of {checks.checked} so far",
          flush=True)


def graphs_variant(env, checks: Checks, v: int, variant: str) -> None:
    """"same": the warm-up on the capture stream (kept bias vectors and staging buffers are
    that stream's); "side": on another stream, and the library's plans dropped before each replay."""
    torch = env.torch
    seed = env.seed * 1000 + 300 + v
    rng = random.Random(seed)
    world = World(env, rng, ("a", "b", "c", "d", "e", "h"), seed, shared=False)
    capture_stream, other = torch.cuda.Stream(), torch.cuda.Stream()
    capture = CaptureSet(world, capture_stream)
    capture.warm(checks, f"{variant} warm-up", capture_stream if variant == "same" else other)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        for i in range(len(CAPTURED)):
            capture.captured[i] = capture.run(i, capture.static[i])
    capture.eager_same_buffers(checks, f"{variant} eager, same buffers, before any replay", capture_stream)
    torch.cuda.synchronize()
    capture.eager_same_buffers(checks, f"{variant} eager, same buffers, other stream", other)
    capture.churn(checks, f"{variant} churn 1", rng, [capture_stream, capture_stream, other])
    if variant == "side":
        torch.cuda.synchronize()
        forget_caches()
    capture.replay(graph, capture_stream, checks, f"{variant} replay 1")
    capture.churn(checks, f"{variant} churn 2", rng, [capture_stream, other])
    capture.eager_same_buffers(checks, f"{variant} eager, same buffers, after replay 1", capture_stream)
    if variant == "side":
        torch.cuda.synchronize()
        forget_caches()
    capture.replay(graph, other, checks, f"{variant} replay 2 (on another stream)")
    del graph
    gc.collect()


def first_use_capture(env, checks: Checks) -> None:
    """A fresh 4096^3 weight's first use inside a capture (its conversion into the graph's
    own buffer), eager calls on it before the replay on other streams, replays."""
    torch, cs = env.torch, env.cs
    seed = env.seed * 1000 + 350
    world = World(env, random.Random(seed), ("f",), seed, shared=False)
    op = OP["matmul-f"]
    x, x_warm = (world.new_x(op, 4096, world.gen) for _ in range(2))
    x_2048 = world.new_x(op, 2048, world.gen)
    out, out_warm = world.new_out(op, 4096), world.new_out(op, 4096)
    warm = World(env, random.Random(seed + 1), ("f",), seed + 1, shared=False)   # the problem warm, not this weight
    capture_stream, other = torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(capture_stream):
        y = cs.matmul(warm.sw["f"], x_warm, out=out_warm)
        checks.add("4096^3 warm-up (another weight)", y, warm.ref(op, x_warm, None, "identity"))
    torch.cuda.synchronize()
    sw = world.sw["f"]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture_stream):
        cs.matmul(sw, x, out=out)
    checks.flag("4096^3: the capture's conversion is its own (the weight keeps none)", not sw.holds_metadata_for(64))
    with torch.cuda.stream(other):
        y = cs.matmul(sw, x)
        checks.add("4096^3 eager after the capture, other stream", y, world.ref(op, x, None, "identity"))
    with torch.cuda.stream(capture_stream):
        y = cs.matmul(sw, x_2048)
        checks.add("4096^3 eager N=2048 after the capture, capture stream", y, world.ref(op, x_2048, None, "identity"))
    for r, stream in enumerate((capture_stream, other)):
        torch.cuda.synchronize()
        filled = fill_freed(env, [stream])
        with torch.cuda.stream(stream):
            out.fill_(float("nan"))
            graph.replay()
        checks.add(f"4096^3 first-use capture: replay {r + 1}", out, world.ref(op, x, None, "identity"))
        checks.run(env)
        checks.flag(f"4096^3 first-use capture: allocations untouched by replay {r + 1}", untouched(env, filled))
        with torch.cuda.stream(other):
            y = cs.matmul(sw, x_2048, out=world.new_out(op, 2048))
            checks.add(f"4096^3 eager N=2048 out= after replay {r + 1}", y, world.ref(op, x_2048, None, "identity"))
    checks.run(env)
    del graph
    gc.collect()


# ----------------------------------------------------------------------------------------
# Scenario 4: metadata

class Metadata:
    """Inputs of the 4096^3 problem (and N = 2048, 1024; 256 tokens of cs.linear), their
    first calls made on another weight, and fresh weights."""

    def __init__(self, env, checks: Checks):
        torch, cs = env.torch, env.cs
        self.env, self.seed = env, env.seed * 1000 + 400
        self.op, self.lin = OP["matmul-f"], OP["linear-f"]
        base = World(env, random.Random(self.seed), ("f",), self.seed, shared=False)
        self.x = base.new_x(self.op, 4096, base.gen)
        self.x_2048 = base.new_x(self.op, 2048, base.gen)
        self.x_1024 = base.new_x(self.op, 1024, base.gen)
        self.tokens = base.new_x(self.lin, 256, base.gen)
        with torch.cuda.stream(torch.cuda.Stream()):   # the problems' first calls (they synchronize)
            for xi in (self.x, self.x_2048, self.x_1024):
                y = cs.matmul(base.sw["f"], xi)
                checks.add(f"metadata warm-up N={xi.shape[1]}", y, base.ref(self.op, xi, None, "identity"))
            y = cs.linear(self.tokens, base.sw["f"])
            checks.add("metadata warm-up linear 256 tokens", y, base.ref(self.lin, self.tokens, None, "identity"))
        checks.run(env)

    def fresh(self, r: int):
        world = World(self.env, random.Random(self.seed + 1 + r), ("f",), self.seed + 1 + r, shared=False)
        return world, world.sw["f"]


def scenario_metadata(env, checks: Checks, rounds: int) -> None:
    inputs = Metadata(env, checks)
    for r in range(rounds):
        guarded(env, checks, f"metadata round {r}", metadata_round, env, checks, inputs, r)
    for r in range(2):
        guarded(env, checks, f"metadata threads round {r}", metadata_threads, env, checks, inputs, rounds + r)
    guarded(env, checks, "capture beside a queued conversion", metadata_capture, env, checks, inputs, rounds + 2)


def metadata_round(env, checks: Checks, inputs: Metadata, r: int) -> None:
    """First use on a busy stream, then at once on two other streams (N = 4096 and 2048, one
    kernel), cs.linear (tile K 128: the stored metadata) and, every other round, a plan."""
    torch, cs = env.torch, env.cs
    op, lin, x, x_2048, x_1024 = inputs.op, inputs.lin, inputs.x, inputs.x_2048, inputs.x_1024
    world, sw = inputs.fresh(r)
    s, t, u = (torch.cuda.Stream() for _ in range(3))
    results = []
    with torch.cuda.stream(s):
        busy(torch, 30)   # the first call's conversion queues behind this
        results.append(("first call, busy stream", cs.matmul(sw, x), x, op))
    with torch.cuda.stream(t):   # not ordered after s
        results.append(("at once, another stream", cs.matmul(sw, x), x, op))
    with torch.cuda.stream(u):
        out = world.new_out(op, 2048)
        results.append(("at once, a third stream, N=2048 out=", cs.matmul(sw, x_2048, out=out), x_2048, op))
    with torch.cuda.stream(t):
        results.append(("linear 256 tokens (stored metadata)", cs.linear(inputs.tokens, sw), inputs.tokens, lin))
        if r % 2:
            plan = cs.plan(sw, x_1024)   # converts (waits) at plan time
            results.append(("a plan made at once, N=1024", plan(x_1024), x_1024, op))
    for label, y, xi, o in results:
        checks.add(f"round {r}: {label}", y, world.ref(o, xi, None, "identity"))
    checks.run(env)
    checks.flag(f"round {r}: the conversion kept once seen done",
                cs.matmul(sw, x) is not None and sw.holds_metadata_for(64))
    checks.run(env)


def metadata_threads(env, checks: Checks, inputs: Metadata, r: int) -> None:
    """Two threads, each on a busy stream of its own, use a fresh weight first at once."""
    torch, cs = env.torch, env.cs
    world, sw = inputs.fresh(r)
    barrier = threading.Barrier(2, timeout=120)

    def body(t: int):
        with torch.cuda.stream(torch.cuda.Stream()):
            busy(torch, 10 + 10 * t)
            barrier.wait()
            xi = inputs.x if t == 0 else inputs.x_2048
            y = cs.matmul(sw, xi)
            checks.add(f"threads round {r}: thread {t} first use", y, world.ref(inputs.op, xi, None, "identity"))

    run_threads(env, checks, [functools.partial(body, t) for t in range(2)], f"metadata threads round {r}")
    checks.run(env)


def metadata_capture(env, checks: Checks, inputs: Metadata, r: int) -> None:
    """A capture on another stream while the first use's conversion is still queued (no
    device synchronize before it: CUDAGraph.capture_begin, not torch.cuda.graph), an eager
    call on a third stream, the replay."""
    torch, cs = env.torch, env.cs
    op, x = inputs.op, inputs.x
    world, sw = inputs.fresh(r)
    s, t, u = (torch.cuda.Stream() for _ in range(3))
    out = world.new_out(op, 4096)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        busy(torch, 30)
        y_s = cs.matmul(sw, x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(t):
        graph.capture_begin()
        try:
            cs.matmul(sw, x, out=out)
        except BaseException:
            try:
                graph.capture_end()
            except Exception:   # noqa: BLE001 - the first error is the one to report
                pass
            raise
        graph.capture_end()
    with torch.cuda.stream(u):
        y_u = cs.matmul(sw, x)
    checks.add("capture beside a queued conversion: first call, busy stream", y_s, world.ref(op, x, None, "identity"))
    checks.add("capture beside a queued conversion: eager, third stream", y_u, world.ref(op, x, None, "identity"))
    checks.run(env)
    for replay in range(2):
        with torch.cuda.stream(t if replay == 0 else u):
            out.fill_(float("nan"))
            graph.replay()
        checks.add(f"capture beside a queued conversion: replay {replay + 1}", out, world.ref(op, x, None, "identity"))
        checks.run(env)
    del graph
    gc.collect()


# ----------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--only", default="1,2,3,4", help="scenarios to run, e.g. 1,3")
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--no-preflight", action="store_true", help="skip the kernel cache check")
    args = parser.parse_args()

    import cupy
    import torch

    import cutlass_sparse as cs
    from cutlass_sparse.launch import device

    start = time.perf_counter()
    name, capability = device.identity(0)
    arch, sm_count = device.facts(0)
    print(f"{name} ({arch}, {sm_count} SMs), torch {torch.__version__}, cupy {cupy.__version__}, seed {args.seed}",
          flush=True)
    if capability != "90":
        print("needs an sm_90 GPU")
        return 1
    if not args.no_preflight:
        t0 = time.perf_counter()
        try:
            missing = missing_kernels(sm_count)
            print(f"preflight: {'every kernel in the cache' if not missing else f'{len(missing)} calls would compile'}"
                  f" ({time.perf_counter() - t0:.1f} s)", flush=True)
            for label in missing[:20]:
                print(f"  not cached: {label}")
        except Exception:   # noqa: BLE001 - only a warning: the scenarios run anyway
            print(f"preflight failed (scenarios run anyway):\n{traceback.format_exc()}", flush=True)
    env = Env(torch, cs, cupy, args.seed)
    quick = args.quick
    scenarios = {
        1: ("streams", lambda c: scenario_streams(env, c, rounds=2 if quick else 4, calls=60 if quick else 90)),
        2: ("threads", lambda c: scenario_threads(env, c, rounds=1 if quick else 3, calls=40 if quick else 60)),
        3: ("graphs", lambda c: scenario_graphs(env, c, ("same",) if quick else ("same", "side"))),
        4: ("metadata", lambda c: scenario_metadata(env, c, rounds=2 if quick else 4)),
    }
    wanted = [int(s) for s in args.only.split(",") if s.strip()]
    total_wrong = total_checked = 0
    for number in wanted:
        label, run = scenarios[number]
        checks = Checks(label)
        t0 = time.perf_counter()
        print(f"scenario {number} ({label}):", flush=True)
        try:
            run(checks)
        except Exception:   # noqa: BLE001 - reported and counted, the next scenario runs
            checks.error(f"scenario {number}", traceback.format_exc())
        try:
            checks.run(env)   # whatever was queued before an exception
        except Exception:   # noqa: BLE001
            checks.error(f"scenario {number}'s checks", traceback.format_exc())
        print(f"scenario {number} ({label}): {checks.wrong} wrong of {checks.checked} checked "
              f"({checks.errors} exceptions), {time.perf_counter() - t0:.1f} s", flush=True)
        total_wrong += checks.wrong
        total_checked += checks.checked
    print(f"stress: {total_wrong} wrong of {total_checked} checked ({time.perf_counter() - start:.1f} s)", flush=True)
    return 1 if total_wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
