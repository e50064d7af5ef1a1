"""The compiled-package cache: keys, hits across processes, integrity, locking, permissions and eviction."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.conftest import RunPytest

torch = pytest.importorskip("torch")

from pytest_aoti.cache import AOTICacheWarning, PackageCache, package_key  # noqa: E402
from pytest_aoti.compiler import compile_model  # noqa: E402


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).tanh()


def _export(model: torch.nn.Module) -> torch.export.ExportedProgram:
    return torch.export.export(model, (torch.randn(3, 4),))


def _seeded() -> Small:
    torch.manual_seed(0)
    return Small()


CPU = torch.device("cpu")


def test_identical_reexport_gives_the_same_key() -> None:
    assert package_key(_export(_seeded()), {}, CPU) == package_key(_export(_seeded()), {}, CPU)


def test_weight_change_gives_a_new_key() -> None:
    changed = _seeded()
    with torch.no_grad():
        changed.linear.weight[0, 0] += 1e-3
    assert package_key(_export(_seeded()), {}, CPU) != package_key(_export(changed), {}, CPU)


def test_config_change_gives_a_new_key() -> None:
    ep = _export(_seeded())
    assert package_key(ep, {}, CPU) != package_key(ep, {"max_autotune": True}, CPU)


@pytest.mark.parametrize(
    "variable",
    ["AOT_INDUCTOR_DEBUG_INTERMEDIATE_VALUE_PRINTER", "TORCHINDUCTOR_NAN_ASSERTS", "AOTI_RUNTIME_CHECK_INPUTS"],
)
def test_debug_env_change_gives_a_new_key(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    ep = _export(_seeded())
    before = package_key(ep, {}, CPU)
    monkeypatch.setenv(variable, "1")
    assert package_key(ep, {}, CPU) != before


def test_cache_location_changes_no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ep = _export(_seeded())
    before = package_key(ep, {}, CPU)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert package_key(ep, {}, CPU) == before


@pytest.fixture(scope="module")
def built_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real compiled package (bytes to store under several keys)."""
    compiled = compile_model(_seeded(), (torch.randn(3, 4),), package_dir=tmp_path_factory.mktemp("built"))
    return compiled.package_path


def test_eviction_drops_least_recently_used(tmp_path: Path, built_package: Path) -> None:
    size = built_package.stat().st_size
    cache = PackageCache.open(tmp_path / "cache", max_bytes=3 * size + size // 2)
    assert cache is not None
    paths = []
    for number, key in enumerate(("a" * 64, "b" * 64, "c" * 64)):
        paths.append(cache.store(key, built_package, compile_seconds=1.0))
        os.utime(paths[-1], (1000 + number, 1000 + number))
    cache.lookup("a" * 64)  # touch: now the most recently used
    cache.store("d" * 64, built_package, compile_seconds=1.0)
    remaining = sorted(p.stem[0] for p in (tmp_path / "cache").glob("*/*.pt2"))
    assert remaining == ["a", "c", "d"]


def test_corrupt_entry_is_a_miss_and_removed(tmp_path: Path, built_package: Path) -> None:
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1 << 30)
    assert cache is not None
    stored = cache.store("e" * 64, built_package, compile_seconds=2.0)
    assert cache.lookup("e" * 64) == stored
    stored.write_bytes(stored.read_bytes()[:100])
    assert cache.lookup("e" * 64) is None
    assert not stored.exists()
    assert (cache.stats.hits, cache.stats.misses, cache.stats.corrupt) == (1, 1, 1)


def test_cache_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.warns(AOTICacheWarning, match="others can write to it"):
        assert PackageCache.open(shared, max_bytes=1 << 30) is None


def test_new_cache_dir_is_private(tmp_path: Path) -> None:
    PackageCache.open(tmp_path / "new", max_bytes=1 << 30)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


USER_TEST = """
import torch
from aoti_models import MLP

def test_mlp(aoti_check):
    compiled = aoti_check(MLP(), (torch.randn(4, 8),))
    print("FROM_CACHE", compiled.from_cache)
"""


def test_hits_across_runs_and_recovers_from_corruption(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path
) -> None:
    pytester.makepyfile(test_user=USER_TEST)
    cache = tmp_path / "fresh-cache"
    first = run_pytest("-s", cache=cache)
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*FROM_CACHE False*", "aoti cache: 0 hits, 1 misses, * s compiling, 0.0 s saved"])

    second = run_pytest("-s", cache=cache)
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*FROM_CACHE True*", "aoti cache: 1 hits, 0 misses, 0.0 s compiling, * s saved"])

    (package,) = cache.glob("*/*.pt2")
    package.write_bytes(b"not a zip file")
    third = run_pytest("-s", cache=cache)
    third.assert_outcomes(passed=1)
    third.stdout.fnmatch_lines(["*FROM_CACHE False*", "aoti cache: 0 hits, 1 misses, *, 1 corrupt entries recompiled"])

    cleared = run_pytest("-s", "--aoti-cache-clear", cache=cache)
    cleared.stdout.fnmatch_lines(["*FROM_CACHE False*"])
    assert run_pytest("-s", "--aoti-no-cache", cache=cache).stdout.str().count("aoti cache:") == 0


CONCURRENT_SCRIPT = """
import sys
from pathlib import Path
import torch
from pytest_aoti import PackageCache, compile_model

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Sigmoid())
cache = PackageCache.open(Path(sys.argv[1]), max_bytes=1 << 30)
compiled = compile_model(model, (torch.randn(2, 6),), package_dir=Path(sys.argv[2]), cache=cache)
print("FROM_CACHE", compiled.from_cache)
"""


def test_two_processes_compile_once(pytester: pytest.Pytester, tmp_path: Path) -> None:
    script = pytester.makepyfile(compile_twice=CONCURRENT_SCRIPT)
    cache = tmp_path / "cache"
    processes = [
        pytester.popen([sys.executable, str(script), str(cache), str(tmp_path / f"build{n}")], stdin=None)
        for n in range(2)
    ]
    outputs = [b"".join(process.communicate(timeout=600)).decode() for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    flags = sorted(line for out in outputs for line in out.splitlines() if line.startswith("FROM_CACHE"))
    assert flags == ["FROM_CACHE False", "FROM_CACHE True"]
    assert len(list(cache.glob("*/*.pt2"))) == 1
