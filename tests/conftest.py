from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path

import pytest

MODELS_SOURCE = (Path(__file__).parent / "aoti_models.py").read_text()


def _plugin_args() -> list[str]:
    """``-p pytest_aoti.plugin`` where the package is importable but not installed (the GPU machine)."""
    installed = any(ep.value == "pytest_aoti.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_aoti.plugin"]


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One package cache for all xdist workers of a run (beside their base temps): identical models compile once;
    the cache's file lock makes concurrent workers wait for the first compile."""
    cache = tmp_path_factory.getbasetemp().parent / "aoti-shared-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    return cache


RunPytest = Callable[..., pytest.RunResult]


@pytest.fixture
def run_pytest(pytester: pytest.Pytester, shared_cache: Path) -> RunPytest:
    """Run pytest in a subprocess in the pytester dir, as a user would, with the shared cache and the test models."""
    pytester.makepyfile(aoti_models=MODELS_SOURCE)

    def run(*args: str, cache: Path | None = shared_cache) -> pytest.RunResult:
        cache_args = [f"--aoti-cache-dir={cache}"] if cache is not None else []
        return pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", *cache_args, *args, timeout=900)

    return run
