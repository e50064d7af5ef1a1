"""Source lines from a package's provenance data. The JSON is what torch 2.13.0 wrote into a package of
``tests/aoti_models.py::Crashy`` compiled with ``INDUCTOR_PROVENANCE=1`` (the e2e debug tests read real packages);
the linear entry's second frame is inside torch, as ``nn.Linear``'s is."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import zipfile
from pathlib import Path

from pytest_aoti.core.protocol import Outcome
from pytest_aoti.core.source_lines import SourceLine
from pytest_aoti.debug import kernel_log, provenance
from pytest_aoti.debug.child import ChildRun
from pytest_aoti.debug.reporting import headline, user_properties
from pytest_aoti.debug.stages import KernelsResult, Verdict, kernel_sources

TORCH_DIR = Path(importlib.util.find_spec("torch").origin).parent  # type: ignore[arg-type,union-attr]
MODELS = "/work/suite/aoti_models.py"
CRASHY_INFO = {
    "cpp_fused_add_maybe_crash_mul_sin_0:1": {
        "stack_traces": [f'File "{MODELS}", line 52, in forward\n    y = maybe_crash(torch.sin(x) * 2 + x)'],
        "post_grad_nodes": ["maybe_crash", "add", "mul", "sin"],
        "pre_grad_nodes": ["maybe_crash", "add", "mul", "sin"],
    },
    "aoti_torch_cpu_maybe_crash:2": {
        "stack_traces": [f'File "{MODELS}", line 52, in forward\n    y = maybe_crash(torch.sin(x) * 2 + x)'],
        "post_grad_nodes": ["maybe_crash"],
        "pre_grad_nodes": ["maybe_crash"],
    },
    "aoti_torch_cpu_addmm_out:4": {
        "stack_traces": [
            f'File "{MODELS}", line 60, in forward\n    return self.fc(y)\n'
            f'  File "{TORCH_DIR}/nn/modules/linear.py", line 134, in forward\n'
            "    return F.linear(input, self.weight, self.bias)"
        ],
        "post_grad_nodes": ["addmm"],
        "pre_grad_nodes": ["linear"],
    },
    "cpp_fused_add_cos_1:3": {
        "stack_traces": [f'File "{MODELS}", line 53, in forward\n    return y.cos() + 1'],
        "post_grad_nodes": ["add_1", "cos"],
        "pre_grad_nodes": ["add_1", "cos"],
    },
    "extern_kernel_of_a_custom_op:5": {"stack_traces": [], "post_grad_nodes": [], "pre_grad_nodes": ["my_op"]},
}


def _package(tmp_path: Path, info: object) -> Path:
    path = tmp_path / "package.pt2"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("model/data/aotinductor/model/kernel_information.json", json.dumps(info))
    return path


def test_launches_in_order_with_the_users_innermost_line(tmp_path: Path) -> None:
    sources = provenance.read_kernel_sources(_package(tmp_path, CRASHY_INFO))
    assert [s.name for s in sources] == [
        "cpp_fused_add_maybe_crash_mul_sin_0",
        "aoti_torch_cpu_maybe_crash",
        "cpp_fused_add_cos_1",
        "aoti_torch_cpu_addmm_out",
        "extern_kernel_of_a_custom_op",
    ]
    linear = sources[3]
    assert linear.lines == (SourceLine(MODELS, 60, "forward", "return self.fc(y)"),)
    assert provenance.where(linear, Path("/work")) == "at suite/aoti_models.py:60 in forward: return self.fc(y)"
    assert provenance.where(linear, Path("/elsewhere")) == f"at {MODELS}:60 in forward: return self.fc(y)"
    assert provenance.where(sources[4]) == "no source line recorded (op: my_op)"
    assert provenance.launch_of(sources, "cpp_fused_add_cos_1") == 2
    assert provenance.launch_of(sources, "cpp_fused_add_cos_1", occurrence=2) is None


def test_a_package_without_provenance_data_has_no_sources(tmp_path: Path) -> None:
    assert provenance.read_kernel_sources(_package(tmp_path, [])) == []
    (tmp_path / "broken.pt2").write_text("not a zip")
    assert provenance.read_kernel_sources(tmp_path / "broken.pt2") == []
    with zipfile.ZipFile(tmp_path / "plain.pt2", "w") as archive:
        archive.writestr("model/data/aotinductor/model/model.wrapper.cpp", "")
    assert provenance.read_kernel_sources(tmp_path / "plain.pt2") == []


def test_a_crash_between_kernels_names_the_next_calls_line(tmp_path: Path) -> None:
    log = (
        "[ before_launch: cpp_fused_add_maybe_crash_mul_sin_0 ]\n"
        "[ after_launch: cpp_fused_add_maybe_crash_mul_sin_0 ]\n"
        "Fatal Python error: Segmentation fault\n"
    )
    (tmp_path / "kernels.log").write_text(log)
    run = ChildRun(
        stage="kernels",
        outcome=Outcome.CRASHED,
        returncode=-11,
        signal_name="SIGSEGV",
        seconds=1.0,
        log_path=tmp_path / "kernels.log",
        command=["python"],
        env_delta={},
        cwd=tmp_path,
    )
    verdict = Verdict("t.py::test", stages=(run,), last_completed=kernel_log.last_completed(log))
    launches = provenance.read_kernel_sources(_package(tmp_path, CRASHY_INFO))
    sources = kernel_sources(verdict, launches, KernelsResult.read(run))
    verdict = dataclasses.replace(verdict, source_root=Path("/work/suite"), sources=sources)
    expected = "aoti_models.py:52 in forward: y = maybe_crash(torch.sin(x) * 2 + x)"
    assert f"the next call is aoti_torch_cpu_maybe_crash at {expected})" in headline(verdict)
    assert dict(user_properties(verdict))["aoti_source"] == f"aoti_torch_cpu_maybe_crash: at {expected}"


def test_this_runs_export_names_the_lines_of_a_cached_package(tmp_path: Path) -> None:
    """A package from the cache was compiled from another checkout (the key leaves locations out): the nodes'
    traces of this run's export win over the ones the package recorded."""
    moved = 'File "/checkout-b/aoti_models.py", line 70, in forward\n    y = maybe_crash(torch.sin(x) * 2 + x)'
    sources = provenance.read_kernel_sources(_package(tmp_path, CRASHY_INFO), {"maybe_crash": moved})
    assert sources[1].lines == (
        SourceLine("/checkout-b/aoti_models.py", 70, "forward", "y = maybe_crash(torch.sin(x) * 2 + x)"),
    )
    assert sources[2].lines[0].line == 53  # no trace of this run for add_1/cos: the package's


def test_a_crash_frame_in_any_of_pytest_aotis_subpackages_is_not_the_users(tmp_path: Path) -> None:
    """A crash inside a compiled model's call has pytest-aoti's own frames innermost (``core/compiler.py``: the
    package's run) and the user's test below them: the user's line is the test's, whichever subpackage of
    pytest-aoti the frames above it are in (an editable install is outside site-packages)."""
    import pytest_aoti.core.compiler as compiler

    test_file = tmp_path / "test_user.py"
    test_file.write_text("def test_crash(aoti_compile):\n    compiled(x)\n")
    frames = [
        kernel_log.CrashFrame(compiler.__file__, 280, "call"),
        kernel_log.CrashFrame(compiler.__file__, 250, "__call__"),
        kernel_log.CrashFrame(str(test_file), 2, "test_crash"),
    ]
    assert provenance.user_frame(frames) == SourceLine(str(test_file), 2, "test_crash", "compiled(x)")


def test_a_failure_that_is_not_a_crash_points_at_the_last_kernel_not_the_call_after_it(tmp_path: Path) -> None:
    """The call after the last completed kernel never ran unless the process crashed there: for a failure (a NaN
    assert stopping the package) JUnit's ``aoti_source`` is the last kernel's line (issue 50 item 6, the shallow
    model's ``aoti_source`` named the linear after its NaN)."""
    kernel = "cpp_fused_add_maybe_crash_mul_sin_0"
    log = f"[ before_launch: {kernel} ]\n[ after_launch: {kernel} ]\n"
    (tmp_path / "kernels.log").write_text(log)
    run = ChildRun(
        stage="kernels",
        outcome=Outcome.FAILED,
        returncode=1,
        signal_name=None,
        seconds=1.0,
        log_path=tmp_path / "kernels.log",
        command=["python"],
        env_delta={},
        cwd=tmp_path,
        error="RuntimeError: run_func_( container_handle_, …",
    )
    verdict = Verdict(
        "t.py::test",
        stages=(run,),
        last_completed=kernel_log.last_completed(log),
        nan_assert="At least one NaN in buf0",
    )
    launches = provenance.read_kernel_sources(_package(tmp_path, CRASHY_INFO))
    sources = kernel_sources(verdict, launches, KernelsResult.read(run))
    verdict = dataclasses.replace(verdict, source_root=Path("/work/suite"), sources=sources)
    assert set(verdict.sources) == {"suspect"}
    expected = "aoti_models.py:52 in forward: y = maybe_crash(torch.sin(x) * 2 + x)"
    assert dict(user_properties(verdict))["aoti_source"] == f"{kernel}: at {expected}"
    assert "the next call" not in headline(verdict)


def test_a_divergent_kernel_launched_twice_gets_the_lines_of_its_own_launch() -> None:
    """Two extern addmm calls (one per linear) share a name: the divergent one is the launch that computes the
    finding's nodes, with its own line, not the first launch's."""
    from pytest_aoti.core.protocol import Finding, KernelFinding
    from pytest_aoti.core.source_lines import SourceLine
    from pytest_aoti.debug.stages import Verdict, kernel_sources

    first = SourceLine("model.py", 11, "forward", "h = torch.relu(self.lin(x))")
    second = SourceLine("model.py", 14, "forward", "return self.out(h).sin()")
    sources = [
        provenance.KernelSource("aoti_torch_cpu_addmm_out", ("linear",), (first,)),
        provenance.KernelSource("cpp_fused_mul_relu_1", ("relu", "mul"), (first,)),
        provenance.KernelSource("aoti_torch_cpu_addmm_out", ("linear_1",), (second,)),
    ]
    diverged = KernelFinding(
        kernel="aoti_torch_cpu_addmm_out", launch=3, nodes=["linear_1"], node="linear_1", buffer="buf4",
        max_abs=0.6, max_rel=28.0, index=[3, 0], within_noise=False, inputs_matched=True,
    )  # fmt: skip
    verdict = Verdict("test_m.py::test_m", numerics=Finding(compared=3, diverged=diverged))
    assert kernel_sources(verdict, sources, None)["divergent"].lines == (second,)
