"""Problem -> family plan: choose the kernel once, then keep the plan for every later call
with the same Problem (a bounded cache, so an eager call does no selection, no database
access and no argument building beyond its pointers).

Kernel choice: the caller's config; else the profiler's recorded winner for the
problem's signature (when the caller names no split either); else the heuristic
inside each family's plan. A new profiler record drops every cached plan. With compiling
forbidden, a kernel missing from the cache is stood in for by the best one present (present.py).

An sm90 problem whose N is new to its range (selection.n_range) reuses the kernel of
the range's plan instead of choosing again: a serving loop's new token count costs a
plan made around a known kernel, not a selection. (A range's N whose last wave the
stream-K twin splits share that kernel instead: range_key.)
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from .. import env
from ..build import kernels
from ..build.compiler import CompileError
from ..describe import selection
from ..describe.description import SparseGemmConfig
from ..describe.problem import Problem
from ..launch import sm80, sm90_choice, stream_workspaces
from ..launch.sm80 import Sm80Plan
from ..launch.sm90 import Sm90Plan
from . import present, records

MAX_PLANS = 512

_plans: OrderedDict[tuple, Sm80Plan | Sm90Plan] = OrderedDict()
_range_kernels: dict[tuple, tuple] = {}     # sm90: range key -> Sm90Plan.kernel
_lock = threading.Lock()
_generation = records.generation


def clear() -> None:
    """Forget every plan, range kernel, resolved sm80 launch and shared stream-K workspace
    (after plans made around stand-in kernels)."""
    with _lock:
        _plans.clear()
        _range_kernels.clear()
    stream_workspaces.clear()
    sm80.resolve.cache_clear()
    sm80.resolve_reduction.cache_clear()


def recorded_choice(problem: Problem, config: SparseGemmConfig | None):
    """The profiler's recorded winner, where it applies: the caller named neither a kernel nor a split."""
    if config is not None or problem.split_k is not None or problem.split_k_mode is not None:
        return None
    return records.recorded(records.Signature.of(problem))


def range_key(problem: Problem, config: SparseGemmConfig | None, choice) -> tuple:
    """Everything an sm90 kernel choice depends on, with N as its range; and for the
    heuristic's or the profiler's choice, whether this N runs the tile's stream-K twin (where
    the last wave splits: sm90_choice.tail_twin), so a range holds up to two kernels."""
    p = problem
    return (p.m, selection.n_range(p.n), p.k, p.element, p.element_x, p.element_out, p.layout_b, p.layout_d,
            p.epilogue.activation, p.epilogue.scales, p.epilogue.reads_c, p.split_k, p.split_k_mode, p.device_id,
            p.arch, p.sm_count, config, choice, config is None and _runs_twin(p, choice))


def _runs_twin(problem: Problem, choice) -> bool:
    """Whether the heuristic's kernel, or the profiler's choice, is the stream-K twin at this
    N, decided at the kernel's N as the plan decides it."""
    p = problem
    # (under a choice, make has put the choice's split in the problem: the choice decides)
    if (choice is None and p.split_k is not None) or (choice is not None and (not choice.twin or choice.split_k > 1)):
        return False
    kernel_problem = p.with_(n=sm90_choice.kernel_n(p))
    try:
        if choice is None:
            return sm90_choice.runs_tail_twin(kernel_problem)
        return sm90_choice.resolve(kernel_problem, None, choice)[1] == sm90_choice.TAIL_TWIN
    except ValueError:   # refused: the plan says why
        return False


def sharing(plan: Sm90Plan, problems) -> list[Problem]:
    """Those of `problems`, other N of an sm90 plan's range, that run the plan's kernel (not
    where one of them runs a stream-K twin and the other does not: the tile's own, or
    another tile's, sm90_choice.twin_tile_instead)."""
    problems = list(problems)
    if plan.config.element not in selection.TAIL_TWIN_INPUTS:
        return problems
    ours = range_key(plan.problem, *plan.asked)   # (plan.problem is as make keyed it)
    return [q for q in problems if made_key(q, *plan.asked) == ours]


def at_hand(problem: Problem, config: SparseGemmConfig | None = None) -> Sm80Plan | Sm90Plan | None:
    """get(problem, config) where its kernel is loaded or cached (nothing compiles), else None:
    for work done ahead of the calls that need it."""
    try:
        asked = kernels.first_asked(lambda: make(problem, config, recorded_choice(problem, config)))
    except ValueError:   # refused: the call itself says why
        return None
    if asked is not None and not (kernels.loaded(*asked) or kernels.cached(*asked)):
        return None
    return get(problem, config)


def make(problem: Problem, config: SparseGemmConfig | None = None, choice=None) -> Sm80Plan | Sm90Plan:
    """A new family plan: for `config`, else the profiler `choice` (tile and split), else the heuristic's."""
    problem = _as_made(problem, choice)
    if problem.family == "sm90":
        key = range_key(problem, config, choice)
        # listing what a plan would ask for (kernels.first_asked) asks, whatever is remembered
        kernel = None if kernels.asking() else _range_kernels.get(key)
        plan = Sm90Plan(problem, config, choice, kernel)
        if kernel is None:
            with _lock:
                if len(_range_kernels) >= MAX_PLANS:
                    _range_kernels.clear()
                _range_kernels[key] = plan.kernel
        return plan
    return Sm80Plan(problem, config, None if choice is None else choice.tile)


def known(problem: Problem) -> bool:
    """Whether a default plan for problem is at hand, or an sm90 kernel for its N range
    (either way its kernel is compiled and loaded)."""
    if (problem, None) in _plans:
        return True
    return problem.family == "sm90" and made_key(problem, None, recorded_choice(problem, None)) in _range_kernels


def made_key(problem: Problem, config: SparseGemmConfig | None, choice) -> tuple:
    """range_key as make keys a problem: with a profiler choice's split in it."""
    return range_key(_as_made(problem, choice), config, choice)


def _as_made(problem: Problem, choice) -> Problem:
    """The problem as make plans it: a profiler choice brings its own split."""
    if choice is None:
        return problem
    return dataclasses.replace(problem, split_k=choice.split_k, split_k_mode=choice.split_k_mode)


def get(problem: Problem, config: SparseGemmConfig | None = None) -> Sm80Plan | Sm90Plan:
    """The cached plan for a problem, made on a miss."""
    global _generation
    key = (problem, config)
    if _generation != records.generation:   # a new record: plans may choose differently now
        with _lock:
            _plans.clear()
            _range_kernels.clear()
            _generation = records.generation
    plan = _plans.get(key)
    if plan is None:
        try:
            plan = make(problem, config, recorded_choice(problem, config))
        except CompileError as missing:
            if config is not None or not env.compile_disabled():
                raise
            plan = present.substitute(problem, make, missing)
            plan.asked = (None, None)   # the caller named no kernel: other N choose again
        with _lock:
            _plans[key] = plan
            while len(_plans) > MAX_PLANS:
                _plans.popitem(last=False)
    return plan

