"""Problem -> family plan: choose the kernel once, then keep the plan for every later call
with the same Problem (a bounded cache, so an eager call does no selection, no database
access and no argument building beyond its pointers).

Kernel choice: the caller's config; else the profiler's recorded winner for the
problem's signature (when the caller names no split either); else the heuristic
inside each family's plan. A new profiler record drops every cached plan. With compiling
forbidden, a kernel missing from the cache is stood in for by the best one present (present.py).
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from .. import env
from ..build.compiler import CompileError
from ..describe.description import SparseGemmConfig
from ..describe.problem import Problem
from ..launch.sm80 import Sm80Plan
from ..launch.sm90 import Sm90Plan
from ..profiler import records
from . import present

MAX_PLANS = 512

_plans: OrderedDict[tuple, Sm80Plan | Sm90Plan] = OrderedDict()
_lock = threading.Lock()
_generation = records.generation


def recorded_choice(problem: Problem, config: SparseGemmConfig | None):
    """The profiler's recorded winner, where it applies: the caller named neither a kernel nor a split."""
    if config is not None or problem.split_k is not None or problem.split_k_mode is not None:
        return None
    return records.recorded(records.Signature.of(problem))


def make(problem: Problem, config: SparseGemmConfig | None = None, choice=None) -> Sm80Plan | Sm90Plan:
    """A new family plan: for `config`, else the profiler `choice` (tile and split), else the heuristic's."""
    if choice is not None:
        problem = dataclasses.replace(problem, split_k=choice.split_k, split_k_mode=choice.split_k_mode)
    if problem.family == "sm90":
        return Sm90Plan(problem, config, choice)
    return Sm80Plan(problem, config, None if choice is None else choice.tile)


def get(problem: Problem, config: SparseGemmConfig | None = None) -> Sm80Plan | Sm90Plan:
    """The cached plan for a problem, made on a miss."""
    global _generation
    key = (problem, config)
    if _generation != records.generation:   # a new record: plans may choose differently now
        with _lock:
            _plans.clear()
            _generation = records.generation
    plan = _plans.get(key)
    if plan is None:
        try:
            plan = make(problem, config, recorded_choice(problem, config))
        except CompileError as missing:
            if config is not None or not env.compile_disabled():
                raise
            plan = present.substitute(problem, make, missing)
        with _lock:
            _plans[key] = plan
            while len(_plans) > MAX_PLANS:
                _plans.popitem(last=False)
    return plan

