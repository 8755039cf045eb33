import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cutlass_sparse import reference  # noqa: E402

HAS_GPU = reference.gpu_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped cleanly without one)")
    config.addinivalue_line("markers", "slow_compile: compiles a CUTLASS 3.x kernel (minutes)")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_cache_path(tmp_path_factory):
    """One cache for the session's compiles: $CUTLASS_SPARSE_CACHE if set (a warmed cache
    carried to the GPU machine), else a fresh file."""
    explicit = os.environ.get("CUTLASS_SPARSE_CACHE")
    return Path(explicit) if explicit else tmp_path_factory.mktemp("cache") / "compiled_cache.db"


@pytest.fixture
def needs_sm90():
    """Skips a test unless the current GPU is compute capability 9.0 (the sm90 family's
    kernels are compiled for sm_90a). Modules of sm90-only tests use it for every test."""
    import cupy

    if cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the sm90 family's kernels need a compute capability 9.0 GPU")


@pytest.fixture
def load_edited_catalog(tmp_path, monkeypatch):
    """load_edited_catalog(old, new): catalog.load("sm90") from the shipped sm90.toml with its
    first `old` replaced by `new`, so a test can see what loading says of a bad value. The
    load cache is cleared before and after: no edited catalog outlives the test."""
    from cutlass_sparse import env
    from cutlass_sparse.describe import catalog

    def load(old, new):
        text = (env.operations_dir() / "sm90.toml").read_text()
        assert old in text
        (tmp_path / "sm90.toml").write_text(text.replace(old, new, 1))
        monkeypatch.setattr(env, "operations_dir", lambda: tmp_path)
        catalog.load.cache_clear()
        return catalog.load("sm90")

    yield load
    catalog.load.cache_clear()
