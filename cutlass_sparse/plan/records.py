"""The profiler's records: what a problem signature is, what a candidate is, and the
recorded winners in compiled_cache.db. Low enough in the package for planning to read
(plan.plans asks for a recorded winner on a plan-cache miss); the timing loop that
writes records is profiler.tune, above planning; they live here, beside the plans that read them.

A signature is what decides the best kernel: family, M, N and K (M and K rounded up to
a power of two, N exact up to 256), dtypes (x's too where it is not A's), B's layout, the activation, the device's
name and compute capability. A candidate is a catalog tile plus a K split.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import threading
from dataclasses import dataclass

from .. import env
from ..build.cache import default_cache
from ..describe import catalog, selection
from ..describe.problem import Problem
from ..launch import device

SPLITS_SM80 = ((1, "serial"), (2, "serial"), (4, "serial"), (2, "parallel"), (4, "parallel"), (8, "parallel"))
SPLITS_SM90 = (1, 2, 4, 8)
# sm90: the tile scheduler's rasterization group is a run-time argument (same binary), so
# the profiler tries each; sm80's swizzle is compiled in and stays the catalog's. 8 is what
# the heuristic runs at large shapes (selection.sm90_swizzle): without it a profiled winner
# could be slower than the call never profiled.
SWIZZLES_SM90 = (1, 2, 4, 8)


def bucket(value: int, exact_below: int = 0) -> int:
    if value <= exact_below:
        return value
    return 1 << max(value - 1, 0).bit_length()


@dataclass(frozen=True)
class Signature:
    family: str
    m: int
    n: int
    k: int
    element: str
    element_out: str
    layout_b: str
    activation: str
    device: str
    compute_capability: str
    element_x: str = ""   # x's type where it is not A's (e5m2 beside an e4m3 weight)

    @classmethod
    def of(cls, problem: Problem) -> "Signature":
        p = problem
        name, cc = device.identity(p.device_id)
        return cls(p.family, bucket(p.m), bucket(p.n, 256), bucket(p.k), p.element, p.element_out, p.layout_b,
                   p.activation, name, cc, "" if p.x_element == p.element else p.x_element)

    def key(self) -> str:
        fields = dataclasses.asdict(self)
        if not self.element_x:   # the key records made before element_x existed
            del fields["element_x"]
        return json.dumps(fields, sort_keys=True)


@dataclass(frozen=True)
class Choice:
    """A catalog tile (catalog.Family.tiles entry) and how K is split; twin: the sm90
    persistent tile's stream-K twin in the heuristic decomposition (sm90_choice.twin_of)."""

    family: str
    tile: tuple
    split_k: int = 1
    split_k_mode: str = "serial"
    swizzle: int | None = None      # sm90 only; None: the catalog's
    twin: bool = False

    @property
    def label(self) -> str:
        tb, _, stages, cluster, schedule, scheduler = self.tile
        text = f"{tb[0]}x{tb[1]}x{tb[2]}"
        text += f"_{stages}st" if self.family == "sm80" else f"_c{cluster[0]}x{cluster[1]}_{schedule}_{scheduler}"
        text += " stream-K twin" if self.twin else ""
        text += f" swizzle {self.swizzle}" if self.swizzle else ""
        return text + (f" split {self.split_k} {self.split_k_mode}" if self.split_k > 1 else "")

    def to_json(self) -> dict:
        return {"family": self.family, "tile": _plain(self.tile), "split_k": self.split_k,
                "split_k_mode": self.split_k_mode, "swizzle": self.swizzle, "twin": self.twin, "name": self.label}

    @classmethod
    def from_json(cls, data: dict) -> "Choice":
        tb, warps, stages, cluster, schedule, scheduler = data["tile"]
        tile = (tuple(tb), tuple(warps), stages, tuple(cluster), schedule, scheduler)
        return cls(data["family"], tile, data["split_k"], data["split_k_mode"], data.get("swizzle"),
                   data.get("twin", False))


def _plain(value):
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


def candidates(family: str, k: int, element: str = "f16", element_out: str | None = None) -> list[Choice]:
    """Every tile of the family's catalog (for these types) with each K split it can take,
    and the sm90 tiles that have a stream-K twin (selection.TAIL_TWINS) with it too."""
    out = []
    fam = catalog.load(catalog.for_element(family, element))
    for tile in fam.tiles:
        if not fam.allows(tile, element, element_out or element):
            continue
        k_tiles = selection.cdiv(k, tile[0][2])
        if family == "sm80":
            splits = [(s, mode) for s, mode in SPLITS_SM80
                      if s <= k_tiles and not (element == "s8" and mode == "parallel")]
        elif tile[5] == "streamk":
            splits = [(s, "serial") for s in SPLITS_SM90 if s <= k_tiles]
        else:
            splits = [(1, "serial")]
        swizzles = SWIZZLES_SM90 if family == "sm90" else (None,)
        has_twin = family == "sm90" and selection.has_tail_twin(tile[0], tile[3], *tile[4:], element)
        twins = (False, True) if has_twin else (False,)
        out += [Choice(family, tile, s, mode, None if z == fam.swizzle else z, twin)
                for s, mode in splits for z in swizzles for twin in twins]
    return out


# -- records ---------------------------------------------------------------------------

_lock = threading.Lock()


# Bumped by every new record: plans made before it may have chosen differently.
generation = 0


@functools.lru_cache(maxsize=4096)
def _recorded(signature: Signature, cache_path: str) -> Choice | None:
    record = default_cache().get_winner(signature.key())
    return None if record is None else Choice.from_json(record[0])


@functools.lru_cache(maxsize=16)
def _signatures(cache_path: str, generation: int) -> frozenset:
    """The signatures the cache holds records for, read once per file and generation: a
    problem without a record (every new N of a serving loop) is answered without a query."""
    found = set()
    for key, _ in default_cache().winners():
        try:
            found.add(Signature(**json.loads(key)))
        except (TypeError, ValueError):   # a record of another layout never matches
            continue
    return frozenset(found)


def recorded(signature: Signature) -> Choice | None:
    """The recorded winner for a signature (memoized per process and cache file)."""
    path = str(env.cache_path())
    if signature not in _signatures(path, generation):
        return None
    return _recorded(signature, path)


def record_of(signature: Signature) -> tuple[dict, list] | None:
    return default_cache().get_winner(signature.key())


def put_record(signature: Signature, winner: Choice, table: list[dict]) -> None:
    """Record a winner (and its table); later plans use it, earlier ones are dropped."""
    global generation
    with _lock:
        default_cache().put_winner(signature.key(), winner.to_json(), table)
        _recorded.cache_clear()
        generation += 1


