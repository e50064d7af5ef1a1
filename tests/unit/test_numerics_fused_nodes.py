"""Stage numerics on what GPT-2's package holds (issue 61 item 6: a divergence on a real architecture): an extern call
saves its arguments under its ATen op's name, and a fused kernel stores only the nodes something outside it reads.
Both made the first divergent kernel transformers' mask kernel instead of the user's stateful activation: the
kernel's ``cumsum`` (finished by the extern call after it) and ``diff`` (read only inside the kernel) were each
compared with the closest buffer the kernel wrote, another node's. The wrapper lines are the compile's (torch 2.13,
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
"""
INFO = {
    f"{MASK_KERNEL}:1": {"pre_grad_nodes": ["sub", "unsqueeze", "diff", "cumsum", "ne"]},
    "aoti_torch_cpu_cumsum:2": {"pre_grad_nodes": ["cumsum"]},
}


def test_an_extern_call_saved_under_its_aten_name_is_a_launch_with_its_handles_nodes(tmp_path: Path) -> None:
    package = tmp_path / "model.pt2"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("model/data/aotinductor/model/c4rk.wrapper.cpp", WRAPPER)
        archive.writestr("model/data/aotinductor/model/kernel_information.json", json.dumps(INFO))
    launches = package_launches(package)
    assert [(launch.kernel, launch.args, launch.nodes) for launch in launches] == [
        (MASK_KERNEL, ("buf2", "buf3"), ("sub", "unsqueeze", "diff", "cumsum", "ne")),
        ("at::_ops::cumsum::call", ("buf3",), ("cumsum",)),
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
