"""The machine's one identity and Inductor's cache dir (issue 53): read once, by one function each, and the same
as what torch and Inductor themselves say, including for a user with no passwd entry (a container run under an
arbitrary uid), where Inductor names its cache after the uid."""

from __future__ import annotations

import ast
import dataclasses
import getpass
import os
from pathlib import Path

import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

import pytest_aoti
from pytest_aoti.core import machine
from pytest_aoti.core.cache_key import key_parts
from pytest_aoti.core.isa_verdicts import isa_probe_identity
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


def test_the_package_keys_compiler_is_the_machines_one_compiler() -> None:
    """The key's compiler part is the machine identity's (issue 53: the key had its own ``$CXX``/``which g++``)."""
    program = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    shown = key_parts(program, {}, torch.device("cpu")).shown["compiler"]
    cxx = machine.machine_identity().cxx
    assert shown == cxx.identity == f"{cxx.command}: {cxx.version}"
    if "CXX" not in os.environ:  # Inductor reads $CXX once, at import
        assert shown.startswith(f"{cpp_compiler()}: ")


def test_the_isa_probes_record_follows_the_machine_identity() -> None:
    here = machine.machine_identity()
    assert isa_probe_identity() == isa_probe_identity(here)
    other_compiler = dataclasses.replace(here, cxx=machine.CxxCompiler("clang++", None, "clang version 18.1.3"))
    other_cpu = dataclasses.replace(here, cpu_flags=(*here.cpu_flags, "amx_tile"))
    other_torch = dataclasses.replace(here, torch="0.0.0")
    digests = {isa_probe_identity(identity) for identity in (here, other_compiler, other_cpu, other_torch)}
    assert len(digests) == 4
    # Nothing of the process: where the compiler is on PATH differs between two shells of one machine.
    assert isa_probe_identity(dataclasses.replace(here, cxx=dataclasses.replace(here.cxx, path="/elsewhere"))) == (
        isa_probe_identity(here)
    )


def test_only_the_machine_module_reads_cpuinfo() -> None:
    package = Path(pytest_aoti.__file__).parent
    readers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value == "/proc/cpuinfo"
    )
    assert set(readers) == {"core/machine.py"}, readers
