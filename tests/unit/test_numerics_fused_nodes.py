"""Stage numerics on what GPT-2's package holds (issue 61 item 6: a divergence on a real architecture): an extern call
saves its arguments under its ATen op's name, a custom op's call through the proxy executor saves none, and a fused
kernel stores only the nodes something outside it reads. Each made the first divergent kernel one before the user's
stateful activation: transformers' mask kernel's ``cumsum`` (finished by the extern call after it) and ``diff`` (read
only inside the kernel), and the custom op's node in the kernel that computes its input, were each compared with the
closest buffer the kernel wrote, another node's. The wrapper lines are the compile's (torch 2.13,
printer 1, provenance tracking); ``tests/test_real_architecture_faults.py`` runs the whole stage."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import torch

from pytest_aoti.debug.numerics import Launch, NodeValues, first_divergence, package_launches

MASK_KERNEL = "cpp_fused_add_arange_cat_cumsum_ne_slice_sub_unsqueeze_0"
WRAPPER = f"""
    // [Provenance debug handles] {MASK_KERNEL}:1
    aoti_torch_save_tensor_handle(buf2, "buf2", "before_launch", "{MASK_KERNEL}");
    aoti_torch_save_tensor_handle(buf3, "buf3", "before_launch", "{MASK_KERNEL}");
    {MASK_KERNEL}((const int64_t*)(buf2.data_ptr()), (int64_t*)(buf3.data_ptr()));
    aoti_torch_save_tensor_handle(buf2, "buf2", "after_launch", "{MASK_KERNEL}");
    aoti_torch_save_tensor_handle(buf3, "buf3", "after_launch", "{MASK_KERNEL}");
    // [Provenance debug handles] aoti_torch_cpu_cumsum:2
    AtenTensorHandle buf5_handle;
    aoti_torch_save_tensor_handle(buf3, "buf3", "before_launch", "at::_ops::cumsum::call");
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_cpu_cumsum(buf3, -1L, &var_0, &buf5_handle));
    aoti_torch_save_tensor_handle(buf3, "buf3", "after_launch", "at::_ops::cumsum::call");
    // [Provenance debug handles] aoti_torch_cpu_checked_scale:3
    AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_proxy_executor_call_function(proxy_executor, 0, 0, nullptr, 2, handles));
"""
INFO = {
    f"{MASK_KERNEL}:1": {"pre_grad_nodes": ["sub", "unsqueeze", "diff", "cumsum", "ne"]},
    "aoti_torch_cpu_cumsum:2": {"pre_grad_nodes": ["cumsum"]},
    "aoti_torch_cpu_checked_scale:3": {"pre_grad_nodes": ["checked_scale"]},
}


def test_extern_calls_are_launches_with_their_handles_nodes(tmp_path: Path) -> None:
    package = tmp_path / "model.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("model/data/aotinductor/model/c4rk.wrapper.cpp", WRAPPER)
        archive.writestr("model/data/aotinductor/model/kernel_information.json", json.dumps(INFO))
    launches = package_launches(package)
    assert launches[0].writes == ("buf3",)  # its call casts buf2 to const: read only
    assert [(launch.kernel, launch.args, launch.nodes) for launch in launches] == [
        (MASK_KERNEL, ("buf2", "buf3"), ("sub", "unsqueeze", "diff", "cumsum", "ne")),
        ("at::_ops::cumsum::call", ("buf3",), ("cumsum",)),
        # A custom op through the proxy executor saves nothing: a launch of no arguments still finishes its node.
        ("aoti_torch_cpu_checked_scale", (), ("checked_scale",)),
    ]


def _save(capture: Path, when: str, kernel: str, arg: str, value: torch.Tensor) -> None:
    (capture / "tmp").mkdir(parents=True, exist_ok=True)
    torch.save(value, capture / "tmp" / f"aoti_torch{when}_launch_{kernel}_{arg}_cpu.pt")


def test_nodes_the_kernel_does_not_store_are_not_compared_with_its_buffers(tmp_path: Path) -> None:
    """The mask kernel stores ``ne(diff(positions))`` as int64 zeros; eager's ``diff`` is ones (read only by ``ne``
    inside the kernel) and its ``cumsum`` is the extern call's: neither diverges. Its values as GPT-2 made them."""
    ne_as_int = torch.zeros(1, 8, dtype=torch.int64)
    _save(tmp_path, "before", MASK_KERNEL, "buf3", torch.full((1, 8), 9, dtype=torch.int64))
    _save(tmp_path, "after", MASK_KERNEL, "buf3", ne_as_int)
    _save(tmp_path, "before", "at::_ops::cumsum::call", "buf3", ne_as_int)
    _save(tmp_path, "after", "at::_ops::cumsum::call", "buf3", ne_as_int)
    launches = [
        Launch(MASK_KERNEL, ("buf3",), ("diff", "cumsum", "ne")),
        Launch("at::_ops::cumsum::call", ("buf3",), ("cumsum",)),
    ]
    eager = {
        "diff": torch.ones(1, 8, dtype=torch.int64),
        "ne": torch.zeros(1, 8, dtype=torch.bool),
        "cumsum": torch.arange(8).unsqueeze(0),
    }
    values = NodeValues(
        eager=eager,
        exported=dict(eager),
        order=["diff", "ne", "cumsum"],
        users={"diff": ("ne",), "ne": ("cumsum",), "cumsum": ("output",)},
    )
    finding = first_divergence(launches, tmp_path, values, tolerance=None)
    assert finding.diverged is None, finding


def test_a_kernel_that_writes_back_what_it_read_is_still_compared(tmp_path: Path) -> None:
    """Export baked the stateful activation's count, 1: the package's ``mul`` by it, in place, writes back the values
    it read, while eager multiplied by 2. The call's non-const cast says the kernel writes its argument."""
    kernel = "cpp_fused_mul_5"
    read = torch.linspace(-1, 1, 8).reshape(1, 8)
    _save(tmp_path, "before", kernel, "buf24", read)
    _save(tmp_path, "after", kernel, "buf24", read)
    values = NodeValues(
        eager={"mul_4": read * 2}, exported={"mul_4": read}, order=["mul_4"], users={"mul_4": ("view",)}
    )
    launch = Launch(kernel, ("buf24",), ("mul_4",))
    assert first_divergence([launch], tmp_path, values, tolerance=None).diverged is None  # as it was
    written = Launch(kernel, ("buf24",), ("mul_4",), writes=("buf24",))
    found = first_divergence([written], tmp_path, values, tolerance=None).diverged
    assert found is not None and (found.kernel, found.node) == (kernel, "mul_4"), found
