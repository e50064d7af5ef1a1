"""Self-verifying packages on the deployment machine, with real packages: one whose wrapper library is garbage (its
zip checksums valid) crashes the process that loads it, and fails as that file while the others still verify, in
``python -m pytest_aoti.verify`` and ``pytest --aoti-verify`` (isolated too), leaving nothing in TMPDIR; one
interpreter verifies many packages, and a crash starts exactly one more; SIGTERM leaves nothing behind; ``dist/``
is collected although pytest skips it by name; a link to a missing package is named; a tolerance of NaN is
refused."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases, left_behind, plugin_args

torch = pytest.importorskip("torch")

# mov eax, [0] then nops: every 16-byte-aligned function entry (where compilers put them) reads address 0.
_READS_ADDRESS_ZERO = bytes.fromhex("8b042500000000") + b"\x90" * 9


def _text_section(library: bytes) -> tuple[int, int]:
    """File offset and size of an ELF64 library's ``.text`` (its machine code)."""
    section_headers = struct.unpack_from("<Q", library, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", library, 0x3A)

    def header(index: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", library, section_headers + index * entry_size)
        return name, offset, size

    names = header(names_index)[1]
    for index in range(count):
        name, offset, size = header(index)
        if library[names + name : library.index(b"\0", names + name)] == b".text":
            return offset, size
    raise AssertionError("the library has no .text section")


def _with_garbage_code(package: Path, copy: Path) -> None:
    """``package`` with its wrapper library's code replaced by instructions that fault, written as a fresh zip: every
    member's CRC is valid, the library still an ELF file that dlopen maps; its static initializers crash."""
    with zipfile.ZipFile(package) as reader, zipfile.ZipFile(copy, "w") as writer:
        for info in reader.infolist():
            data = reader.read(info)
            if info.filename.endswith(".wrapper.so"):
                offset, size = _text_section(data)
                garbage = (_READS_ADDRESS_ZERO * (size // len(_READS_ADDRESS_ZERO) + 1))[:size]
                data = data[:offset] + garbage + data[offset + size :]
            writer.writestr(info, data)


@dataclass(frozen=True)
class Shipped:
    dist: Path  # mlp.pt2 (verifies), crashes.pt2 (garbage library), gone.pt2 (a link to a missing file)
    off_by_one: Path  # mlp's package with golden outputs 1.0 off what it computes


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> Shipped:
    from pytest_aoti.core.cache import PackageCache
    from pytest_aoti.core.compiler import compile_model
    from pytest_aoti.shared.bundled_io import write_bundled_io
    from pytest_aoti.verify import bundle_io
    from tests.aoti_models import MLP

    root = tmp_path_factory.mktemp("shipped")
    dist = root / "dist"
    torch.manual_seed(0)
    args = (torch.randn(4, 8),)
    cache = PackageCache.open(shared_cache, 2**31)
    compiled = compile_model(MLP().eval(), args, package_dir=root / "build", cache=cache)
    bundle_io(compiled.package_path, compiled.exported_program, args, output=dist / "mlp.pt2")
    _with_garbage_code(dist / "mlp.pt2", dist / "crashes.pt2")
    (dist / "gone.pt2").symlink_to(root / "deleted.pt2")
    outputs = compiled(*args)
    off_by_one = root / "off_by_one.pt2"
    write_bundled_io(compiled.package_path, off_by_one, compiled.exported_program, args, {}, outputs + 1.0, "cpu")
    compiled.release()
    return Shipped(dist, off_by_one)


def test_a_package_that_crashes_its_loader_fails_alone(shipped: Shipped, watched_tmpdir: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest_aoti.verify", "dist"],
        cwd=shipped.dist.parent,
        capture_output=True,
        text=True,
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "ok dist/mlp.pt2 on cpu" in out  # the others on the command line are still verified
    assert "FAILED dist/crashes.pt2: the package crashed the process that loaded and ran it (SIGSEGV)" in out
    assert (
        f"FAILED dist/gone.pt2: a symbolic link to {shipped.dist.parent / 'deleted.pt2'}, which does not exist" in out
    )
    # The crashed load's extraction went with the verifier's own temp dir.
    assert left_behind(watched_tmpdir) == []


@pytest.mark.parametrize("isolate", [[], ["--aoti-isolate"]], ids=["plain", "isolate"])
def test_pytest_verify_finds_dist_and_survives_a_crash(
    pytester: pytest.Pytester, run_pytest: RunPytest, shipped: Shipped, watched_tmpdir: Path, isolate: list[str]
) -> None:
    shutil.copytree(shipped.dist, pytester.path / "dist", symlinks=True)
    # No path: dist/ is where packages are shipped from, although pytest's norecursedirs skips it for tests.
    result = run_pytest("--aoti-verify", *isolate, "-p", "no:logging", "--junitxml=verify.xml", cache=None)
    result.assert_outcomes(passed=1, failed=2)
    cases = junit_cases(pytester.path / "verify.xml")
    assert sorted(cases) == ["verify[crashes.pt2]", "verify[gone.pt2]", "verify[mlp.pt2]"]
    assert cases["verify[mlp.pt2]"]["outcomes"] == []
    assert cases["verify[crashes.pt2]"]["outcomes"] == cases["verify[gone.pt2]"]["outcomes"] == ["failure"]
    text = result.stdout.str()
    assert "dist/crashes.pt2: the package crashed the process that loaded and ran it (SIGSEGV)" in text
    assert "dist/gone.pt2: a symbolic link to" in text
    assert left_behind(watched_tmpdir) == []


def test_tolerances_must_be_finite_and_not_negative(shipped: Shipped, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_aoti import AOTIVerifyError
    from pytest_aoti.verify.bundled import main, verify_package

    for rtol, atol in (("nan", "nan"), ("-1", "0"), ("0", "inf")):
        with pytest.raises(SystemExit) as exited:
            main(["--rtol", rtol, "--atol", atol, str(shipped.off_by_one)])
        assert exited.value.code == 2
        refused = next(value for value in (rtol, atol) if value != "0")
        assert f"expected a finite number >= 0, got '{refused}'" in capsys.readouterr().err
    with pytest.raises(AOTIVerifyError, match="rtol: expected a finite number >= 0, got float nan"):
        verify_package(shipped.off_by_one, rtol=float("nan"), atol=float("nan"))
    with pytest.raises(AOTIVerifyError, match="outputs differ from the bundled golden outputs"):
        verify_package(shipped.off_by_one)


VERIFY_OPS = """
import torch


@torch.library.custom_op("aoti_verify_tests::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@twice.register_fake
def _(x):
    return torch.empty_like(x)
"""


def test_a_package_of_custom_ops_verifies_where_their_module_is_imported(
    pytester: pytest.Pytester, run_pytest: RunPytest, shared_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_aoti.core.cache import PackageCache
    from pytest_aoti.core.compiler import compile_model
    from pytest_aoti.verify import bundle_io

    pytester.makepyfile(verify_ops=VERIFY_OPS)
    monkeypatch.syspath_prepend(str(pytester.path))
    import verify_ops  # type: ignore[import-not-found]

    class WithOp(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return verify_ops.twice(x.sin()) + 1  # type: ignore[no-any-return]

    args = (torch.randn(4, 8),)
    cache = PackageCache.open(shared_cache, 2**31)
    compiled = compile_model(WithOp(), args, package_dir=pytester.path / "build", cache=cache)
    bundle_io(compiled.package_path, compiled.exported_program, args, output=pytester.path / "dist" / "op.pt2")
    compiled.release()
    # The package is verified in a fresh interpreter, which has not imported the op's module unless told to.
    alone = run_pytest("--aoti-verify", "dist", "-p", "no:logging", cache=None)
    alone.assert_outcomes(failed=1)
    assert "aoti_verify_tests::twice" in alone.stdout.str()
    run_pytest("--aoti-verify", "--aoti-verify-import=verify_ops", "dist", cache=None).assert_outcomes(passed=1)


# Imported first by each interpreter that verifies packages (--aoti-verify-import): it notes its pid, so a test counts
# the interpreters a run started.
NOTES_ITS_PID = """
import os

with open("interpreters.txt", "a") as stream:
    stream.write(f"{os.getpid()}\\n")
"""


def test_one_interpreter_verifies_many_packages_and_a_crash_starts_one_more(
    pytester: pytest.Pytester, run_pytest: RunPytest, shipped: Shipped, watched_tmpdir: Path
) -> None:
    """``pytest --aoti-verify`` on 30 packages starts one interpreter, not 30 (issue #50 item 20: 300 packages took
    over 600 s); a package that crashes it in the middle fails alone, and exactly one more interpreter verifies the
    packages after it. Counted by process, not timed."""
    pytester.makepyfile(notes_its_pid=NOTES_ITS_PID)
    dist = pytester.path / "dist"
    dist.mkdir()
    for number in range(30):
        shutil.copy(shipped.dist / "mlp.pt2", dist / f"m{number:02d}.pt2")
    interpreters = pytester.path / "interpreters.txt"
    common = ["--aoti-verify", "--aoti-verify-import=notes_its_pid", "dist", "-p", "no:logging"]
    run_pytest(*common, cache=None).assert_outcomes(passed=30)
    assert len(interpreters.read_text().split()) == 1
    interpreters.unlink()
    shutil.copy(shipped.dist / "crashes.pt2", dist / "m14z_crashes.pt2")  # between m14 and m15
    result = run_pytest(*common, "--junitxml=verify.xml", cache=None)
    result.assert_outcomes(passed=30, failed=1)
    assert len(interpreters.read_text().split()) == 2
    cases = junit_cases(pytester.path / "verify.xml")
    assert [name for name, case in cases.items() if case["outcomes"]] == ["verify[m14z_crashes.pt2]"]
    assert "dist/m14z_crashes.pt2: the package crashed the process that loaded and ran it (SIGSEGV)" in (
        result.stdout.str()
    )
    assert left_behind(watched_tmpdir) == []


def test_a_failing_import_fails_each_package_without_an_interpreter_each(
    pytester: pytest.Pytester, run_pytest: RunPytest, shipped: Shipped
) -> None:
    """A module given to ``--aoti-verify-import`` that raises: every package fails naming it, and the interpreter
    that could not start is not started again for each package."""
    pytester.makepyfile(breaks_on_import=NOTES_ITS_PID + "\nraise RuntimeError('no ops here')\n")
    dist = pytester.path / "dist"
    dist.mkdir()
    for number in range(3):
        shutil.copy(shipped.dist / "mlp.pt2", dist / f"m{number}.pt2")
    result = run_pytest("--aoti-verify", "--aoti-verify-import=breaks_on_import", "dist", cache=None)
    result.assert_outcomes(failed=3)
    for number in range(3):
        assert (
            f"dist/m{number}.pt2: the interpreter that verifies packages could not start (exit status 2): "
            "FAILED --import breaks_on_import: RuntimeError: no ops here"
        ) in result.stdout.str()
    assert len((pytester.path / "interpreters.txt").read_text().split()) == 1


# Imported first by the interpreter that verifies packages: it notes its pid, then hangs, so the test's SIGTERM
# comes while the run waits for it. The CLI imports the module itself too, first (to fail early): only the verifying
# interpreter, whose TMPDIR is its own temp dir, hangs.
HANGS_ON_IMPORT = """
import os
import time

if "pytest-aoti-verify-" in os.environ.get("TMPDIR", ""):
    with open("interpreters.txt", "a") as stream:
        stream.write(f"{os.getpid()}\\n")
    time.sleep(3600)
"""

SLEEPS = """
import os
import time


def test_sleeps():
    with open("pytest.pid", "w") as stream:
        stream.write(str(os.getpid()))
    time.sleep(3600)
"""


@pytest.mark.parametrize("when", ["pytest waits for it", "another test runs", "the CLI waits for it"])
def test_sigterm_leaves_no_verify_dir_behind(
    pytester: pytest.Pytester, shipped: Shipped, watched_tmpdir: Path, when: str
) -> None:
    """SIGTERM to ``pytest --aoti-verify`` or ``python -m pytest_aoti.verify`` ends the verifying interpreter and
    leaves nothing in TMPDIR (issue #50 item 21: a ``pytest-aoti-verify-*`` dir per run). While the run waits for an
    answer, it ends as with an isolated test (exit 143, pytest's summary printed); while another test runs, as pytest
    ends on SIGTERM."""
    pytester.makepyfile(hangs_on_import=HANGS_ON_IMPORT, notes_its_pid=NOTES_ITS_PID, test_sleeps=SLEEPS)
    shutil.copy(shipped.dist / "mlp.pt2", pytester.path / "mlp.pt2")
    pytest_run = [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-p", "no:randomly"]
    pytest_run += [f"--basetemp={pytester.path / 'basetemp'}", "--aoti-verify"]
    command, pid_file, expected, said = {
        "pytest waits for it": (
            [*pytest_run, "--aoti-verify-import=hangs_on_import", "mlp.pt2", "test_sleeps.py"],
            "interpreters.txt",
            143,
            "SIGTERM: pytest-aoti ended the interpreter verifying packages and stops the session",
        ),
        "another test runs": (
            [*pytest_run, "--aoti-verify-import=notes_its_pid", "mlp.pt2", "test_sleeps.py"],
            "pytest.pid",
            -signal.SIGTERM,
            "",
        ),
        "the CLI waits for it": (
            [sys.executable, "-m", "pytest_aoti.verify", "--import=hangs_on_import", "mlp.pt2"],
            "interpreters.txt",
            143,
            "SIGTERM: the verifying interpreter was ended and its temp files removed",
        ),
    }[when]
    with (pytester.path / "run.log").open("wb") as output:
        run = pytester.popen(
            command,
            stdin=pytester.CLOSE_STDIN,
            stdout=output,
            stderr=output,
            preexec_fn=_default_sigterm,  # whatever this xdist worker's own signal state
        )
        try:
            _pid_written(pytester.path / pid_file, run)
            interpreter = int((pytester.path / "interpreters.txt").read_text())
            run.send_signal(signal.SIGTERM)
            returncode = run.wait(timeout=300)
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    log = (pytester.path / "run.log").read_text()
    assert returncode == expected, log[-5000:]
    assert said in log
    _wait_gone(interpreter)
    assert left_behind(watched_tmpdir) == []


def test_a_killed_runs_verify_dir_is_removed_by_the_next_run(
    pytester: pytest.Pytester, shipped: Shipped, watched_tmpdir: Path
) -> None:
    """SIGKILL to a run that verifies packages leaves its ``pytest-aoti-verify-*`` dir (nothing runs in a killed
    process): the next run that verifies removes it, and never the dir of a run that is alive, nor one it did not
    make (issue #62 item 14)."""
    pytester.makepyfile(hangs_on_import=HANGS_ON_IMPORT)
    shutil.copy(shipped.dist / "mlp.pt2", pytester.path / "mlp.pt2")
    namespace = os.stat("/proc/self/ns/pid").st_ino
    alive = watched_tmpdir / "pytest-aoti-verify-alive"
    alive.mkdir()
    (alive / "owner").write_text(f"{namespace} {os.getpid()}")
    not_ours = watched_tmpdir / "pytest-aoti-verify-not-ours"  # no owner: not made by a verifying run
    not_ours.mkdir()
    killed = pytester.popen(
        [sys.executable, "-m", "pytest_aoti.verify", "--import=hangs_on_import", "mlp.pt2"],
        stdin=pytester.CLOSE_STDIN,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _pid_written(pytester.path / "interpreters.txt", killed)
    finally:
        killed.kill()
        killed.wait()
    _wait_gone(int((pytester.path / "interpreters.txt").read_text()))
    left = sorted(set(left_behind(watched_tmpdir)) - {alive.name, not_ours.name})
    assert len(left) == 1 and left[0].startswith("pytest-aoti-verify-"), left
    run = pytester.run(sys.executable, "-m", "pytest_aoti.verify", "mlp.pt2", timeout=600)
    assert run.ret == 0, run.stdout.str() + run.stderr.str()
    assert left_behind(watched_tmpdir) == sorted([alive.name, not_ours.name])


def _default_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _pid_written(pid_file: Path, process: subprocess.Popen[bytes]) -> None:
    """Minutes allowed: a busy machine is slow."""
    deadline = time.monotonic() + 300
    while not pid_file.exists() or not pid_file.read_text():
        assert process.poll() is None and time.monotonic() < deadline, "the run ended or never got there"
        time.sleep(0.2)


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 300
    while _alive(pid):
        assert time.monotonic() < deadline, "the verifying interpreter outlived its parent"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running, as far as /proc says (a zombie is gone for our purpose)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
