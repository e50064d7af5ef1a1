"""Self-verifying packages on the deployment machine, with real packages: one whose wrapper library is garbage (its
zip checksums valid) crashes the process that loads it, and fails as that file while the others still verify, in
``python -m pytest_aoti.verify`` and ``pytest --aoti-verify`` (isolated too), leaving nothing in TMPDIR; ``dist/``
is collected although pytest skips it by name; a link to a missing package is named; a tolerance of NaN is
refused."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import RunPytest, junit_cases, left_behind

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
    from pytest_aoti.core.bundled_io import write_bundled_io
    from pytest_aoti.core.cache import PackageCache
    from pytest_aoti.core.compiler import compile_model
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
    from pytest_aoti.core.errors import AOTIVerifyError
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
