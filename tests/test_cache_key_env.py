"""The package key's environment part (issue 62, item 3): only the variables that change the compiled artifact are
keyed, and none that can hold a credential is keyed, stored or shown. ``TORCHINDUCTOR_REDIS_URL``, Inductor's own
remote cache with its password, used to be a "codegen env" value: printed in the miss line, kept in JUnit, in the
cache's sidecars, on the ``--aoti-html`` page and in a repro bundle's ``env.json``, and rotating the password missed
every package."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases

torch = pytest.importorskip("torch")

from pytest_aoti.core.cache_key import CODEGEN_ENV_NAMES  # noqa: E402

SECRET = "hunter2-S3CRET"
REDIS_URL = f"redis://:{SECRET}@127.0.0.1:1/0"  # nothing listens there; Inductor's remote caches are off anyway
ROTATED_URL = "redis://:rotated-0TH3R@127.0.0.1:1/0"

KEY_SCRIPT = """
import json
import os

import torch

from pytest_aoti.core.cache_key import key_parts

torch.manual_seed(0)
program = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), (torch.randn(2, 4),))
parts = key_parts(program, {}, torch.device("cpu"))
os.environ["TORCHINDUCTOR_DEBUG_COMPILE"] = "1"  # read when Inductor builds, not at import
debug_build = key_parts(program, {}, torch.device("cpu")).key
print(json.dumps({"key": parts.key, "record": parts.record(), "debug_build": debug_build}))
"""

# Variables the key ignored or must ignore, set by users and CI: none of them changes the generated code.
_UNKEYED = {
    "TORCHINDUCTOR_REDIS_URL": ROTATED_URL,
    "TORCHINDUCTOR_REDIS_HOST": "cache.example",
    "CXX": "g++",  # the compiler Inductor builds with anyway: the key holds the compiler it names
    "AOTI_RUNTIME_CHECK_INPUTS": "1",  # read by the package when it runs
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
}


def _key_in_a_fresh_interpreter(tmp_path: Path, **env: str) -> dict[str, object]:
    """The key parts of one small model in a new interpreter under ``env`` (Inductor's config reads the environment
    when it is imported), over an environment without any of the variables this module sets."""
    base = {
        k: v for k, v in os.environ.items() if k not in {*_UNKEYED, "TORCHINDUCTOR_NAN_ASSERTS", *CODEGEN_ENV_NAMES}
    }
    script = tmp_path / "key.py"
    script.write_text(KEY_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], env={**base, **env}, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_only_what_changes_the_code_is_keyed(tmp_path: Path) -> None:
    """Rotating Inductor's Redis password, ``CXX=g++`` and the other unkeyed variables keep the key; a debug
    stage's variable (through Inductor's config) and a build variable change it. The record an entry keeps holds
    no secret."""
    if subprocess.run(["g++", "--version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no g++ here")
    plain = _key_in_a_fresh_interpreter(tmp_path)
    with_password = _key_in_a_fresh_interpreter(tmp_path, TORCHINDUCTOR_REDIS_URL=REDIS_URL)
    rotated = _key_in_a_fresh_interpreter(tmp_path, **_UNKEYED)
    nan_asserts = _key_in_a_fresh_interpreter(tmp_path, TORCHINDUCTOR_NAN_ASSERTS="1")
    assert plain["key"] == with_password["key"] == rotated["key"]
    assert SECRET not in json.dumps(with_password) and "REDIS" not in json.dumps(with_password)
    assert with_password["record"] == plain["record"]
    assert nan_asserts["key"] != plain["key"]
    assert nan_asserts["record"]["config"]["nan_asserts"] == "True"  # type: ignore[index]
    assert plain["debug_build"] != plain["key"]


def test_the_allow_list_names_variables_inductor_reads_outside_its_config() -> None:
    """Each keyed variable is one Inductor reads itself, where it compiles or builds (not only through its config,
    which the key holds as config values): the list cannot drift into names no release reads."""
    inductor = Path(torch.__file__).parent / "_inductor"
    sources = "\n".join(path.read_text(errors="replace") for path in inductor.rglob("*.py") if path.name != "config.py")
    for name in CODEGEN_ENV_NAMES:
        assert re.search(rf"""(environ\.get|getenv|environ\[)\(?\s*["']{name}["']""", sources), name


NAN_TESTS = """
import pytest
import torch
from aoti_models import LogModel


def test_model(aoti_compile):
    torch.manual_seed(0)
    aoti_compile(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()), (torch.randn(2, 4),))


@pytest.mark.aoti_ima
def test_nan(aoti_compile):
    aoti_compile(LogModel(), (torch.rand(4, 3) + 0.5,))(-torch.ones(4, 3))
"""


def _files_holding(root: Path, secret: bytes) -> list[str]:
    return sorted(str(path) for path in root.rglob("*") if path.is_file() and secret in path.read_bytes())


def test_inductors_redis_password_shows_nowhere(
    pytester: pytest.Pytester, run_pytest: RunPytest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose environment holds Inductor's Redis URL with its password, a debug rerun that writes a repro
    bundle among its tests: the password is in no output, JUnit XML, cache sidecar, ``--aoti-html`` page or bundle
    file. The next run, under a rotated password, hits."""
    pytester.makepyfile(test_user=NAN_TESTS)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TORCHINDUCTOR_REDIS_URL", REDIS_URL)
    result = run_pytest("-v", "-rA", "--junitxml=r.xml", "--aoti-html=page.html", cache=cache)
    result.assert_outcomes(passed=1, failed=1)
    output = result.stdout.str() + result.stderr.str()
    assert SECRET not in output
    bundle = Path(str(junit_cases(pytester.path / "r.xml")["test_nan"]["properties"]["aoti_bundle"]))  # type: ignore[index]
    assert (bundle / "env.json").exists() and "TORCHINDUCTOR_NAN_ASSERTS" in (bundle / "env.json").read_text()
    assert (pytester.path / "page.html").exists() and list(cache.glob("*/*.json"))
    # Every file the run wrote: the JUnit XML, the page, the children's logs and the bundle (in the run's dir),
    # and the cache's sidecars.
    assert _files_holding(pytester.path, SECRET.encode()) == []
    assert _files_holding(cache, SECRET.encode()) == []
    assert _files_holding(bundle, SECRET.encode()) == []

    monkeypatch.setenv("TORCHINDUCTOR_REDIS_URL", ROTATED_URL)
    rotated = run_pytest("-v", "-k", "test_model", cache=cache)
    rotated.assert_outcomes(passed=1, deselected=1)
    rotated.stdout.fnmatch_lines(["aoti cache: 1 hits, 0 misses, *"])


def test_a_bundles_environment_leaves_out_what_may_hold_a_credential(monkeypatch: pytest.MonkeyPatch) -> None:
    """``env.json`` is attached to bug reports: a URL (its password in it) or a variable named as a secret is left
    out; the debug settings ``repro.py`` needs stay."""
    from pytest_aoti.debug.bundle import recorded_environment

    monkeypatch.setenv("TORCHINDUCTOR_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("TORCH_HUB_TOKEN", "hf_secret")
    monkeypatch.setenv("PYTORCH_TEST_PASSWORD", "pw")
    monkeypatch.setenv("TORCHINDUCTOR_NAN_ASSERTS", "1")
    monkeypatch.setenv("TORCHINDUCTOR_POST_GRAD_PASSES", "1")  # "PASS" in a name that holds none
    recorded = recorded_environment()
    assert not {"TORCHINDUCTOR_REDIS_URL", "TORCH_HUB_TOKEN", "PYTORCH_TEST_PASSWORD"} & set(recorded)
    assert recorded["TORCHINDUCTOR_NAN_ASSERTS"] == "1" and recorded["TORCHINDUCTOR_POST_GRAD_PASSES"] == "1"
