"""A compile says so: one log line when it starts (which kernel, about how long, where it
is kept) and one when it ends; a process without logging set up gets one warning for
its first compile. (A real sm80 compile: a few seconds.)"""
import dataclasses
import logging
import warnings

import pytest

from cutlass_sparse.build import kernels
from cutlass_sparse.build.cache import KernelCache
from cutlass_sparse.describe import selection


@pytest.fixture
def config():
    return selection.config_for_shape(64, 32, 64, "f16", "f16", "row", 108, "sm80")


def test_compile_logs_start_and_end(tmp_path, config, caplog):
    cache = KernelCache(tmp_path / "cs.db")
    with caplog.at_level(logging.INFO, logger="cutlass_sparse"):
        kernels.get(config, "sm_80", cache)
        kernels.get(config, "sm_80", cache)          # the second time: from memory, nothing said
    lines = [r.getMessage() for r in caplog.records if r.name == "cutlass_sparse"]
    assert len(lines) == 2
    assert lines[0].startswith(f"compiling {config.name} for sm_80 (about a few seconds; kept in {tmp_path}")
    assert lines[1].startswith(f"compiled {config.name} for sm_80 in ")


def test_unconfigured_logging_gets_one_warning(tmp_path, config, monkeypatch):
    monkeypatch.setattr(kernels, "_said_once", type(kernels._said_once)())
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(logging.getLogger("cutlass_sparse"), "handlers", [])
    monkeypatch.setattr(logging.getLogger("cutlass_sparse"), "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "level", logging.WARNING)
    other = selection.config_for_shape(64, 64, 64, "f16", "f16", "col", 108, "sm80")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernels.get(config, "sm_80", KernelCache(tmp_path / "a.db"))
        kernels.get(other, "sm_80", KernelCache(tmp_path / "b.db"))
    said = [str(w.message) for w in caught if "compiling" in str(w.message)]
    assert len(said) == 1 and config.name in said[0] and "cutlass-sparse warmup" in said[0]


def test_an_sm90_compile_says_what_it_will_take(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(kernels, "_said_once", type(kernels._said_once)())
    cache = KernelCache(tmp_path / "cs.db")
    default = selection.config_for_shape(4096, 4096, 4096, "f16", "f16", "row", 132, "sm90")   # the staged store
    decode = selection.config_for_shape(4096, 16, 4096, "f16", "f16", "row", 132, "sm90")   # stores D directly
    with_c = dataclasses.replace(default, reads_c=True)   # CUTLASS's TMA epilogue
    cutlass_both = dataclasses.replace(with_c, lean_mainloop=False)   # and CUTLASS's mainloop
    with caplog.at_level(logging.INFO, logger="cutlass_sparse"):
        for config in (cutlass_both, with_c, default, decode):
            kernels._say_compiling(config, "sm_90a", cache)
    lines = [r.getMessage() for r in caplog.records if r.name == "cutlass_sparse"]
    assert "(about 1-2 minutes and about 5 GB of memory;" in lines[0]
    assert "(about 30-60 seconds and about 3.5 GB of memory;" in lines[1]
    assert all("(about 20-45 seconds and about 2.5 GB of memory;" in line for line in lines[2:])
    assert default.stores_staged and decode.stores_directly
    assert all(c.takes_lean_mainloop for c in (with_c, default, decode))


# What ptxas wrote for the 256x192x64 tile in flight (session 27), between two ordinary lines.
SERIALIZED_LOG = """ptxas info    : Disabling default position-independent-code(pic) compilation mode as program requires more resources than allowed.
ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due to insufficient register resources for the function 'k_256x192'
ptxas info    : 32977 bytes gmem"""


def test_performance_notes_read_from_the_log():
    from cutlass_sparse.build import compiler
    assert compiler.performance_notes(SERIALIZED_LOG) == (
        "C7512: wgmma.mma_async instructions are serialized due to insufficient register resources",)
    assert compiler.performance_notes(SERIALIZED_LOG.replace("(C7512) Potential Performance Loss", "note")) == ()
    other = "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are serialized " \
            "due to the presence of Extern calls in the function 'k'"   # C7510/C7511/C7515 say "in the function"
    assert compiler.performance_notes(other) == (
        "C7511: wgmma.mma_async instructions are serialized due to the presence of Extern calls",)


def test_a_compile_with_a_performance_note_warns_and_keeps_it(tmp_path, config, caplog, monkeypatch):
    from cutlass_sparse.build import compiler
    real = compiler.compile_to_cubin

    def noted(*args, **kwargs):   # the real compile, its log given the note ptxas writes
        compiled = real(*args, **kwargs)
        return compiler.Compiled(compiled.cubin, compiled.log + "\n" + SERIALIZED_LOG, compiled.seconds)

    monkeypatch.setattr(compiler, "compile_to_cubin", noted)
    cache = KernelCache(tmp_path / "cs.db")
    with caplog.at_level(logging.INFO, logger="cutlass_sparse"):
        kernels.get(config, "sm_80", cache)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"{config.name} for sm_80: ptxas C7512: wgmma.mma_async instructions are serialized "
                      "due to insufficient register resources"]
    entry = cache.get(kernels.key_for(config, "sm_80"))
    assert entry.meta["ptxas_notes"] == ["C7512: wgmma.mma_async instructions are serialized due to "
                                         "insufficient register resources"]
