"""`cutlass-sparse`: the command line (run | bench | warmup | cache).

    cutlass-sparse run --m 4096 --n 4096 --k 4096      one verified GEMM (compile-only without a GPU)
    cutlass-sparse bench                               against cuBLAS and cuSPARSELt (GPU)
    cutlass-sparse warmup --arch sm_80,sm_90a          fill the kernel cache ahead of time
    cutlass-sparse cache ls|stats|verify|clear|merge|repack   look after the kernel cache

Exit status: 0 done, 1 a failure at run time (one line; --verbose for the full log),
2 a bad command line (one line naming the argument and the rule). Results go to stdout,
messages to stderr through the `cutlass_sparse` logger.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import warnings

from .. import env
from . import bench, cache, run, warmup
from .args import PROG, Parser, UsageError

log = logging.getLogger("cutlass_sparse")

COMMANDS = {"run": run, "bench": bench, "warmup": warmup, "cache": cache}


def build_parser() -> Parser:
    # -v/-q are accepted before or after the command; SUPPRESS keeps a subcommand's
    # parser from overwriting what the top-level one read.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug messages, and the full log and traceback of a failure")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="warnings and errors only")
    parser = Parser(prog=PROG, description="2:4 sparse GEMM with CUTLASS kernels compiled by NVRTC.",
                    parents=[common],
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--version", action="version", version=f"{PROG} {env.PACKAGE_VERSION}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=Parser)
    for name, module in COMMANDS.items():
        doc = module.__doc__
        sub = commands.add_parser(name, help=doc.splitlines()[0].partition(": ")[2], description=doc, parents=[common],
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.main)
    return parser


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        label = "warning: " if record.levelno == logging.WARNING else ""
        return f"{PROG}: {label}{text}"


@contextlib.contextmanager
def _messages(verbose: bool, quiet: bool):
    """Messages of the `cutlass_sparse` logger (and Python warnings, one line each) on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Format("%(message)s"))
    old_level, old_propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO)
    log.propagate = False
    old_show = warnings.showwarning
    warnings.showwarning = lambda message, category, *rest, **kw: log.warning("%s", message)
    try:
        yield
    finally:
        warnings.showwarning = old_show
        log.removeHandler(handler)
        log.setLevel(old_level)
        log.propagate = old_propagate


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose, quiet = getattr(args, "verbose", False), getattr(args, "quiet", False)
    if verbose and quiet:   # checked here: either may come before or after the command
        parser.error("argument -q/--quiet: not allowed with argument -v/--verbose")
    with _messages(verbose, quiet):
        try:
            return args.handler(args) or 0
        except UsageError as exc:
            parser.error(str(exc))
        except KeyboardInterrupt:
            log.error("interrupted")
            return 130
        except Exception as exc:  # a failure at run time: one line, the whole story under --verbose
            text = str(exc).strip() or type(exc).__name__
            if verbose:
                log.error("%s: %s", type(exc).__name__, text, exc_info=True)
            else:
                lines = text.splitlines()
                more = " (--verbose for the full log)" if len(lines) > 1 else " (--verbose for the traceback)"
                log.error("%s%s", lines[0], more)
            return 1


if __name__ == "__main__":
    sys.exit(main())
