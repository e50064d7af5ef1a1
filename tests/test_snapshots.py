"""Golden outputs and self-verifying packages, end to end with real compiles: a user suite records its goldens,
passes, catches a weight edit that eager shares, fails in CI without a golden, updates; a package built with bundled
I/O verifies from a directory without the model's source, and a bit-flipped copy fails clearly."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import cast

import pytest
from safetensors import safe_open

from tests.conftest import RunPytest, junit_cases

USER_TESTS = """
import os
import shutil

import torch

from aoti_models import MLP


class Tree(torch.nn.Module):
    def forward(self, x):
        return {"scaled": (x * 2, x.sum()), "low": (x + 1).to(torch.bfloat16)}


def mlp():
    model = MLP().eval()
    if os.environ.get("EDIT_WEIGHT"):  # a retrained checkpoint: eager and the package move together
        with torch.no_grad():
            model.first.weight[0, 0] += 1e-3
    return model


def test_check(aoti_check):
    aoti_check(mlp(), (torch.randn(4, 8),), snapshot=True)


def test_tree(aoti_compile, aoti_snapshot):
    compiled = aoti_compile(Tree(), (torch.randn(3, 2),))
    aoti_snapshot(compiled(torch.ones(3, 2)))


def test_ship(aoti_compile):
    compiled = aoti_compile(MLP().eval(), (torch.randn(4, 8),), bundle_io=True)
    os.makedirs("dist", exist_ok=True)
    shutil.copy(compiled.package_path, "dist/mlp.pt2")
"""

GOLDENS = Path("__aoti_snapshots__") / "test_user"


def _flip_a_byte_of_the_library(package: Path, copy: Path) -> None:
    data = bytearray(package.read_bytes())
    with zipfile.ZipFile(package) as archive:
        library = next(info for info in archive.infolist() if info.filename.endswith(".so"))
    start = library.header_offset + 30 + len(library.filename.encode()) + len(library.extra)
    data[start + library.file_size // 2] ^= 0x01
    copy.write_bytes(bytes(data))


def _built_for_another_machine(package: Path, copy: Path) -> None:
    """The package with AOTI's recorded build metadata naming an ARM machine."""
    with zipfile.ZipFile(package) as reader, zipfile.ZipFile(copy, "w") as writer:
        for info in reader.infolist():
            data = reader.read(info)
            if info.filename.endswith("wrapper_metadata.json"):
                data = json.dumps({**json.loads(data), "AOTI_MACHINE": "aarch64"}).encode()
            writer.writestr(info, data)


def test_goldens_record_match_catch_drift_and_update(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    monkeypatch.delenv("CI", raising=False)
    check_golden, tree_golden = (
        pytester.path / GOLDENS / "test_check.safetensors",
        pytester.path / GOLDENS / ("test_tree.safetensors"),
    )

    # 1. The first run records every golden and says so.
    first = run_pytest("-p", "no:logging")
    first.assert_outcomes(passed=3)
    first.stdout.fnmatch_lines(
        [
            f"aoti snapshot written (new golden outputs: review and commit it): {check_golden} "
            "(check0.example: written)",
            f"aoti snapshot written *{tree_golden} (snapshot0: written)",
        ]
    )
    with safe_open(str(tree_golden), framework="pt") as stored:
        names = set(stored.keys())
        assert stored.get_tensor("cpu/snapshot0['low']").dtype.__repr__() == "torch.bfloat16"  # no conversion
    assert names == {"cpu/snapshot0['scaled'][0]", "cpu/snapshot0['scaled'][1]", "cpu/snapshot0['low']"}

    # 2. The second run matches them, and writes nothing.
    second = run_pytest("-p", "no:logging")
    second.assert_outcomes(passed=3)
    assert "aoti snapshot" not in second.stdout.str()

    # 3. A weight edit that eager shares: aoti_check's eager comparison passes, the golden does not.
    monkeypatch.setenv("EDIT_WEIGHT", "1")
    drift = run_pytest("-p", "no:logging", "--aoti-debug", "--junitxml=drift.xml")
    drift.assert_outcomes(passed=2, failed=1)
    text = drift.stdout.str()
    assert "snapshot 'check0.example' differs from its golden outputs (cpu, dtype defaults)" in text
    needed = re.search(r"passes with atol >= (\S+) \(at rtol 1.3e-06\)", text)
    assert needed is not None and 1e-5 < float(needed.group(1)) < 1e-2, text
    assert "environment diff (recorded → now): none" in text
    assert "the package is not the one the golden was recorded with" in text
    # Not a kernel's fault: no debug rerun.
    assert "verdict: not rerun: the outputs differ from golden outputs recorded earlier" in text
    assert "stage kernels" not in text
    drifted = junit_cases(pytester.path / "drift.xml")["test_check"]
    assert drifted["outcomes"] == ["failure"]
    properties = cast(dict[str, str], drifted["properties"])  # which golden failed, and its picture's data
    assert properties["aoti_snapshot"] == "check0.example: mismatched"
    assert properties["aoti_snapshot_file"].endswith("test_check.safetensors")
    assert "aoti_figure_data" in properties

    # 4. In CI a golden that is missing fails the test, and a golden no test uses is listed.
    tree_golden.unlink()
    stale = pytester.path / GOLDENS / "test_renamed.safetensors"
    stale.write_bytes(check_golden.read_bytes())
    monkeypatch.setenv("CI", "true")
    ci = run_pytest("-p", "no:logging", "--aoti-snapshot-update", "-k", "test_check")
    ci.assert_outcomes(passed=1, deselected=2)
    assert "aoti snapshot updated" in ci.stdout.str() and "unused" not in ci.stdout.str()  # -k: cannot know
    missing = run_pytest("-p", "no:logging", "-n", "2")  # the controller lists unused goldens from its workers' runs
    missing.assert_outcomes(passed=2, failed=1)
    missing.stdout.fnmatch_lines(
        [
            "*no golden outputs for snapshot 'snapshot0' on cpu in *test_tree.safetensors; this run may not record "
            "them (CI is set, or --aoti-snapshot=fail)*",
            "aoti snapshots unused (1 golden file(s) no test used; delete them if stale):",
            f"  {stale}",
        ]
    )
    assert not tree_golden.exists()

    # 5. Updated, the edited model passes again (outside CI).
    monkeypatch.delenv("CI")
    run_pytest("-p", "no:logging").assert_outcomes(passed=3)
    assert tree_golden.exists()

    # 6. The shipped package verifies from a directory without the model's source or any test; a flipped byte fails,
    # and a package whose build metadata names another machine is refused at load, in one line.
    dist = pytester.path / "dist"
    _flip_a_byte_of_the_library(dist / "mlp.pt2", dist / "flipped.pt2")
    _built_for_another_machine(dist / "mlp.pt2", dist / "arm.pt2")
    deploy = pytester.path / "deploy"
    deploy.mkdir()
    verified = run_pytest("--aoti-verify", str(dist), "-rA", "--junitxml=verify.xml", cache=None, cwd=deploy)
    verified.assert_outcomes(passed=1, failed=2)
    assert verified.ret == pytest.ExitCode.TESTS_FAILED
    out = verified.stdout.str()
    assert re.search(r"flipped.pt2: corrupted: archive member \S+\.so fails its CRC check", out)
    assert "arm.pt2: the package was built for machine aarch64; this machine is x86_64" in out
    assert "outputs match the bundled golden outputs (dtype defaults)" in out
    cases = junit_cases(deploy / "verify.xml")
    assert cases["verify[mlp.pt2]"]["outcomes"] == []
    assert cases["verify[flipped.pt2]"]["outcomes"] == cases["verify[arm.pt2]"]["outcomes"] == ["failure"]

    # 7. The same check without pytest, as a deployment script runs it: exit status 0.
    cli = subprocess.run(
        [sys.executable, "-m", "pytest_aoti.verify", str(dist / "mlp.pt2")], cwd=deploy, capture_output=True, text=True
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"ok {dist / 'mlp.pt2'} on cpu" in cli.stdout


GOLDENS_WITHOUT_A_COMPILE = """
import os

import pytest
import torch


@pytest.mark.parametrize("expression", ["x*2", "x/2"])
def test_ids(aoti_snapshot, expression):
    x = torch.arange(4.0)
    aoti_snapshot(eval(expression))


def test_empty(aoti_snapshot):
    aoti_snapshot((torch.ones(1),) if os.environ.get("CHANGE_STRUCTURE") else ())


def test_extended_name(aoti_snapshot):
    aoti_snapshot(torch.ones(2), name="logits")
    aoti_snapshot(torch.zeros(3), name="logits.aux")


def test_object(aoti_snapshot):
    aoti_snapshot(object())


def test_generator(aoti_snapshot):
    aoti_snapshot(x for x in range(2))


def test_sparse(aoti_snapshot):
    aoti_snapshot(torch.eye(2).to_sparse())


def test_number_as_name(aoti_snapshot):
    aoti_snapshot(torch.ones(1), name=5)


def test_name_twice(aoti_snapshot):
    aoti_snapshot(torch.ones(1), name="a")
    aoti_snapshot(torch.ones(1), name="a")


def test_tolerance_without_snapshot(aoti_check):
    aoti_check(torch.nn.Linear(2, 2), (torch.ones(1, 2),), snapshot_rtol=1e-3, snapshot_atol=1e-5)


def test_compile_with_snapshot(aoti_compile):
    aoti_compile(torch.nn.Linear(2, 2), (torch.ones(1, 2),), snapshot=True)
"""

REFUSED = {
    "test_object": "TypeError: snapshot 'snapshot0': a value of type object; a snapshot holds tensors and plain values",
    "test_generator": (
        "TypeError: snapshot 'snapshot0': a value of type generator (a generator or iterator: pass list(...) of it)"
    ),
    "test_sparse": "TypeError: snapshot 'snapshot0': a tensor of layout torch.sparse_coo (store leaf.to_dense())",
    "test_number_as_name": "TypeError: snapshot name: expected a string, got int 5",
    "test_name_twice": "ValueError: snapshot name 'a' is used twice in this test: give each snapshot its own name",
    "test_tolerance_without_snapshot": (
        "TypeError: snapshot_rtol/snapshot_atol are the golden comparison's tolerances, and this call takes no "
        "snapshot: add snapshot=True, or drop them"
    ),
    "test_compile_with_snapshot": "TypeError: snapshot=True: only aoti_check compares a package's outputs",
}


def _failure_messages(path: Path) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    return {
        case.get("name", ""): failure.get("message", "")
        for case in ET.parse(path).getroot().iter("testcase")
        for failure in case.iter("failure")
    }


def test_goldens_file_names_structure_names_and_refused_values(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two parameter ids a file name cannot tell apart, an output without leaves, a name that extends another, and
    what a golden cannot hold, in a user's suite under xdist; the ini twin of --aoti-snapshot-update does not act."""
    pytester.makepyfile(test_user=GOLDENS_WITHOUT_A_COMPILE)
    monkeypatch.delenv("CI", raising=False)
    kept = ["test_ids", "test_empty", "test_extended_name"]

    first = run_pytest("-p", "no:logging", "-n", "2", "--junitxml=first.xml")
    first.assert_outcomes(passed=4, failed=len(REFUSED))
    failures = _failure_messages(pytester.path / "first.xml")
    for name, message in REFUSED.items():
        assert failures[name].startswith(message), failures[name]
        assert " at 0x" not in failures[name]
    assert "INTERNALERROR" not in first.stdout.str()
    goldens = sorted(path.name for path in (pytester.path / GOLDENS).iterdir())
    assert goldens == [
        "test_empty.safetensors",
        "test_extended_name.safetensors",
        "test_ids[x%2A2].safetensors",
        "test_ids[x%2F2].safetensors",
        "test_name_twice.safetensors",  # its first snapshot, before the second was refused
    ]

    second = run_pytest("-p", "no:logging", "-n", "2", "-k", " or ".join(kept), "--junitxml=second.xml")
    second.assert_outcomes(passed=4)  # xdist's workers deselect: the controller counts none
    assert "aoti snapshot written" not in second.stdout.str()
    cases = junit_cases(pytester.path / "second.xml")
    recorded = {name: cast(dict[str, str], case["properties"])["aoti_snapshot"] for name, case in cases.items()}
    assert recorded == {
        "test_ids[x*2]": "snapshot0: matched",
        "test_ids[x/2]": "snapshot0: matched",
        "test_empty": "snapshot0: matched",
        "test_extended_name": "logits: matched; logits.aux: matched",
    }

    # The empty golden holds: a change of structure fails, also with the ini twin of --aoti-snapshot-update set
    # (an action for one run, not a setting), and is recorded with --aoti-snapshot-update.
    monkeypatch.setenv("CHANGE_STRUCTURE", "1")
    pytester.makeini("[pytest]\naoti_snapshot_update = true\n")
    changed = run_pytest("-p", "no:logging", "-k", "test_empty")
    changed.assert_outcomes(failed=1, deselected=len(REFUSED) + 3)
    changed.stdout.fnmatch_lines(["*cpu/snapshot0[[]0[]]: in this run's outputs, not in the golden*"])
    pytester.makeini("[pytest]\n")
    updated = run_pytest("-p", "no:logging", "-k", "test_empty", "--aoti-snapshot-update")
    updated.assert_outcomes(passed=1, deselected=len(REFUSED) + 3)
    updated.stdout.fnmatch_lines(["aoti snapshot updated: *test_empty.safetensors (snapshot0: updated)"])

    # The feature's own option, checked at startup where pytest checks its own.
    bad = run_pytest("--aoti-snapshot=sometimes")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["ERROR: --aoti-snapshot: expected auto, write or fail, got 'sometimes'"])


def test_an_empty_golden_file_is_rewritten_by_an_update(
    pytester: pytest.Pytester, run_pytest: RunPytest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A golden file emptied (a bad merge, a truncated copy): the run names it; ``--aoti-snapshot-update`` rewrites it,
    also in CI, and the next run matches it."""
    pytester.makepyfile(test_user="import torch\n\ndef test_one(aoti_snapshot):\n    aoti_snapshot(torch.ones(2))\n")
    monkeypatch.setenv("CI", "true")
    golden = pytester.path / GOLDENS / "test_one.safetensors"
    golden.parent.mkdir(parents=True)
    golden.write_bytes(b"")
    named = run_pytest("-p", "no:logging")
    named.assert_outcomes(failed=1)
    named.stdout.fnmatch_lines(["*test_one.safetensors: an empty file, not a golden file; delete it *"])
    updated = run_pytest("-p", "no:logging", "--aoti-snapshot-update")
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(["aoti snapshot written*: *test_one.safetensors (snapshot0: written)"])
    assert golden.stat().st_size > 0
    run_pytest("-p", "no:logging").assert_outcomes(passed=1)
