"""The command line's argument types and its parser: every bad value is one line on
stderr naming the argument and the rule, and exit status 2 (never a traceback).

A type function raises argparse.ArgumentTypeError; argparse prefixes the argument's
name. Rules that tie several arguments together are checked after parsing and raise
UsageError, which main() reports the same way.
"""
from __future__ import annotations

import argparse
import functools
import re
import sys
from pathlib import Path

PROG = "cutlass-sparse"
# The oldest GPUs with sparse tensor cores (mma.sp): Ampere, compute capability 8.0.
MIN_SPARSE_ARCH = 80
SM90_TARGET = "sm_90a"   # wgmma.sp exists only in the arch-specific target
MAX_GEMM_SIZE = 2**31 - 1   # CUTLASS's GemmCoord holds each of M, N and K in an int


class UsageError(ValueError):
    """A command line that parses but breaks a rule tying arguments together: exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: `cutlass-sparse: error: ...` and exit status 2."""

    def error(self, message: str):
        name = (self.prog or PROG).split()[0]   # a subcommand's prog is "cutlass-sparse run"; a script's its own
        sys.stderr.write(f"{name}: error: {' '.join(str(message).split())}\n")
        sys.exit(2)


def ascii_int(text: str) -> int:
    """int(text, 10) for ASCII digits only: int() also takes other scripts' digits (an
    Arabic-Indic three is 3) and underscores, which no size on a command line should use."""
    if not re.fullmatch(r"\s*[-+]?[0-9]+\s*", text):
        raise ValueError(text)
    return int(text, 10)


def _int_at_least(text: str, low: int) -> int:
    try:
        value = ascii_int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (sizes, slices, jobs, repeats)."""
    return _int_at_least(text, 1)


def non_negative_int(text: str) -> int:
    """An integer >= 0 (a random seed: NumPy refuses negative ones)."""
    return _int_at_least(text, 0)


def gemm_size(text: str) -> int:
    """M, N or K: 1 to MAX_GEMM_SIZE."""
    value = positive_int(text)
    if value > MAX_GEMM_SIZE:
        raise argparse.ArgumentTypeError(f"must be <= {MAX_GEMM_SIZE} (2**31 - 1: CUTLASS sizes are 32-bit ints), "
                                         f"got {value}")
    return value


def shard(text: str) -> tuple[int, int]:
    """'i/N': this machine's share of the list, 0 <= i < N."""
    index, slash, count = text.partition("/")
    try:
        index_value, count_value = ascii_int(index), ascii_int(count)
    except ValueError:
        index_value = count_value = None
    if not slash or index_value is None:
        raise argparse.ArgumentTypeError(f"expected i/N (e.g. 0/4), got {text!r}")
    if count_value < 1 or not 0 <= index_value < count_value:
        raise argparse.ArgumentTypeError(f"{text!r} needs N >= 1 and 0 <= i < N")
    return index_value, count_value


@functools.cache
def nvrtc_archs() -> tuple[int, ...] | None:
    """The compute capabilities this NVRTC compiles for (None when NVRTC cannot be asked)."""
    try:
        from cuda.bindings import nvrtc

        result, archs = nvrtc.nvrtcGetSupportedArchs()
        return tuple(archs) if int(result) == 0 else None
    except Exception:  # no NVRTC here: compiling will say so, with its own message
        return None


def arch(text: str) -> str:
    """A compile target with sparse tensor cores: sm_XX (XX >= 80) or sm_90a."""
    from ..build.kernels import normalize_arch

    try:
        name = normalize_arch(text.strip())
        if not re.fullmatch(r"sm_[0-9]+a?", name):   # ASCII digits: \d takes other scripts' digits too
            raise ValueError(name)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not of the form sm_XX (e.g. sm_80, sm_86, sm_90a)") from None
    number = int(name[3:].rstrip("a"))
    if number < MIN_SPARSE_ARCH:
        raise argparse.ArgumentTypeError(
            f"{name} has no sparse tensor cores: 2:4 sparse GEMM needs sm_80 or newer")
    if name.endswith("a") and name != SM90_TARGET:
        raise argparse.ArgumentTypeError(
            f"{name}: the sm80 family compiles for the plain target ({name[:-1]}); only the sm90 family "
            f"uses an arch-specific one ({SM90_TARGET})")
    supported = nvrtc_archs()
    if supported is not None and number not in supported:
        raise argparse.ArgumentTypeError(
            f"{name} is not a target this NVRTC compiles for ({', '.join(f'sm_{a}' for a in supported)})")
    return name


def arch_list(text: str) -> list[str]:
    """Comma-separated compile targets, each as `arch` checks it."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise argparse.ArgumentTypeError(f"expected comma-separated targets (e.g. sm_80,sm_90a), got {text!r}")
    return list(dict.fromkeys(arch(item) for item in items))


def family_arch(family: str | None, target: str | None) -> tuple[str, str]:
    """(family, compile target) for a compile-only run: the sm90 family compiles for
    sm_90a only; the sm80 family for a plain target (default sm_80)."""
    if family is None:
        family = "sm90" if target in ("sm_90", SM90_TARGET) else "sm80"
    if family == "sm90" and target not in (None, SM90_TARGET):
        raise UsageError(f"argument --arch: the sm90 family compiles for {SM90_TARGET}, not {target}: use "
                         f"--arch {SM90_TARGET}" + (" (or --family sm80 for the sm80 kernels on an sm_90 GPU)"
                                                    if target == "sm_90" else ""))
    if family == "sm80" and target == SM90_TARGET:
        raise UsageError("argument --arch: the sm80 family on an sm_90 GPU compiles for sm_90 "
                         "(what a GPU run uses): use --arch sm_90")
    return family, target or (SM90_TARGET if family == "sm90" else "sm_80")


def shape(text: str) -> tuple[int, int, int]:
    """'MxNxK' with every size 1 to MAX_GEMM_SIZE."""
    parts = text.lower().split("x")
    try:
        sizes = tuple(ascii_int(p) for p in parts)
    except ValueError:
        sizes = ()
    if len(sizes) != 3:
        raise argparse.ArgumentTypeError(f"expected MxNxK (e.g. 4096x4096x4096), got {text!r}")
    if min(sizes) < 1 or max(sizes) > MAX_GEMM_SIZE:
        raise argparse.ArgumentTypeError(f"{text!r}: M, N and K must be >= 1 and <= {MAX_GEMM_SIZE} (2**31 - 1)")
    return sizes


def shape_list(text: str) -> list[tuple[int, int, int]]:
    return [shape(item) for item in text.split(",")]


def choice_list(choices: tuple[str, ...]):
    """A type for comma-separated words, each one of `choices`."""
    def parse(text: str) -> list[str]:
        words = [w.strip() for w in text.split(",")]
        bad = [w for w in words if w not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {', '.join(choices)}")
        return words
    return parse


def _examined(text: str, test) -> bool:
    """test(path) for a path argument; a path that cannot be examined (a directory on the
    way the user may not read, a name too long) is a bad argument, not a traceback."""
    try:
        return test(Path(text).expanduser())
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot examine {text!r} ({exc.strerror or exc})") from None


def cache_file(text: str) -> Path:
    """A cache file's path: not empty, not a directory (the file itself may not exist yet)."""
    if not text or _examined(text, Path.is_dir):
        raise argparse.ArgumentTypeError(f"{text!r} is {'empty' if not text else 'a directory'}: name a cache file "
                                         "(e.g. ~/.cache/cutlass_sparse/compiled_cache.db)")
    return Path(text).expanduser()


def existing_file(text: str) -> Path:
    """A file that exists (read, never created)."""
    if not _examined(text, Path.is_file):
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return Path(text).expanduser()


def output_file(text: str) -> Path:
    """A file to write: not empty, not a directory, in a directory that exists."""
    if not text or _examined(text, Path.is_dir):
        raise argparse.ArgumentTypeError(f"{text!r} is {'empty' if not text else 'a directory'}: name a file")
    if not _examined(text, lambda path: path.parent.is_dir()):
        raise argparse.ArgumentTypeError(f"{text!r}: no directory {str(Path(text).expanduser().parent)!r}")
    return Path(text).expanduser()
