"""The profiler's timing loop: time the catalog's candidates for a problem on the GPU
(with the stream-K twin of a tile that has one, where its scheduler would split the last wave),
check each against the dense answer, and record the winner (plan.records).

Profiling never starts unless asked (cs.tune, matmul(autotune=True) on a miss,
force_profile=True, the CLI's --profile, warm-up's --tune); a recorded winner is used by
every later call with that signature, in any process that opens the same cache.

Timing: the candidates' kernels are compiled first (in parallel worker processes), then
each runs one checked call on the same operands (those that need a workspace share one);
those that pass are timed kernel-only
(20 calls queued behind a spin kernel, median of 7), taking turns (reference.kernel_medians_ms):
timed one after another in blocks, a long problem's later candidates would run at a hotter,
power-capped card than its first ones. Every candidate sees the same warm L2 state: the
operands were just used by the previous candidate.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import reference
from ..build import warmup
from ..describe import catalog, dtypes, selection
from ..describe.helper_kernels import ReductionConfig
from ..describe.problem import Epilogue, Operand, Problem, Split
from ..launch import sm90_choice
from ..plan import plans
from ..plan.records import Choice, Signature, candidates, put_record, record_of

# s8: float32 reference rounding only; tf32: 10-bit mantissas
TOLERANCE = {"f16": 2e-2, "bf16": 5e-2, "s8": 1e-5, "tf32": 1e-2}


@dataclass
class Row:
    choice: Choice
    ms: float | None
    tflops: float | None
    status: str          # "ok", or why the candidate was dropped


def tune(problem: Problem, sw, x, *, force: bool = False, jobs: int | None = None,
         progress=None) -> tuple[Choice, list[Row]]:
    """Profile every candidate for sw @ x (as `problem` describes it), record and return
    (winner, table of rows).

    With a record already there and force=False, returns it without profiling (the table
    then holds the recorded rows). progress(done, total, text) is called as work finishes.
    """
    import cupy

    p = problem
    signature = Signature.of(p)
    if not force:
        record = record_of(signature)
        if record is not None:
            return Choice.from_json(record[0]), [_row_from_json(r) for r in record[1]]
    choices = profiled_choices(p)
    _compile(choices, p, jobs, progress)
    # Every candidate writes a fresh [M, N] y; no C, the problem's activation.
    timed = dataclasses.replace(p, out=Operand("row", p.n, 16), c=None, split_k=None, split_k_mode=None,
                                epilogue=Epilogue(activation=p.activation))
    with cupy.cuda.Device(p.device_id):
        expected = reference.activation(p.activation, reference.to_float32(sw.to_dense()) @ reference.to_float32(x))
        y = cupy.empty((p.m, p.n), dtype=dtypes.numpy_dtype(p.element_out))
        made = [_plan(timed, choice) for choice in choices]   # (choice, plan or why not, workspace bytes)
        workspace = shared_workspace(nbytes for _, _, nbytes in made)
        checked = []
        for i, (choice, plan, nbytes) in enumerate(made):
            checked.append(_check(timed, choice, plan, sw, x, y, expected, workspace if nbytes else None))
            if progress:
                progress(i + 1, len(choices), f"checked {choice.label}: {checked[-1][1]}")
        if progress:
            progress(len(choices), len(choices),
                     f"timing {sum(c[2] is not None for c in checked)} candidates, taking turns")
        rows = _time(timed, checked)
    ok = [r for r in rows if r.ms is not None]
    if not ok:
        raise RuntimeError(f"no candidate ran {p.m}x{p.n}x{p.k} correctly: " + "; ".join(r.status for r in rows[:3]))
    winner = min(ok, key=lambda r: r.ms).choice
    rows.sort(key=lambda r: (r.ms is None, r.ms or 0.0))
    put_record(signature, winner, [_row_to_json(r) for r in rows])
    return winner, rows


def profiled_choices(problem: Problem) -> list[Choice]:
    """The candidates timed for a problem: the catalog's (records.candidates) less each sm90
    swizzle this shape would cap to a smaller one (selection.sm90_swizzle_capped): one the
    clusters cannot fill would repeat a smaller one's run, and its record would name a swizzle
    that never ran; one that pads the tile grid by more than selection.SWIZZLE_PADDING is left
    out by policy (2-3% padding measured 1-5% slower, docs/sweep_swizzle_h100_session29.log),
    since a record of it would run capped as well."""
    p = problem
    return [c for c in candidates(p.family, p.k, p.element, p.element_out)
            if (not c.swizzle   # sm80's is compiled in (None)
                or selection.sm90_swizzle_capped(c.swizzle, c.tile[0], p.m, p.n, c.tile[3]) == c.swizzle)
            and (not c.twin or _splits_tail(p, c))]


def _splits_tail(problem: Problem, choice: Choice) -> bool:
    """Whether a twin choice's scheduler splits this problem's last wave (sm90_choice.splits_tail):
    where it does not, the twin runs data-parallel (the persistent kernel's work at a stream-K
    scheduler's cost), and a record of it runs the persistent kernel."""
    p, default = problem, catalog.load(catalog.for_element(problem.family, problem.element)).swizzle
    return sm90_choice.splits_tail(p, choice.tile[0], choice.tile[3], choice.swizzle or default)[0]


def _plan(problem: Problem, choice: Choice) -> tuple:
    """(choice, its plan, the workspace it needs in bytes), or (choice, why it cannot run
    this problem, 0)."""
    try:
        plan = plans.make(problem, choice=choice)
        return choice, plan, plan.workspace_bytes
    except Exception as exc:  # a candidate that cannot run this problem is reported, not fatal
        return choice, _failed(exc), 0


def shared_workspace(sizes):
    """One workspace for every candidate that needs one (stream-K and split-K plans), as
    large as the largest of `sizes` (bytes): the candidates take turns on one stream, so they
    never use it at the same time, and each launch zeroes its own barriers first. A workspace
    per plan would hold about M x N x 4 bytes for each split candidate at once (24 GiB at
    16384^3)."""
    import cupy

    nbytes = max(sizes, default=0)
    return cupy.empty(nbytes, dtype=cupy.uint8) if nbytes else None


def _check(problem: Problem, choice: Choice, plan, sw, x, y, expected, workspace) -> tuple:
    """One candidate's checked call: (choice, "ok", its call) or (choice, why it was dropped,
    None). workspace: the shared one for a plan that needs one, else None (the user's path)."""
    if isinstance(plan, str):
        return choice, plan, None
    try:
        def call():
            return plan.run(sw, x, y, None, workspace)

        y.fill(0)
        call()
        err = reference.relative_error(y, expected)
        if not err <= TOLERANCE[problem.element]:
            return choice, f"wrong: relative error {err:.1e}", None
        return choice, "ok", call
    except Exception as exc:  # a candidate that cannot run this problem is reported, not fatal
        return choice, _failed(exc), None


def _time(problem: Problem, checked: list) -> list[Row]:
    """Kernel-only times of the checked candidates, taking turns; where a launch fails while
    they take turns, each is timed alone so that only the failing one is dropped."""
    calls = {i: call for i, (_, _, call) in enumerate(checked) if call is not None}
    try:
        ms = reference.kernel_medians_ms(calls, calls=20, replays=7) if calls else {}
    except Exception:
        ms = {}
        for i, call in calls.items():
            try:
                ms[i] = reference.kernel_median_ms(call, calls=20, replays=7)
            except Exception as exc:
                checked[i] = (checked[i][0], _failed(exc), None)
    flop = 2.0 * problem.m * problem.n * problem.k
    return [Row(choice, ms[i], flop / ms[i] / 1e9, status) if i in ms else Row(choice, None, None, status)
            for i, (choice, status, _) in enumerate(checked)]


def _failed(exc: Exception) -> str:
    return f"failed: {str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}"


def candidate_configs(choices, problem: Problem) -> list:
    """The kernels (GEMMs and, for parallel split-K, reductions) the candidates run."""
    p = problem
    element_out, activation, n = p.element_out, p.activation, p.n
    base = selection.config_for_shape(p.m, p.n, p.k, p.element, p.element_out, p.layout_b, p.sm_count, p.family)
    configs = []
    for choice in choices:
        tb, warps, stages, cluster, schedule, scheduler = choice.tile
        config = dataclasses.replace(base, threadblock=tb, warps=warps, stages=stages, cluster=cluster,
                                     schedule=schedule, tile_scheduler=scheduler, activation=activation,
                                     **catalog.load(catalog.for_element(choice.family, p.element))
                                     .tile_fields(choice.tile))
        if choice.twin:
            config = sm90_choice.twin_of(config)
        if choice.family == "sm80":
            split = Split(choice.split_k, choice.split_k_mode)
            config = selection.gemm_variant(config, split, activation)
            if split.parallel:
                configs.append(ReductionConfig(element_out, selection.reduction_alignment(element_out, n),
                                               activation))
        configs.append(config)
    return configs


def _compile(choices, problem: Problem, jobs, progress):
    """Compile (in worker processes) every kernel the candidates need that is not cached."""
    def report(count, total, result):
        if progress:
            progress(count, total, f"compile {result[2]} {result[0]}")

    p = problem
    arch = "sm_90a" if p.family == "sm90" else p.arch
    configs = candidate_configs(choices, p)
    warmup.compile_all(configs, arch, jobs=jobs, progress=report)


def _row_to_json(row: Row) -> dict:
    return {"choice": row.choice.to_json(), "ms": row.ms, "tflops": row.tflops, "status": row.status}


def _row_from_json(data: dict) -> Row:
    return Row(Choice.from_json(data["choice"]), data["ms"], data["tflops"], data["status"])


def format_table(rows: list[Row]) -> str:
    best = min((r.ms for r in rows if r.ms is not None), default=None)
    lines = [f"{'candidate':48s} {'time (us)':>10s} {'TFLOP/s':>9s} {'vs best':>8s}  status"]
    for r in rows:
        if r.ms is None:
            lines.append(f"{r.choice.label:48s} {'-':>10s} {'-':>9s} {'-':>8s}  {r.status}")
        else:
            lines.append(f"{r.choice.label:48s} {r.ms * 1e3:10.1f} {r.tflops:9.1f} {best / r.ms:8.2f}  {r.status}")
    return "\n".join(lines)
