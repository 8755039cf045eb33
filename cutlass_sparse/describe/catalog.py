"""The catalogs in operations/: which sparse GEMM configurations exist, per family."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import tomllib
from dataclasses import dataclass

from .. import env
from . import dtypes
from .arith import cdiv, round_up
from .description import LOAD_REGISTERS, SparseGemmConfig

# Catalog files per family; a family's int8 and tf32 kernels have their own tiles.
CATALOGS = {"sm80": ("sm80", "sm80_s8", "sm80_tf32"), "sm90": ("sm90", "sm90_fp8", "sm90_s8")}


# Catalog files of an element type within its family (others use the family's own file).
_BY_ELEMENT = {("sm80", "s8"): "sm80_s8", ("sm80", "tf32"): "sm80_tf32",
               ("sm90", "e4m3"): "sm90_fp8", ("sm90", "s8"): "sm90_s8"}


def for_element(family: str, element: str) -> str:
    """The catalog file that holds a family's kernels for an input element type."""
    return _BY_ELEMENT.get((family, element), family)


@dataclass(frozen=True)
class Family:
    """One catalog file: a kernel family's tiles and operand choices."""

    name: str
    min_compute: int
    instruction: tuple[int, int, int]
    accumulator: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    layouts_b: tuple[str, ...]
    alignments_b: tuple[int, ...]
    alignments_c: tuple[int, ...]
    swizzle: int
    # (threadblock, warps, stages, cluster, schedule, tile_scheduler); the last three only for sm90
    tiles: tuple[tuple, ...]
    # (tile, outputs it is limited to, why): a tile's own `outputs` in the catalog file
    limits: tuple[tuple[tuple, tuple[str, ...], str], ...] = ()
    fast_accum: bool = False     # fp8: CUTLASS's fast-accumulation schedules (SparseGemmConfig)
    # (tile, epilogue subtile) where a tile names its own (SparseGemmConfig.epilogue_tile)
    subtiles: tuple[tuple[tuple, tuple[int, int]], ...] = ()
    # (tile, (least N, largest N)) for tiles selection takes only in that range of N (where
    # their sweeps measured them ahead; catalog keys min_n and max_n)
    n_bounds: tuple[tuple[tuple, tuple[int, float]], ...] = ()
    # (tile, (least M, least K)) for tiles selection takes only from that M and K up (catalog
    # keys min_m and min_k): the largest problems, where their sweeps measured them ahead
    mk_bounds: tuple[tuple[tuple, tuple[int, int]], ...] = ()
    # (tile, most waves) for tiles selection takes only while the problem is at most that many
    # waves of them over the SMs (catalog key max_waves): a small tile whose only gain is a
    # finer last wave, measured behind a larger one once there are more waves
    wave_bounds: tuple[tuple[tuple, float], ...] = ()
    # tiles whose kernels keep one wgmma batch in flight (SparseGemmConfig.mma_in_flight;
    # catalog key mma_in_flight): where the H100 measured it ahead. It costs a stage of
    # prefetch (a stage is released one k-tile later), which lost 6% on a 4-stage tile.
    in_flight: tuple[tuple, ...] = ()
    # tiles whose kernels store D straight from registers where the epilogue allows it
    # (SparseGemmConfig.direct_store; catalog key direct_store): where the sweeps measured it ahead
    direct_store: tuple[tuple, ...] = ()
    # tiles whose kernels store D through our staged TMA epilogue where it applies
    # (SparseGemmConfig.staged_store; catalog key staged_store): where the sweeps measured
    # it level with CUTLASS's (it compiles in about 40% less time and memory)
    staged_store: tuple[tuple, ...] = ()
    # tiles whose kernels take our own mainloop producer and consumers where they apply
    # (SparseGemmConfig.lean_mainloop; catalog key lean_mainloop): where the sweeps measured
    # it level with CUTLASS's (it compiles in about a third less time and memory)
    lean_mainloop: tuple[tuple, ...] = ()
    # (tile, producer registers) for tiles whose kernels split the registers their own way
    # (SparseGemmConfig.load_registers; catalog key load_registers): the stream-K tiles, whose
    # producer spilled at CUTLASS's 40
    registers: tuple[tuple[tuple, int], ...] = ()

    def subtile(self, tile) -> tuple[int, ...]:
        """The epilogue subtile the catalog names for this tile (() = CUTLASS's choice)."""
        return next((sub for limited, sub in self.subtiles if limited == tile), ())

    def tile_fields(self, tile) -> dict:
        """What the catalog names per tile beyond its shape (SparseGemmConfig fields): every
        configuration of the tile, the profiler's candidates included, takes them."""
        return {"epilogue_tile": self.subtile(tile), "mma_in_flight": tile in self.in_flight,
                "direct_store": tile in self.direct_store, "staged_store": tile in self.staged_store,
                "lean_mainloop": tile in self.lean_mainloop,
                "load_registers": next((r for limited, r in self.registers if limited == tile), 0)}

    def takes_n(self, tile, n: int) -> bool:
        """Whether selection may take this tile for N's range ending at n (selection.n_range)."""
        return all(least <= n <= most for limited, (least, most) in self.n_bounds if limited == tile)

    def takes(self, tile, m: int, n: int, k: int, sm_count: int) -> bool:
        """takes_n, M and K at least the tile's min_m and min_k, and no more than its
        max_waves of tiles (whole clusters of them) over sm_count SMs. Selection asks with
        the end of N's range (selection.n_range), so waves are counted there."""
        (tm, tn, _), (cm, cn, _) = tile[0], tile[3]
        tiles = round_up(cdiv(m, tm), cm) * round_up(cdiv(n, tn), cn)
        return self.takes_n(tile, n) and all(
            m >= least_m and k >= least_k for limited, (least_m, least_k) in self.mk_bounds if limited == tile
        ) and all(tiles <= most * sm_count for limited, most in self.wave_bounds if limited == tile)

    def allows(self, tile, element: str, element_out: str) -> bool:
        return self._refusal(tile, element, element_out) is None

    def _refusal(self, tile, element: str, element_out: str) -> str | None:
        for limited, outputs, why in self.limits:
            if limited == tile and element_out not in self.out_types(element, outputs):
                return why
        return None

    def config(self, tile, element: str, element_out: str, layout_b: str,
               alignment_b: int, alignment_c: int, element_b: str = "", reads_c: bool = True) -> SparseGemmConfig:
        """reads_c False (sm90): the tile's kernel for problems without C (SparseGemmConfig.reads_c)."""
        why = self._refusal(tile, element, element_out)
        if why:
            raise ValueError(f"the {'x'.join(map(str, tile[0]))} tile of the {self.name} catalog has no "
                             f"{element_out} output: {why}")
        threadblock, warps, stages, cluster, schedule, tile_scheduler = tile
        return SparseGemmConfig(
            family=self.name, element=element, element_out=element_out, layout_b=layout_b,
            threadblock=threadblock, warps=warps, stages=stages, instruction=self.instruction,
            alignment_a=16 // dtypes.numpy_dtype(element).itemsize, alignment_b=alignment_b,
            alignment_c=alignment_c,
            swizzle=self.swizzle, min_compute=self.min_compute, accumulator=self.accumulator,
            cluster=cluster, schedule=schedule, tile_scheduler=tile_scheduler, fast_accum=self.fast_accum,
            element_b="" if element_b == element else element_b, reads_c=reads_c,
            **self.tile_fields(tile))

    def out_types(self, element: str, outputs: tuple[str, ...] | None = None) -> tuple[str, ...]:
        """'same' in the catalog is the input type."""
        return tuple(element if o == "same" else o for o in (outputs or self.outputs))

    def enumerate(self, widest_only: bool = True) -> list[SparseGemmConfig]:
        """Every configuration; with widest_only, just the widest alignments (the common case)."""
        aligns_b = self.alignments_b[:1] if widest_only else self.alignments_b
        aligns_c = self.alignments_c[:1] if widest_only else self.alignments_c
        out = []
        for element in self.inputs:
            for tile, element_out, layout_b, ab, ac in itertools.product(
                    self.tiles, self.out_types(element), self.layouts_b, aligns_b, aligns_c):
                if self.allows(tile, element, element_out):
                    out.append(self.config(tile, element, element_out, layout_b, ab, ac))
        return out


def _n_bounds(tile: dict, path) -> tuple[int, float]:
    """A tile's (min_n, max_n). Selection asks with the end of N's range (selection.n_range:
    N up to 8, then (8, 16], (16, 32], ...), so min_n must start a range: 1, or one more
    than a power of two from 8 up."""
    least, most = tile.get("min_n", 1), tile.get("max_n", float("inf"))
    if least != 1 and not (least - 1 >= 8 and (least - 1) & (least - 2) == 0):
        raise ValueError(f"{path}: tile {tile['threadblock']} min_n = {least}: 1, or one more than a power "
                         f"of two from 8 up (9, 17, 33, ...: where a range of N starts)")
    return least, most


def _mk_bounds(tile: dict, path) -> tuple[int, int]:
    """A tile's (min_m, min_k): whole numbers of at least 1 (1 where a key is absent)."""
    bounds = []
    for key in ("min_m", "min_k"):
        value = tile.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{path}: tile {tile['threadblock']} {key} = {value!r}: a whole number of at least 1")
        bounds.append(value)
    return bounds[0], bounds[1]


def _max_waves(tile: dict, path) -> float:
    value = tile["max_waves"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{path}: tile {tile['threadblock']} max_waves = {value!r}: a number above 0")
    return float(value)


def _load_registers(tile: dict, path) -> int:
    value = tile["load_registers"]
    if isinstance(value, bool) or value not in LOAD_REGISTERS:
        raise ValueError(f"{path}: tile {tile['threadblock']} load_registers = {value!r}: one of {LOAD_REGISTERS}")
    return value


def _flag(tile: dict, key: str, path) -> bool:
    value = tile.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{path}: tile {tile['threadblock']} {key} = {value!r}: true or false")
    return value


@functools.cache
def load(family: str) -> Family:
    path = env.operations_dir() / f"{family}.toml"
    if not path.exists():
        raise ValueError(f"no catalog for kernel family {family!r} (looked for {path})")
    data = tomllib.loads(path.read_text())

    def tile(t):
        return (tuple(t["threadblock"]), tuple(t["warps"]), t["stages"], tuple(t.get("cluster", (1, 1, 1))),
                t.get("schedule", "none"), t.get("tile_scheduler", "persistent"))

    return Family(
        name=data["family"], min_compute=data["min_compute"], instruction=tuple(data["instruction"]),
        accumulator=data["accumulator"], inputs=tuple(data["inputs"]), outputs=tuple(data["outputs"]),
        layouts_b=tuple(data["layouts_b"]), alignments_b=tuple(data["alignments_b"]),
        alignments_c=tuple(data["alignments_c"]), swizzle=data["swizzle"],
        tiles=tuple(tile(t) for t in data["tile"]), fast_accum=data.get("fast_accum", False),
        limits=tuple((tile(t), tuple(t["outputs"]), t.get("why", "not offered")) for t in data["tile"]
                     if "outputs" in t),
        subtiles=tuple((tile(t), tuple(t["epilogue_tile"])) for t in data["tile"] if "epilogue_tile" in t),
        n_bounds=tuple((tile(t), _n_bounds(t, path)) for t in data["tile"] if "min_n" in t or "max_n" in t),
        mk_bounds=tuple((tile(t), _mk_bounds(t, path)) for t in data["tile"] if "min_m" in t or "min_k" in t),
        wave_bounds=tuple((tile(t), _max_waves(t, path)) for t in data["tile"] if "max_waves" in t),
        in_flight=tuple(tile(t) for t in data["tile"] if _flag(t, "mma_in_flight", path)),
        direct_store=tuple(tile(t) for t in data["tile"] if _flag(t, "direct_store", path)),
        staged_store=tuple(tile(t) for t in data["tile"] if _flag(t, "staged_store", path)),
        lean_mainloop=tuple(tile(t) for t in data["tile"] if _flag(t, "lean_mainloop", path)),
        registers=tuple((tile(t), _load_registers(t, path)) for t in data["tile"] if "load_registers" in t),
    )


def _same_store(name: str) -> str:
    """A name with any sm90 epilogue store spelled as the TMA store's (CUTLASS names the
    epilogue schedule; SparseGemmConfig.direct_store picks the register-to-global one,
    staged_store our own)."""
    return name.replace("_epi_nosmem", "_epi_tma").replace("_epi_staged", "_epi_tma")


# What a name adds after a catalog configuration's own: an epilogue subtile, wgmma in
# flight, the producer's registers, our own mainloop, no C
_SUFFIXES = re.compile(r"(?:_epi(\d+)x(\d+))?(_inflight)?(?:_ld(\d+))?(_lean)?(_noc)?$")


@functools.lru_cache(maxsize=1024)   # a walk over every catalog (tens of ms); configurations are frozen
def find(name: str, family: str | None = None) -> SparseGemmConfig:
    """The configuration with this procedural name, among every one the catalogs can build
    (an sm90 name may end in the suffixes of an epilogue subtile, of wgmma in flight, of our
    own mainloop and of a kernel without C, as calls report them:
    `..._epi128x16_inflight_lean_noc`; and a register split's `_ld72`)."""
    names = CATALOGS[family] if family else tuple(n for f in CATALOGS.values() for n in f)
    suffixes = _SUFFIXES.search(name)   # the name says both what it adds
    base = name[:suffixes.start()]
    changes = {"reads_c": suffixes[6] is None, "mma_in_flight": suffixes[3] is not None,
               "lean_mainloop": suffixes[5] is not None,
               "epilogue_tile": (int(suffixes[1]), int(suffixes[2])) if suffixes[1] else (),
               "load_registers": int(suffixes[4] or 0)}
    for fam in names:
        for config in load(fam).enumerate(widest_only=False):
            if _same_store(_SUFFIXES.sub("", config.name)) != _same_store(base):   # the catalog's name, before the suffixes
                continue
            # any epilogue store: a tile's name with another is a kernel it can be built as
            for direct_store, staged_store in itertools.product((config.direct_store, not config.direct_store),
                                                                (config.staged_store, not config.staged_store)):
                found = dataclasses.replace(config, direct_store=direct_store, staged_store=staged_store, **changes)
                if found.name == name:
                    return found
    raise ValueError(f"no configuration named {name!r} in catalog {family or 'sm80/sm90'!r}")
