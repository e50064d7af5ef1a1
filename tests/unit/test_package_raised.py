"""A package that raised while it ran (issue 61 item 6): torch's error said as what happened (the kernel whose index
check failed, the custom op's line), and the verdict that leads with the op eager's replay stopped at. Over the text
torch 2.13 printed for transformers' GPT-2 fed 40 tokens with 32 positions and for a custom op that raised inside
its package (``tests/test_real_architecture_faults.py`` makes both for real)."""

from __future__ import annotations

from pathlib import Path

from pytest_aoti.core import compiler
from pytest_aoti.core.compiler import output_spec_error, package_run_error
from pytest_aoti.core.protocol import NonfiniteOrigin
from pytest_aoti.core.source_lines import SourceLine
from pytest_aoti.debug import kernel_log
from pytest_aoti.debug.provenance import KernelSource
from pytest_aoti.debug.reporting import headline, section_text, source_line
from pytest_aoti.debug.stages import StageResults, Verdict, explaining_origin
from tests.unit.test_reporting import _run, _stats_log

KERNEL = "cpp_fused_add_arange_embedding_native_layer_norm_unsqueeze_1"
KERNEL_ERROR = f"""index out of bounds: tmp6 < 32L
Exception raised from {KERNEL} at /tmp/torchinductor_root/cg/cy2l.kernel.cpp:83 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char>) + 0x9d (0x7fe4 in libc10.so)
frame #3: {KERNEL} + 0x24b (0x7fe3eca4211b in /tmp/p/c4rk.wrapper.so)
<omitting python frames>
"""
CUSTOM_OP_ERROR = """ValueError: checked_scale: a value 0.114 is past the limit 0.001

At:
  /home/user/project/test_model.py(8): checked_scale
  /venv/lib/python3.11/site-packages/torch/_library/custom_ops.py(502): wrapped_fn
  /venv/lib/python3.11/site-packages/torch/export/pt2_archive/_package.py(743): __call__
  /home/user/project/test_model.py(29): test_gpt2_custom_op
"""


def test_a_kernel_index_check_is_said_with_the_kernel_and_without_cpp_frames() -> None:
    error = package_run_error(RuntimeError(KERNEL_ERROR))
    assert error is not None and isinstance(error, RuntimeError)
    assert str(error).startswith(f"the package raised in kernel {KERNEL}: index out of bounds: tmp6 < 32 (an index")
    assert "frame #" not in str(error) and "--aoti-debug names the op" in str(error)
    # torch's frames are dropped, the generated source's place is not: where a reader finds the check that failed.
    assert "(the check is at /tmp/torchinductor_root/cg/cy2l.kernel.cpp:83, Inductor's generated source)" in str(error)


def test_a_custom_ops_error_is_said_with_its_line() -> None:
    error = package_run_error(RuntimeError(CUSTOM_OP_ERROR))
    assert error is not None
    assert str(error) == (
        "a Python op the package calls (a custom op) raised at /home/user/project/test_model.py:8 in checked_scale: "
        "ValueError: checked_scale: a value 0.114 is past the limit 0.001"
    )


def test_a_custom_op_in_a_path_with_a_space_is_said_with_its_own_line() -> None:
    # As torch 2.13 printed it for a custom op in "/tmp/my dir/exp_space.py": the op's frame, torch's, then the call
    # into the package (pytest-aoti's own frame, and the test's).
    plugin = compiler.__file__
    text = f"""ValueError: boom: too big

At:
  /tmp/my dir/exp_space.py(9): boom
  /venv/lib/python3.11/site-packages/torch/_library/custom_ops.py(502): wrapped_fn
  {plugin}(344): _run_checked_inputs
  /tmp/my dir/exp_space.py(20): <module>
"""
    error = package_run_error(RuntimeError(text))
    assert error is not None
    assert str(error) == (
        "a Python op the package calls (a custom op) raised at /tmp/my dir/exp_space.py:9 in boom: ValueError: boom: "
        "too big"
    )


def test_pytest_aotis_own_frame_is_never_the_ops() -> None:
    plugin = compiler.__file__
    text = f"ValueError: boom\n\nAt:\n  {plugin}(344): _run_checked_inputs\n  /home/u/t.py(20): test_boom\n"
    error = package_run_error(RuntimeError(text))
    assert error is not None and " at /home/u/t.py:20 in test_boom: " in str(error)


# An ATen op the package calls through the proxy executor failed its own check (torch 2.13, a linalg.cholesky of a
# matrix that is not positive-definite): raised from ATen's source, not from a kernel of the package.
ATEN_ERROR = """linalg.cholesky: The factorization could not be completed because the input is not positive-definite \
(the leading minor of order 1 is not positive-definite).
Exception raised from _linalg_check_errors at /__w/pytorch/pytorch/aten/src/ATen/native/BatchLinearAlgebra.cpp:1625 \
(most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::__cxx11::basic_string<char>) + 0x9d (0x7fe4 in libc10.so)
"""


def test_an_aten_ops_check_is_not_said_to_be_a_kernel_of_the_package() -> None:
    error = package_run_error(RuntimeError(ATEN_ERROR))
    assert error is not None and isinstance(error, RuntimeError)
    assert str(error).startswith(
        "an op the package calls (not one of its kernels) raised in _linalg_check_errors: linalg.cholesky: The "
        "factorization could not be completed"
    )
    assert "kernel _linalg_check_errors" not in str(error) and "frame #" not in str(error)


def test_a_kernel_in_a_single_generated_source_is_the_packages() -> None:
    # Torch releases that kept a package's kernels in its one "c<hash>.cpp".
    text = KERNEL_ERROR.replace("cy2l.kernel.cpp", "cy2lzoq4a6m7ydkd3o5fyk4hf2qgqmnbjkvzxt.cpp")
    error = package_run_error(RuntimeError(text))
    assert error is not None and str(error).startswith(f"the package raised in kernel {KERNEL}: ")


def test_an_output_spec_error_is_still_the_value_error_torch_raised() -> None:
    # A test that caught torch's error (pytest.raises(ValueError)) around the package call still catches it.
    torch_error = ValueError(
        "treespec.unflatten(leaves): 'leaves' has length 5 but the spec refers to a pytree that holds 1 items"
    )
    error = output_spec_error(torch_error, None)
    assert isinstance(error, ValueError) and "the package returned 5 outputs" in str(error)


def test_any_other_runtime_error_stays_torchs() -> None:
    assert package_run_error(RuntimeError("CUDA error: an illegal memory access was encountered")) is None
    assert package_run_error(RuntimeError("run_func_( container_handle_, ...) API call failed at x.cpp")) is None


WTE = SourceLine("modeling_gpt2.py", 569, "forward", "inputs_embeds = self.wte(input_ids)")
WPE = SourceLine("modeling_gpt2.py", 576, "forward", "position_embeds = self.wpe(position_ids)")
LN = SourceLine("modeling_gpt2.py", 276, "forward", "hidden_states = self.ln_1(hidden_states)")


def _index_verdict(tmp_path: Path, origin: NonfiniteOrigin | None) -> Verdict:
    """GPT-2's verdict fed 40 tokens: the token ids (in range) go into the kernel whose position check failed."""
    log = "Error: index out of bounds: tmp6 < 32L\n"
    stats = kernel_log.tensor_stats(
        _stats_log(
            ("aoti_model_inputs - arg28_1", "1", "48", "28.1"),
            (f"before_launch - {KERNEL} - arg28_1", "1", "48", "28.1"),
        )
    )
    source = KernelSource(KERNEL, ("layer_norm", "embedding", "embedding_1"), (LN, WTE, WPE), (WTE, WPE))
    return Verdict(
        "t.py::test",
        stages=(_run(tmp_path, "kernels", "failed", log=log, error="AOTIPackageRunError: the package raised"),),
        died_in=KERNEL,
        bounds_check=kernel_log.bounds_check(log),
        suspect_inputs=tuple(kernel_log.kernel_inputs(stats, KERNEL)),
        sources={"suspect": source, **({"origin": source} if origin is not None else {})},
        origin=origin,
        origin_line=WPE if origin is not None else None,
    )


def test_a_one_sided_index_check_puts_the_index_reads_first_and_blames_no_input(tmp_path: Path) -> None:
    """``tmp6 < 32`` guards an index the kernel computes (the position ids): the token ids, in their own range, are
    no bad input; the kernel's embedding lines lead."""
    text = headline(_index_verdict(tmp_path, None))
    assert f"in kernel {KERNEL} (before_launch with no after_launch) at modeling_gpt2.py:569 in forward: " in text
    assert "bad input" not in text, text


def test_the_op_the_replay_stopped_at_leads_the_verdict(tmp_path: Path) -> None:
    origin = NonfiniteOrigin(
        "raised",
        kind="index",
        node="embedding_1",
        op="aten.embedding.default",
        inputs=["wpe_weight (32x16: min -0.06, max 0.06)", "unsqueeze (1x40: min 0, max 39)"],
        output="index 39 outside [0, 32) (dim 0 of a 32x16 table)",
    )
    verdict = _index_verdict(tmp_path, origin)
    text = headline(verdict)
    assert text.startswith(
        "index out of range in aten.embedding.default (node embedding_1) at modeling_gpt2.py:576 in forward: "
        "position_embeds = self.wpe(position_ids): index 39 outside [0, 32) (dim 0 of a 32x16 table); its inputs: "
        f"wpe_weight (32x16: min -0.06, max 0.06), unsqueeze (1x40: min 0, max 39); in the package: {KERNEL}; failed"
    ), text
    # The kernel's lines: the op's first.
    assert f"in kernel {KERNEL} (before_launch with no after_launch) at modeling_gpt2.py:576 in forward: " in text
    assert source_line(verdict) == "aten.embedding.default: at modeling_gpt2.py:576 in forward: " + WPE.text
    assert "eager replay stopped at node embedding_1: index 39 outside [0, 32)" in section_text(verdict)


def test_a_replay_that_ran_through_is_dropped_for_an_error_the_package_raised(tmp_path: Path) -> None:
    """The replay's "stays finite" speaks of a NaN/Inf: for a package that raised it would be a false claim, and it
    is left out; where the replay stopped, or a NaN failure's replay, stays."""
    run = _run(tmp_path, "kernels", "failed", phases=["run"])
    raised = StageResults(runs=(run,))
    assert explaining_origin(NonfiniteOrigin("finite"), raised, nonfinite_failure=False) is None
    stopped = NonfiniteOrigin("raised", kind="error", node="checked_scale")
    assert explaining_origin(stopped, raised, nonfinite_failure=False) == stopped
    assert explaining_origin(NonfiniteOrigin("finite"), raised, nonfinite_failure=True) == NonfiniteOrigin("finite")
