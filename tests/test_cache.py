"""The compiled-package cache: keys, hits across processes, integrity, locking, permissions and eviction."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases, left_behind

torch = pytest.importorskip("torch")

from pytest_aoti.core.cache import MARKER_FILE, AOTICacheWarning, PackageCache, clear_cache_dir  # noqa: E402
from pytest_aoti.core.cache_key import key_parts, package_key  # noqa: E402
from pytest_aoti.core.compiler import compile_model  # noqa: E402
from pytest_aoti.debug.minify import MAX_CANDIDATES_ENV  # noqa: E402
from tests.unit.test_cache_dirs import user_project  # noqa: E402
from tests.unit.test_cache_keys import CPU, export_small, seeded_small  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One real compiled package (bytes to store under several keys), and the key of a model computed before it."""
    key_before = package_key(export_small(seeded_small()), {}, CPU)
    compiled = compile_model(seeded_small(), (torch.randn(3, 4),), package_dir=tmp_path_factory.mktemp("built"))
    return compiled.package_path, key_before


@pytest.fixture
def built_package(built: tuple[Path, str]) -> Path:
    return built[0]


def test_a_compile_in_the_process_changes_no_later_key(built: tuple[Path, str]) -> None:
    """Inductor writes each package's metadata into its global config: the key of a model must not depend on what
    the process compiled before it (the second model of a suite missed in a fresh checkout)."""
    assert package_key(export_small(seeded_small()), {}, CPU) == built[1]


def test_a_child_answers_its_isa_probes_from_its_parent_with_the_same_key(
    built: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After this process compiled (``built``), it has run Inductor's ISA probes: a child started fresh answers its
    probes from the session's record, or, where the cache is off and no record is named, from a record of its own
    with this process's verdicts. Skipping the base probe (env or config) changes no package key; turning
    vectorization off does."""
    import torch._inductor.config as inductor_config

    from pytest_aoti.core import isa_verdicts, torch_private
    from pytest_aoti.debug.child import _isa_record_for

    assert isa_verdicts.probed()  # the compile probed
    torch_private.memoize_isa_checks({"f" * 32})  # one more pass this process answers with (of no real check)
    monkeypatch.setenv(isa_verdicts.ISA_RECORD_ENV, str(tmp_path / "session-record.json"))
    assert _isa_record_for(tmp_path) == {}  # inherited with the environment
    monkeypatch.delenv(isa_verdicts.ISA_RECORD_ENV)
    given = _isa_record_for(tmp_path)
    assert list(given) == [isa_verdicts.ISA_RECORD_ENV] and Path(given[isa_verdicts.ISA_RECORD_ENV]).parent == tmp_path
    assert "f" * 32 in isa_verdicts.read_record(Path(given[isa_verdicts.ISA_RECORD_ENV])).passed
    ep = export_small(seeded_small())
    before = package_key(ep, {}, CPU)
    with inductor_config.patch({"cpp.vec_isa_ok": True}):  # what Inductor reads from TORCHINDUCTOR_VEC_ISA_OK=1
        assert package_key(ep, {}, CPU) == before
    with inductor_config.patch({"cpp.vec_isa_ok": False}):  # vectorization off
        assert package_key(ep, {}, CPU) != before


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


def test_clear_and_eviction_touch_only_entries(tmp_path: Path, built_package: Path) -> None:
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1)  # a tiny cap: every older entry goes
    assert cache is not None and (tmp_path / "cache" / MARKER_FILE).is_file()
    user_files = user_project(tmp_path / "cache")
    cache.store("a" * 64, built_package, compile_seconds=1.0)
    cache.store("b" * 64, built_package, compile_seconds=1.0)
    assert sorted(p.name for p in (tmp_path / "cache").glob("*/*.pt2") if p.parent.name in ("aa", "bb")) == [
        "b" * 64 + ".pt2"
    ]
    assert clear_cache_dir(tmp_path / "cache") == 1
    assert not list((tmp_path / "cache").glob("bb/*"))
    assert all(path.read_bytes() == b"user data" for path in user_files)


CONCURRENT_SCRIPT = """
import sys
import time
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


def test_project_dir_as_cache_dir_is_refused_and_kept(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    files = user_project(pytester.path)
    pytester.makepyfile(test_user="def test_asks_for_a_builder(aoti_compile):\n    pass\n")
    result = run_pytest("-s", "--aoti-cache-dir=.", "--aoti-cache-clear", "--aoti-cache-max-mb=1", cache=None)
    result.assert_outcomes(passed=1)
    text = result.stdout.str() + result.stderr.str()
    assert "--aoti-cache-clear:" in text and "is not a pytest-aoti cache" in text
    assert "not using the package cache at" in text and "compiling without a cache" in text
    assert all(path.read_bytes() == b"user data" for path in files)
    assert not (pytester.path / MARKER_FILE).exists()


def test_a_nan_debug_run_names_its_kernel_and_minifies(
    pytester: pytest.Pytester,
    run_pytest: RunPytest,
    tmp_path: Path,
    watched_tmpdir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both debug stages of a NaN made inside a compiled kernel, each printing its own cache line, and the graph
    minified to the node that makes the NaN. (Debug packages loaded again from the cache: the reruns of
    tests/test_debug_rerun.py::test_failure_that_needs_an_earlier_test_does_not_reproduce.)"""
    pytester.makepyfile(
        test_user="""
        import pytest
        import torch
        from aoti_models import LogModel

        @pytest.mark.aoti_ima
        def test_nan(aoti_compile):
            aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))(-torch.ones(4, 3))
        """
    )
    monkeypatch.setenv(MAX_CANDIDATES_ENV, "1")  # a search bounded by a count, not by the machine's speed
    result = run_pytest("-rA", "--aoti-minify")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "; failed: pytest_aoti.core.errors.AOTIInvariantError: output 0: nonfinite invariant violated" in text
    assert re.search(r"first NaN/Inf: cpp_fused_log_mul_0 buf0 \(mean -?nan", text), text
    # The verdict leads with the kernel's line in the user's model (Inductor's provenance data in the debug package),
    # and both reruns failed.
    assert re.search(
        r"^verdict: NaN made by aten.log.default \(node log\) at aoti_models.py:\d+ in forward: return torch.log\(x\) "
        r"\* 2 from \w+ \([^)]*\), in kernel cpp_fused_\w*log\w*; failed: .*; consistent \(2 of 2 reruns\)",
        text,
        re.MULTILINE,
    ), text
    result.stdout.fnmatch_lines(["*= aoti =*", "test_user.py::test_nan: NaN made by aten.log.default*"])
    # Quiet reports: with pytest's logging plugin on, torch's structured-trace records stay out of the captured logs.
    assert "torch.__trace" not in text
    # Each stage's child prints its own cache line (its packages keyed on its env), in its log in the report. The
    # marked test itself ran isolated (a crash must end only it), so this process compiled nothing.
    assert len(re.findall(r"^aoti cache: \d hits, \d misses", text, re.MULTILINE)) == 2
    # Minified within its cap of one candidate: the graph shrinks to the one node that makes the NaN.
    minified = re.search(r"^minify: 2 -> 1 nodes, still nonfinite \(.*\): (\S+)$", text, re.MULTILINE)
    assert minified is not None, text
    bundle = re.search(r"^repro bundle: (\S+) \(python repro.py: needs only torch\)", text, re.MULTILINE)
    assert bundle is not None and minified.group(1) == str(Path(bundle.group(1)) / "minified" / "repro.py"), text

    # The minified repro bundle (the same repro.py as the full one) reproduces the NaN without pytest, from a clean
    # directory: on the smallest candidate's package, the one that failed; and, as on a machine with another CPU (a
    # CPU package is built for its CPU), on a package it recompiles.
    repro = subprocess.run([sys.executable, minified.group(1)], cwd=tmp_path, capture_output=True, text=True)
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert "repro: running package.pt2, the package that failed" in repro.stdout
    assert "reproduced: output 0 holds 12 NaN/Inf value(s) of 12" in repro.stderr
    versions = Path(minified.group(1)).with_name("versions.json")
    versions.write_text(json.dumps({**json.loads(versions.read_text()), "cpu": "another CPU"}))
    repro = subprocess.run([sys.executable, minified.group(1)], cwd=tmp_path, capture_output=True, text=True)
    assert repro.returncode == 1, repro.stdout + repro.stderr
    assert (
        "repro: recompiling the exported program under the recorded environment (package.pt2 was built with cpu "
        "another CPU, this machine has"
    ) in repro.stdout
    assert "reproduced: output 0 holds 12 NaN/Inf value(s) of 12" in repro.stderr
    assert left_behind(watched_tmpdir) == []  # the run's children, minify's judges, repro.py


def test_a_cache_that_cannot_store_warns_once_and_goes_on(tmp_path: Path, built_package: Path) -> None:
    """Storing fails mid-run (here every shard dir is taken by a file, so mkdir and the lock fail with real
    OSErrors, as a full or read-only disk makes them fail): one warning, then the built package is used as is."""
    cache = PackageCache.open(tmp_path / "cache", max_bytes=1 << 30)
    assert cache is not None
    for shard in range(256):
        (tmp_path / "cache" / f"{shard:02x}").write_text("")
    with pytest.warns(
        AOTICacheWarning, match=r"cannot store packages \(File exists\); going on without storing"
    ) as seen:
        for key in ("a" * 64, "b" * 64):
            with cache.locked(key):
                assert cache.lookup(key) is None
                assert cache.store(key, built_package, compile_seconds=1.0) == built_package
    assert len([w for w in seen if issubclass(w.category, AOTICacheWarning)]) == 1
    assert built_package.is_file()


MISS_TESTS = """
import os

import torch

CHANGED = os.environ.get("CHANGE_THE_MODEL") == "1"


def _model():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    return model, (torch.randn(2, 4),)


def test_weight(aoti_compile):
    model, inputs = _model()
    if CHANGED:
        with torch.no_grad():
            model[0].weight[0, 0] += 1
    aoti_compile(model, inputs)


def test_config(aoti_compile):
    aoti_compile(*_model(), inductor_configs={"size_asserts": False} if CHANGED else {})


def test_env(aoti_compile, monkeypatch):
    if CHANGED:
        monkeypatch.setenv("TORCHINDUCTOR_DEBUG_SYMBOL", "1")
    aoti_compile(*_model())


def test_activation(aoti_compile):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Sigmoid() if CHANGED else torch.nn.ReLU())
    aoti_compile(model, (torch.randn(2, 4),))


def test_shape(aoti_compile):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU())
    aoti_compile(model, (torch.randn(5 if CHANGED else 2, 4),))
"""


def test_a_miss_names_what_differs_from_the_tests_nearest_entry(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52, item 3: a changed weight, Inductor config and codegen env var each give a miss that names it, in
    the summary under -v, in the test's JUnit properties and on the --aoti-html page. A test without an entry of its
    own is compared with another test's entry of the same graph. Issue 62, item 11: relu -> sigmoid says the graph
    differs, not the signature (the model takes and returns the same); a changed shape names the input. Issue 63,
    item 4: a cold run's misses, which have no earlier entry to compare with, are counted, not named."""
    pytester.makepyfile(test_miss=MISS_TESTS)
    cache = tmp_path / "cache"
    first = run_pytest("-p", "no:logging", "-v", cache=cache)
    first.assert_outcomes(passed=5)
    first.stdout.fnmatch_lines(["aoti cache: 2 hits, 3 misses, *, 3 of them new (no earlier entry)"])
    assert " missed" not in first.stdout.str()

    monkeypatch.setenv("CHANGE_THE_MODEL", "1")
    second = run_pytest("-p", "no:logging", "-v", "--junitxml=r.xml", "--aoti-html=page.html", cache=cache)
    second.assert_outcomes(passed=5)
    weight = "test_miss.py::test_weight missed: the graph is the same, the weights differ (1 tensor: 0.weight)"
    nearest = "(nearest: an entry of test_miss.py::test_weight): the graph is the same"
    second.stdout.fnmatch_lines(
        [
            "aoti cache: 0 hits, 5 misses, *",
            f"aoti cache: {weight}",
            f"aoti cache: test_miss.py::test_config missed {nearest}, Inductor config 'size_asserts' True → False",
            f"aoti cache: test_miss.py::test_env missed {nearest}, codegen env 'TORCHINDUCTOR_DEBUG_SYMBOL' unset → 1",
            "aoti cache: test_miss.py::test_activation missed: the graph differs",
            "aoti cache: test_miss.py::test_shape missed: input 'input' shape (2, 4) → (5, 4)",
        ]
    )
    assert "of them new" not in second.stdout.str()
    cases = junit_cases(pytester.path / "r.xml")
    assert cases["test_weight"]["properties"]["aoti_cache_miss"] == weight  # type: ignore[index]
    page = (pytester.path / "page.html").read_text()
    assert "aoti_cache_miss" in page and "Inductor config &#x27;size_asserts&#x27; True → False" in page


def test_an_entry_keeps_the_parts_of_its_key_locally_and_in_the_signed_manifest(
    tmp_path: Path, built_package: Path
) -> None:
    """The parts' digests travel in the remote entry's signed manifest; a runner that fetches the entry keeps the
    parts beside it too, so its own later misses can be explained against it."""
    from pytest_aoti.core.remote_cache import RemoteSettings, manifest_key
    from tests.redis_server import REDIS_SERVER, RedisServer

    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'pytest-aoti[test]')")
    parts = key_parts(export_small(seeded_small()), {}, CPU)
    server = RedisServer(tmp_path / "redis").start()
    try:
        remote = RemoteSettings(server.url(), b"s3cret-for-tests")
        runner_a = PackageCache.open(tmp_path / "a", max_bytes=1 << 30, remote=remote)
        assert runner_a is not None
        with runner_a.building_for("t.py::test_a"):
            runner_a.store(parts.key, built_package, compile_seconds=1.0, parts=parts)
        uploaded = json.loads(server.admin().get(manifest_key(parts.key)))
        assert uploaded["parts"] == parts.short_digests()
        runner_b = PackageCache.open(tmp_path / "b", max_bytes=1 << 30, remote=remote)
        assert runner_b is not None
        with runner_b.building_for("t.py::test_b"):
            assert runner_b.lookup(parts.key, parts) is not None and runner_b.stats.remote_hits == 1
    finally:
        server.stop()
    sidecar = json.loads(next((tmp_path / "b").glob("*/*.json")).read_text())
    assert sidecar["owner"] == "t.py::test_b" and sidecar["parts"] == parts.record()


def test_the_cache_plugin_blocked_runs_without_a_cache(pytester: pytest.Pytester, run_pytest: RunPytest) -> None:
    """``-p no:pytest_aoti.cache.plugin`` (the name ``--trace-config`` shows) blocks the cache's options with it: the
    session runs without a package cache, and the header says why (issue 62 item 10: every aoti test errored at
    setup with a KeyError)."""
    pytester.makepyfile(
        test_user="""
        import torch

        from aoti_models import MLP


        def test_builds_twice(aoti_compile):
            first = aoti_compile(MLP(), (torch.randn(4, 8),))
            second = aoti_compile(MLP(), (torch.randn(4, 8),))
            assert not first.from_cache and not second.from_cache
        """
    )
    result = run_pytest("-p", "no:pytest_aoti.cache.plugin", cache=None)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["aoti: device=*, cache=off (-p no:pytest_aoti.cache.plugin)*"])
    assert "KeyError" not in result.stdout.str()
