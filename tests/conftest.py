from __future__ import annotations

import getpass
import importlib.metadata
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

MODELS_SOURCE = (Path(__file__).parent / "aoti_models.py").read_text()


def plugin_args() -> list[str]:
    """``-p pytest_aoti.plugin`` where the package is importable but not installed (the GPU machine)."""
    installed = any(ep.value == "pytest_aoti.plugin" for ep in importlib.metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "pytest_aoti.plugin"]


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One package cache for all xdist workers of a run (beside their base temps): identical models compile once
    (debug builds too: they key on the debug environment); the cache's file lock makes concurrent workers wait for
    the first compile."""
    cache = tmp_path_factory.getbasetemp().parent / "aoti-shared-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    return cache


RunPytest = Callable[..., pytest.RunResult]


@pytest.fixture
def run_pytest(pytester: pytest.Pytester, shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> RunPytest:
    """Run pytest in a subprocess, as a user would (from ``cwd``, default the pytester dir), with the shared cache;
    the test models are in the pytester dir as ``aoti_models.py``."""
    pytester.makepyfile(aoti_models=MODELS_SOURCE)

    def run(*args: str, cache: Path | None = shared_cache, cwd: Path | None = None) -> pytest.RunResult:
        cache_args = [f"--aoti-cache-dir={cache}"] if cache is not None else []
        with monkeypatch.context() as patch:
            if cwd is not None:
                patch.chdir(cwd)
            return pytester.runpytest_subprocess(
                *plugin_args(), "-p", "no:cacheprovider", *cache_args, *args, timeout=900
            )

    return run


def junit_cases(path: Path) -> dict[str, dict[str, object]]:
    """Each ``<testcase>`` of a JUnit file by name: its outcome tags and properties. Asserts every name occurs once."""
    cases: dict[str, dict[str, object]] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        assert name not in cases, f"{name} appears twice in {path}"
        cases[name] = {
            "outcomes": sorted(child.tag for child in case if child.tag in ("failure", "error", "skipped")),
            "properties": {p.get("name"): p.get("value") for p in case.iter("property")},
        }
    return cases


@pytest.fixture
def watched_tmpdir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TMPDIR for the pytest runs of one test, holding only a link to Inductor's warm per-user cache: what
    else is in it afterwards was left behind."""
    tmp = tmp_path_factory.mktemp("watched-tmp")
    inductor_cache = Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"
    inductor_cache.mkdir(exist_ok=True)
    (tmp / inductor_cache.name).symlink_to(inductor_cache)
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def left_behind(tmp: Path) -> list[str]:
    return sorted(entry.name for entry in tmp.iterdir() if not entry.name.startswith("torchinductor_"))


# The longest scenarios (a minute or more each on 2 cores: several children, compiles, a minify budget).
LONGEST_FIRST = (
    "test_repeated_debug_run_loads_its_debug_packages",
    "test_crash_under_xdist_from_a_subdir_is_one_junit_testcase",
    "test_numerics_names_the_first_divergent_kernel",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Start the end-to-end scenarios (a pytest subprocess each, real compiles) first, the longest of them first:
    with xdist's work stealing (``--dist=worksteal`` in pyproject.toml; its default hands each worker a run of
    consecutive tests, which put every long scenario on the first worker) the workers then end together on the quick
    in-process tests."""

    def order(item: pytest.Item) -> tuple[bool, int]:
        e2e = "run_pytest" in getattr(item, "fixturenames", ())
        name = getattr(item, "originalname", item.name)
        return (not e2e, LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST))

    items.sort(key=order)
