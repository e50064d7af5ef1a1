"""What pytest-aoti says about the installed torch (core/torch_versions.py), on version strings: an older release
than it needs stops the session with one line, a newer one than tested is named in the header. Plain functions."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_aoti.core import torch_versions
from pytest_aoti.core.torch_versions import NEWEST_TESTED, release_key, too_old_problem, untested_note


@pytest.mark.parametrize(
    ("version", "key"),
    [
        ("2.13.0+cpu", (0, (2, 13, 0))),
        ("2.15.0.dev20260101+cu130", (0, (2, 15, 0))),
        ("2.11.0a0+git1234abc", (0, (2, 11, 0))),
        ("v2.14.1", (0, (2, 14, 1))),
        ("3", (0, (3,))),
        # A PEP 440 epoch (issue 62 item 16): newer than any release without one.
        ("1!2.13.0", (1, (2, 13, 0))),
        ("nightly", None),
        ("", None),
        ("2.13.0 junk", None),
    ],
)
def test_release_key_reads_pep_440(version: str, key: tuple[int, tuple[int, ...]] | None) -> None:
    assert release_key(version) == key


@pytest.mark.parametrize("version", ["2.10.0", "2.10.2+cpu", "2.9.1+cu128", "1.13.1", "2.1"])
def test_an_older_torch_is_one_line_naming_the_version_needed(version: str) -> None:
    problem = too_old_problem(version)
    assert problem == (f"pytest-aoti needs torch>=2.11; torch {version} is installed (pip install 'torch>=2.11')")
    assert "\n" not in problem


@pytest.mark.parametrize(
    "version", ["2.11.0", "2.11.0a0+git1234abc", "2.13.0+cpu", "2.14.1", "2.16.0", "3.0", "1!2.13.0", "1!1.0", None]
)
def test_a_claimed_or_newer_torch_is_no_problem(version: str | None) -> None:
    assert too_old_problem(version) is None


def test_an_unreadable_version_is_not_refused_but_called_untested() -> None:
    assert too_old_problem("nightly") is None
    assert untested_note("nightly") == f"untested torch nightly (newest tested: {NEWEST_TESTED})"


@pytest.mark.parametrize("version", ["2.11.0", "2.13.0+cpu", "2.14.1", "2.14.1+cu130", "2.12.0", "2.10.0", None])
def test_a_tested_or_older_torch_has_no_note(version: str | None) -> None:
    assert untested_note(version) is None


@pytest.mark.parametrize("version", ["2.14.2", "2.15.0", "2.15.0.dev20260101+cpu", "3.0.0", "1!2.13.0"])
def test_a_newer_torch_than_tested_is_named(version: str) -> None:
    assert untested_note(version) == f"untested torch {version} (newest tested: 2.14.1)"


def test_the_tested_releases_are_in_order_and_the_oldest_is_the_claim() -> None:
    keys = [release_key(version) for version in torch_versions.TESTED]
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert keys[0] is not None and keys[0] == (0, (*torch_versions.OLDEST, 0))
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"torch>={".".join(map(str, torch_versions.OLDEST))}"' in pyproject


def test_the_installed_version_is_read_from_metadata_without_importing_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A distribution found earlier on the path wins, as for pip: a torch-2.10.0.dist-info first on sys.path is the
    version read, and reading it imports nothing of torch's."""
    dist_info = tmp_path / "torch-2.10.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.10.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = set(sys.modules)
    assert torch_versions.installed_torch_version() == "2.10.0"
    assert not {name for name in set(sys.modules) - modules if name.split(".")[0] == "torch"}


def test_no_torch_metadata_is_no_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [])
    assert torch_versions.installed_torch_version() is None
