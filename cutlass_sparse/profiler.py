"""The profiler: time the catalog's candidates for a problem signature on the GPU, check
each against the dense answer, and record the winner in compiled_cache.db.

A signature is what decides the best kernel: family, M, N and K (M and K rounded up to
a power of two, N exact up to 256), dtypes, B's layout, the activation, the device's
name and compute capability. A candidate is a catalog tile plus a K split. Profiling
never starts unless asked (cs.tune, matmul(autotune=True) on a miss, force_profile=True,
the CLI's --profile, warm-up's --tune); a recorded winner is used by every later call
with that signature, in any process that opens the same cache.

Timing: the candidates' kernels are compiled first (in parallel worker processes), then
each runs on the same operands: one checked call, then kernel-only timing (20 calls
queued behind a spin kernel, median of 7). Every candidate sees the same warm L2 state:
the operands were just used by the previous candidate.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import threading
from dataclasses import dataclass

from . import catalog, dtypes, selection
from .cache import default_cache

SPLITS_SM80 = ((1, "serial"), (2, "serial"), (4, "serial"), (2, "parallel"), (4, "parallel"), (8, "parallel"))
SPLITS_SM90 = (1, 2, 4, 8)
# sm90: the tile scheduler's rasterization group is a run-time argument (same binary), so
# the profiler tries a few; sm80's swizzle is compiled in and stays the catalog's.
SWIZZLES_SM90 = (1, 2, 4)


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

    @classmethod
    def of(cls, family, m, n, k, element, element_out, layout_b, activation, device_id) -> "Signature":
        name, cc = _device_identity(device_id)
        return cls(family, bucket(m), bucket(n, 256), bucket(k), element, element_out, layout_b, activation,
                   name, cc)

    def key(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Choice:
    """A catalog tile (catalog.Family.tiles entry) and how K is split."""

    family: str
    tile: tuple
    split_k: int = 1
    split_k_mode: str = "serial"
    swizzle: int | None = None      # sm90 only; None: the catalog's

    @property
    def label(self) -> str:
        tb, _, stages, cluster, schedule, scheduler = self.tile
        text = f"{tb[0]}x{tb[1]}x{tb[2]}"
        text += f"_{stages}st" if self.family == "sm80" else f"_c{cluster[0]}x{cluster[1]}_{schedule}_{scheduler}"
        text += f" swizzle {self.swizzle}" if self.swizzle else ""
        return text + (f" split {self.split_k} {self.split_k_mode}" if self.split_k > 1 else "")

    def to_json(self) -> dict:
        return {"family": self.family, "tile": _plain(self.tile), "split_k": self.split_k,
                "split_k_mode": self.split_k_mode, "swizzle": self.swizzle, "name": self.label}

    @classmethod
    def from_json(cls, data: dict) -> "Choice":
        tb, warps, stages, cluster, schedule, scheduler = data["tile"]
        tile = (tuple(tb), tuple(warps), stages, tuple(cluster), schedule, scheduler)
        return cls(data["family"], tile, data["split_k"], data["split_k_mode"], data.get("swizzle"))


def _plain(value):
    return [_plain(v) for v in value] if isinstance(value, (tuple, list)) else value


@functools.lru_cache(maxsize=16)
def _device_identity(device_id: int) -> tuple[str, str]:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    return props["name"].decode(), cupy.cuda.Device(device_id).compute_capability


def candidates(family: str, k: int, element: str = "f16", element_out: str | None = None) -> list[Choice]:
    """Every tile of the family's catalog (for these types) with each K split it can take."""
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
        out += [Choice(family, tile, s, mode, None if z == catalog.load(family).swizzle else z)
                for s, mode in splits for z in swizzles]
    return out


# -- records ---------------------------------------------------------------------------

_lock = threading.Lock()


@functools.lru_cache(maxsize=4096)
def recorded(signature: Signature, cache_path: str) -> Choice | None:
    """The recorded winner for a signature (memoized per process; tune() refreshes it)."""
    record = default_cache().get_winner(signature.key())
    return None if record is None else Choice.from_json(record[0])


def record_of(signature: Signature) -> tuple[dict, list] | None:
    return default_cache().get_winner(signature.key())


# -- profiling -------------------------------------------------------------------------

@dataclass
class Row:
    choice: Choice
    ms: float | None
    tflops: float | None
    status: str          # "ok", or why the candidate was dropped


def tune(sw, x, *, out_dtype=None, activation: str = "identity", family: str | None = None,
         force: bool = False, jobs: int | None = None, progress=None) -> tuple[Choice, list[Row]]:
    """Profile every candidate for sw @ x, record and return (winner, table of rows).

    With a record already there and force=False, returns it without profiling (the table
    then holds the recorded rows). progress(done, total, text) is called as work finishes.
    """
    from .matmul import matmul
    from .operands import as_device_array, device_facts, matrix_layout, output_type

    x = as_device_array(x, "x")
    family = family or sw.layout
    element = dtypes.operand_name(sw.dtype)
    element_out = output_type(element, out_dtype)
    layout_b, _ = matrix_layout(x, "x")
    m, k = sw.shape
    n = x.shape[1]
    device_id = x.device.id
    signature = Signature.of(family, m, n, k, element, element_out, layout_b, activation, device_id)
    if not force:
        record = record_of(signature)
        if record is not None:
            return Choice.from_json(record[0]), [_row_from_json(r) for r in record[1]]

    arch, sm_count = device_facts(device_id)
    choices = candidates(family, k, element, element_out)
    _compile(choices, m, n, k, element, element_out, layout_b, activation, arch, sm_count, jobs, progress)

    import cupy

    from . import reference

    with cupy.cuda.Device(device_id):
        dense = reference.to_float32(sw.to_dense()) @ reference.to_float32(x)
        expected = reference.activation(activation, dense)
        # s8: float32 reference rounding only; tf32: 10-bit mantissas
        tolerance = {"f16": 2e-2, "bf16": 5e-2, "s8": 1e-5, "tf32": 1e-2}[element]
        y = cupy.empty((m, n), dtype=dtypes.numpy_dtype(element_out))
        rows = []
        for i, choice in enumerate(choices):
            def call(choice=choice):
                return matmul(sw, x, out=y, out_dtype=out_dtype, activation=activation, family=family,
                              _choice=choice, split_k=choice.split_k, split_k_mode=choice.split_k_mode)
            try:
                y.fill(0)
                call()
                err = reference.relative_error(y, expected)
                if not err <= tolerance:
                    rows.append(Row(choice, None, None, f"wrong: relative error {err:.1e}"))
                else:
                    ms = reference.kernel_median_ms(call, calls=20, replays=7)
                    rows.append(Row(choice, ms, 2.0 * m * n * k / ms / 1e9, "ok"))
            except Exception as exc:  # a candidate that cannot run this problem is reported, not fatal
                rows.append(Row(choice, None, None, f"failed: {str(exc).splitlines()[0][:120]}"))
            if progress:
                progress(i + 1, len(choices), f"timed {choice.label}: {rows[-1].status}")
    ok = [r for r in rows if r.ms is not None]
    if not ok:
        raise RuntimeError(f"no candidate ran {m}x{n}x{k} correctly: " + "; ".join(r.status for r in rows[:3]))
    winner = min(ok, key=lambda r: r.ms).choice
    rows.sort(key=lambda r: (r.ms is None, r.ms or 0.0))
    with _lock:
        default_cache().put_winner(signature.key(), winner.to_json(), [_row_to_json(r) for r in rows])
        recorded.cache_clear()
    return winner, rows


def choice_for(sw, x, family, element, element_out, layout_b, activation, out_dtype, autotune: bool,
               force: bool) -> Choice | None:
    """What matmul runs when the caller names no kernel: the recorded winner (profiling
    first if asked), or None for the heuristic."""
    from . import env

    m, k = sw.shape
    if autotune or force:
        return tune(sw, x, out_dtype=out_dtype, activation=activation, family=family, force=force)[0]
    signature = Signature.of(family, m, x.shape[1], k, element, element_out, layout_b, activation, x.device.id)
    return recorded(signature, str(env.cache_path()))


def candidate_configs(choices, m, n, k, element, element_out, layout_b, activation, sm_count) -> list:
    """The kernels (GEMMs and, for parallel split-K, reductions) the candidates run."""
    from . import sm80
    from .description import ReductionConfig

    base = selection.config_for_shape(m, n, k, element, element_out, layout_b, sm_count, choices[0].family)
    configs = []
    for choice in choices:
        tb, warps, stages, cluster, schedule, scheduler = choice.tile
        config = dataclasses.replace(base, threadblock=tb, warps=warps, stages=stages, cluster=cluster,
                                     schedule=schedule, tile_scheduler=scheduler, activation=activation)
        if choice.family == "sm80":
            split = sm80.Split(choice.split_k, choice.split_k_mode)
            config = sm80.gemm_variant(config, split, activation)
            if split.parallel:
                configs.append(ReductionConfig(element_out, sm80.reduction_alignment(element_out, n), activation))
        configs.append(config)
    return configs


def _compile(choices, m, n, k, element, element_out, layout_b, activation, arch, sm_count, jobs, progress):
    """Compile (in worker processes) every kernel the candidates need that is not cached."""
    from . import warmup

    def report(count, total, result):
        if progress:
            progress(count, total, f"compile {result[2]} {result[0]}")

    configs = candidate_configs(choices, m, n, k, element, element_out, layout_b, activation, sm_count)
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
