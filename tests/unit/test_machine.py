"""The machine's one identity and Inductor's cache dir (issue 53): read once, by one function each, and the same
as what torch and Inductor themselves say, including for a user with no passwd entry (a container run under an
arbitrary uid), where Inductor names its cache after the uid."""

from __future__ import annotations

import getpass
import os
from pathlib import Path

import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from pytest_aoti.core import machine
from pytest_aoti.core.torch_private import cpp_compiler
from pytest_aoti.debug import bundle
from pytest_aoti.shared.environment import environment


def test_the_inductor_cache_dir_is_inductors_own_default() -> None:
    assert machine.inductor_cache_dir() == Path(default_cache_dir())


def test_a_user_with_no_passwd_entry_gets_inductors_uid_cache_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_passwd_entry() -> str:
        raise KeyError(f"getpwuid(): uid not found: {os.getuid()}")

    monkeypatch.setattr(getpass, "getuser", no_passwd_entry)
    assert machine.inductor_cache_dir().name == f"torchinductor_uid_{os.getuid()}"
    try:
        inductors_own = Path(default_cache_dir())
    except KeyError:
        # torch 2.11 has no fallback of its own (getpass.getuser() raises): there is nothing to agree with, and the
        # plugin must still not crash, which the line above checks.
        return
    assert machine.inductor_cache_dir() == inductors_own


def test_the_identity_is_what_torch_and_inductor_say() -> None:
    identity = machine.machine_identity()
    assert identity.torch == torch.__version__ and identity.cuda == torch.version.cuda
    if "CXX" not in os.environ:  # Inductor reads $CXX once, at import
        assert identity.cxx.command == cpp_compiler()
    assert identity.cxx.version and not identity.cxx.version.startswith("unknown")


def test_the_cpu_is_read_from_cpuinfo_once_for_every_record() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo here")
    names = [
        line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
    ]
    assert machine.cpu_model() == (names[0] if names else machine.cpu_model())
    identity = machine.machine_identity()
    assert environment("cpu")["cpu"] == identity.cpu_model and environment("cpu")["compiler"] == identity.cxx.version
    assert bundle._versions()["cpu"] == identity.cpu_model


def test_repro_py_runs_the_cores_own_functions() -> None:
    """repro.py runs without pytest-aoti: it gets the functions' source, so it cannot drift from them."""
    import inspect

    for function in (machine.cpu_model, machine.inductor_cache_dir):
        assert inspect.getsource(function) in bundle.REPRO_SCRIPT
    assert "# pytest_aoti.core.machine" not in bundle.REPRO_SCRIPT
