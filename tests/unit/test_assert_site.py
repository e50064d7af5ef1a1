"""A device-side assert that fired while Inductor ran kernels at compile time (it autotunes by running them) ends in
a kernel (issue 61 item 2): CUDA's assert message names the kernel's generated source file and line, the verdict
reads the kernel there, and maps its nodes to the user's lines through this run's export. The real run is
``tests/gpu/test_real_architectures_cuda.py``; here, the parsing and the verdict over the text CUDA prints."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_aoti.core.protocol import Outcome, Stage
from pytest_aoti.debug import kernel_log
from pytest_aoti.debug.child import ChildRun
from pytest_aoti.debug.reporting import headline
from pytest_aoti.debug.stages import BundleFacts, KernelsResult, StageResults, make_verdict
from pytest_aoti.debug.triton_source import kernel_at

# The shape of a kernel file Inductor writes into its cache and Triton compiles (the source string of
# ``async_compile.triton``), with the kernel's header comment naming the graph nodes it computes.
KERNEL_SOURCE = """
import triton
import triton.language as tl

from torch._inductor.runtime import triton_helpers, triton_heuristics

# Topologically Sorted Source Nodes: [position_embeds, add], Original ATen: [aten.embedding, aten.add]
@triton_heuristics.pointwise(size_hints={'x': 4096}, filename=__file__)
@triton.jit
def triton_poi_fused_add_embedding_1(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = (xindex // 32)
    tl.device_assert(((0 <= x0) & (x0 < 64)) | ~(xmask), "index out of bounds: x0 < 64")
    tmp1 = tl.load(in_ptr1 + (x0), xmask)
    tl.store(out_ptr0 + (xindex), tmp1, xmask)
""".lstrip("\n")


def _assert_line(source: Path) -> int:
    return next(n for n, line in enumerate(source.read_text().splitlines(), 1) if "tl.device_assert" in line)


def test_the_assert_site_is_read_with_or_without_the_kernels_name(tmp_path: Path) -> None:
    source = tmp_path / "czyvp7abc.py"
    source.write_text(KERNEL_SOURCE)
    line = _assert_line(source)
    for function in ("triton_poi_fused_add_embedding_1: ", ""):
        log = (
            f"{source}:{line}: {function}block: [2,0,0], thread: [64,0,0] Assertion `index out of bounds: x0 < 64` "
            "failed.\n"
        )
        site = kernel_log.device_assert_site(log)
        assert site is not None and (site.file, site.line) == (str(source), line), log
        assert site.condition == "index out of bounds: x0 < 64"
    kernel = kernel_at(source, line)
    assert kernel is not None
    assert kernel.name == "triton_poi_fused_add_embedding_1"
    assert kernel.nodes == ("position_embeds", "add")
    assert kernel.assert_line.startswith("tl.device_assert(((0 <= x0) & (x0 < 64))")


def test_a_file_that_is_gone_or_not_a_kernel_gives_no_kernel(tmp_path: Path) -> None:
    assert kernel_at(tmp_path / "gone.py", 3) is None
    (tmp_path / "empty.py").write_text("x = 1\n")
    assert kernel_at(tmp_path / "empty.py", 1) is None
    (tmp_path / "dir.py").mkdir()
    assert kernel_at(tmp_path / "dir.py", 1) is None


def test_a_compile_time_assert_verdict_names_the_kernel_the_assert_and_the_users_line(tmp_path: Path) -> None:
    """GPT-2 fed more tokens than it has positions: the assert fired while the compile ran the kernel, so no launch
    was printed; the verdict names the kernel, the assert's line, and the user's line of the position embedding."""
    source = tmp_path / "czyvp7abc.py"
    source.write_text(KERNEL_SOURCE)
    line = _assert_line(source)
    log = (
        "[pytest-aoti] phase: compile /x/GPT2Model.pt2\n"
        f"{source}:{line}: block: [2,0,0], thread: [64,0,0] Assertion `index out of bounds: x0 < 64` failed.\n"
    )
    (tmp_path / "kernels.log").write_text(log)
    run = ChildRun(
        stage=Stage.KERNELS,
        outcome=Outcome.CRASHED,
        returncode=-6,
        signal_name="SIGABRT",
        seconds=1.0,
        log_path=tmp_path / "kernels.log",
        command=["python", "-m", "pytest"],
        env_delta={},
        cwd=tmp_path,
        phases=["export", "compile"],
    )
    trace = (
        'File "/site-packages/transformers/models/gpt2/modeling_gpt2.py", line 590, in forward\n'
        "    position_embeds = self.wpe(position_ids)\n"
    )
    bundle = BundleFacts(tmp_path, node_traces={"position_embeds": trace, "add": trace})
    results = StageResults(runs=(run,), kernels=KernelsResult.read(run))
    verdict = make_verdict("t.py::test_gpt2", results, bundle=bundle)
    assert verdict.suspect_kernel == "triton_poi_fused_add_embedding_1"
    text = headline(verdict)
    assert "in kernel triton_poi_fused_add_embedding_1 (its device-side assert at " in text, text
    assert f":{line}: tl.device_assert(((0 <= x0) & (x0 < 64))" in text, text
    assert "while Inductor ran it at compile time" in text, text
    assert "modeling_gpt2.py:590 in forward: position_embeds = self.wpe(position_ids)" in text, text
    assert json.dumps(text)  # one line
