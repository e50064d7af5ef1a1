"""The kernel-log parser over real logs: the reports recorded on an H100 (docs/gpu-evidence), whose sections hold
the debug children's raw printer output. Plain functions, no pytest plugin involved."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_aoti.core.phases import last_phase
from pytest_aoti.debug import kernel_log

EVIDENCE = Path(__file__).parents[2] / "docs" / "gpu-evidence"


def _kernels_stage_log(report: str) -> str:
    text = (EVIDENCE / report).read_text()
    start = text.index("--- log of stage kernels (trimmed) ---")
    # It ends where the next stage's log or the report's next section ("----- Captured stderr call -----") starts.
    end = re.compile(r"^(--- log of stage |-{5,} \w)", re.MULTILINE).search(text, start + 1)
    return text[start : end.start() if end else len(text)]


def test_illegal_memory_access_names_the_kernel_that_never_finished() -> None:
    log = _kernels_stage_log("ima_marked_plain.txt")
    assert kernel_log.died_in(log) == "gather_shift_kernel_0"
    assert kernel_log.last_completed(log) == "triton_poi_fused_mul_0"
    assert kernel_log.suspect_kernels(log) == ("gather_shift_kernel_0", "triton_poi_fused_mul_0")
    assert kernel_log.cuda_error(log) == "CUDA error: an illegal memory access was encountered"
    assert last_phase(log) == "run"


def test_nan_run_names_the_first_kernel_whose_output_holds_nan() -> None:
    text = (EVIDENCE / "nan_inside.txt").read_text()
    tensors_log = text[text.index("--- log of stage tensors (trimmed) ---") :]
    first = kernel_log.first_nonfinite(kernel_log.tensor_stats(tensors_log))
    assert first is not None
    assert (first.when, first.kernel, first.arg, first.mean) == (
        "after",
        "triton_poi_fused_add_log_mul_0",
        "buf0",
        "nan",
    )
    assert kernel_log.nan_assert(_kernels_stage_log("nan_inside.txt")) == "At least one NaN in buf0"
    assert kernel_log.died_in(_kernels_stage_log("nan_inside.txt")) is None


def test_model_inputs_are_stats_but_not_kernel_outputs() -> None:
    text = (EVIDENCE / "nan_inside.txt").read_text()
    stats = kernel_log.tensor_stats(text[text.index("--- log of stage tensors (trimmed) ---") :])
    inputs = [block for block in stats if block.kernel is None]
    assert inputs and all(block.when == "input" for block in inputs)
    assert not any(block.nonfinite for block in inputs)  # the input (-1s) is finite; the NaN is made inside


def test_trim_keeps_head_and_tail_and_says_what_it_left_out() -> None:
    log = "\n".join(f"line {n}" for n in range(1000))
    trimmed = kernel_log.trim(log, head=3, tail=2)
    assert trimmed.splitlines() == [
        "line 0",
        "line 1",
        "line 2",
        "... 995 lines left out (full log in the file named above) ...",
        "line 998",
        "line 999",
    ]
    assert kernel_log.trim("short") == "short"


SANITIZER_OUTPUT = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at gather_shift_kernel+0x130 in oob.py:8
=========     by thread (64,0,0) in block (0,0,0)
=========     Access to 0x7f2716c00100 is out of bounds
=========     and is 1,859,041 bytes after the nearest allocation at 0x7f2716a3a300 of size 32 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========
========= Invalid __global__ read of size 4 bytes
=========     at gather_shift_kernel+0x130 in oob.py:8
=========     by thread (65,0,0) in block (0,0,0)
========= ERROR SUMMARY: 5 errors
"""


def test_compute_sanitizer_first_error() -> None:
    """compute-sanitizer 2025.3.1's memcheck output as recorded on the H100 (shared/reference/aoti-facts.md)."""
    error = kernel_log.sanitizer_error(SANITIZER_OUTPUT)
    assert error is not None
    assert (error.access, error.kernel, error.thread, error.block, error.address, error.count) == (
        "Invalid __global__ read of size 4 bytes",
        "gather_shift_kernel",
        "(64,0,0)",
        "(0,0,0)",
        "0x7f2716c00100",
        5,
    )
    assert error.describe() == (
        "Invalid __global__ read of size 4 bytes in gather_shift_kernel by thread (64,0,0) in block (0,0,0): access "
        "to 0x7f2716c00100 is out of bounds, 1,859,041 bytes after the nearest allocation at 0x7f2716a3a300 of size "
        "32 bytes; 5 error(s) in all"
    )
    assert kernel_log.sanitizer_error("========= ERROR SUMMARY: 0 errors\n") is None


CUDA_NAN = Path(__file__).parents[1] / "data" / "cuda_nan_logs"


def test_a_stats_header_after_a_scalar_arguments_line_is_read() -> None:
    """The printer ends a scalar argument's line with a literal backslash-n (issue 50 item 6, a real H200 log):
    ``[  … - 16L: 16  ]\\n[  … - 64L: 64  ]\\n[  after_launch - … - buf21  ]:`` on one line. Every stats header
    is read, each block keeps its own stats, and the first non-finite output is the log's own, buf21."""
    tensors_log = (CUDA_NAN / "deep_tensors.log").read_text()
    assert "  ]\\n[  after_launch - triton_per_fused_add_addmm_gelu_log_native_layer_norm_sub_3 - buf21  ]:" in (
        tensors_log
    )
    stats = kernel_log.tensor_stats(tensors_log)
    assert len(stats) == tensors_log.count("  ]:\n")  # every header, at the start of a line or not
    kernels_log = (CUDA_NAN / "deep_kernels.log").read_text()
    launched = {launch.kernel for launch in kernel_log.launches(kernels_log)}
    first = kernel_log.first_nonfinite([block for block in stats if block.kernel in (None, *launched)])
    assert first is not None
    assert (first.when, first.kernel, first.arg, first.mean, first.launch) == (
        "after",
        "triton_per_fused_add_addmm_gelu_log_native_layer_norm_sub_3",
        "buf21",
        "nan",
        1,
    )
    # The block before it (buf25 before that launch) keeps its own stats, not buf21's NaN.
    before = [b for b in stats if b.kernel == first.kernel and b.when == "before" and b.arg == "buf25"]
    assert [b.mean for b in before] == ["7.45058e-09"]
    # Stage kernels' NaN assert names the same buffer.
    assert kernel_log.nan_assert_buffer(kernel_log.nan_assert(kernels_log)) == "buf21"


def test_the_shallow_models_nan_is_its_fused_kernels_output() -> None:
    stats = kernel_log.tensor_stats((CUDA_NAN / "shallow_tensors.log").read_text())
    first = kernel_log.first_nonfinite(stats)
    assert first is not None
    assert (first.kernel, first.arg, first.mean) == ("triton_poi_fused_addmm_log_relu_sub_0", "buf1", "nan")
    # The bias printed before it keeps its finite stats (it had taken buf1's NaN).
    bias = [b for b in stats if b.kernel == first.kernel and b.when == "before" and b.arg == "a_bias"]
    assert bias and all(b.nonfinite is False for b in bias)


def test_each_launch_of_a_reused_kernel_is_counted() -> None:
    """The deep model's 8 blocks launch the matmul 8 times and one fused block kernel 4 times: a block of stats
    says which launch it belongs to (the source line is that launch's)."""
    stats = kernel_log.tensor_stats((CUDA_NAN / "deep_tensors.log").read_text())
    launches: dict[str | None, set[int]] = {}
    for block in stats:
        launches.setdefault(block.kernel, set()).add(block.launch)
    assert launches["aoti_torch_cuda_mm_out"] == set(range(1, 9))
    assert launches["triton_per_fused_add_addmm_gelu_native_layer_norm_1"] == {1, 2, 3, 4}
    assert launches[None] == {0}  # model inputs
    second = kernel_log.kernel_inputs(stats, "aoti_torch_cuda_mm_out", launch=2)
    assert [block.launch for block in second] == [2] * len(second) and second
