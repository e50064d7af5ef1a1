"""Every private torch API pytest-aoti uses (``core/torch_private.__all__``), called on the installed torch: on one
small real package and its exported program. ``.ci/run`` runs this file on each torch release it tests (the
``torch_matrix`` mark), so a release that moves or changes one fails here by name (docs/torch-private-apis.md lists
them). A name added to ``__all__`` without a check here fails too."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import Dim

from pytest_aoti.core import torch_private
from pytest_aoti.core.compiler import compile_model

# On every torch release .ci/run tests: each private API on a real package (the warm-process ones included).
pytestmark = pytest.mark.torch_matrix

OP_NAME = "aoti_private_apis::double"


@torch.library.custom_op(OP_NAME, mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@double.register_fake
def _double_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Halves(torch.nn.Module):
    """A linear over a dynamic batch whose reshape makes export guard the batch (even)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).reshape(2, -1, 4).sum(0)


@dataclass
class Built:
    path: Path
    program: Any
    module: torch.nn.Module
    inputs: tuple[torch.Tensor, ...]
    expected: torch.Tensor


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    torch.manual_seed(0)
    module, inputs = Halves().eval(), (torch.randn(6, 8),)
    compiled = compile_model(
        module, inputs, package_dir=tmp_path_factory.mktemp("private-apis"), dynamic_shapes=({0: Dim.AUTO},)
    )
    with torch.no_grad():
        expected = module(*inputs)
    return Built(compiled.package_path, compiled.exported_program, module, inputs, expected)


def _runs(runner: Any, built: Built) -> None:
    outputs = runner(*built.inputs)
    torch.testing.assert_close(outputs[0] if isinstance(outputs, list | tuple) else outputs, built.expected)


def _check_package_loader(built: Built) -> None:
    _runs(torch_private.AOTICompiledModel(torch_private.package_loader(str(built.path), False, 1, -1)), built)


def _check_inductor_load_package(built: Built) -> None:
    runner = torch_private.inductor_load_package(
        str(built.path), run_single_threaded=False, num_runners=1, device_index=-1
    )
    _runs(runner, built)


def _check_package_metadata(built: Built) -> None:
    assert torch_private.package_metadata(str(built.path))["AOTI_DEVICE_KEY"] == "cpu"


def _check_dispatch_mode(built: Built) -> None:
    seen: list[Any] = []

    class Recorder(torch_private.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Recorder():
        built.module(*built.inputs)
    assert seen and all(isinstance(func, torch_private.OpOverload) for func in seen)


def _check_higher_order_operator(built: Built) -> None:
    assert isinstance(torch.ops.higher_order.cond, torch_private.HigherOrderOperator)


def _check_combine_args(built: Built) -> None:
    combined = torch_private.combine_args(built.module, built.inputs, {})
    assert list(combined) == ["x"] and combined["x"] is built.inputs[0]


def _check_tree_map_with_path(built: Built) -> None:
    seen: list[Any] = []
    combined = torch_private.combine_args(built.module, built.inputs, {})
    torch_private.tree_map_with_path(lambda path, value, dims: seen.append(dims), combined, {"x": {0: "batch"}})
    assert seen == [{0: "batch"}]


def _check_dims(built: Built) -> None:
    batch = Dim("batch")
    assert torch_private.is_derived_dim(2 * batch) and not torch_private.is_derived_dim(batch)
    assert torch_private.dim_hint_name(Dim.AUTO) == "AUTO" and torch_private.dim_hint_name(batch) is None
    assert torch_private.is_static_hint(Dim.STATIC) and not torch_private.is_static_hint(Dim.DYNAMIC)


def _check_export_size_guards(built: Built) -> None:
    guards = torch_private.export_size_guards(built.program)
    assert guards, "export recorded no guard on the batch the reshape halves"
    assert all(len(pair) == 2 for pair in guards)


def _check_is_infinite_int(built: Built) -> None:
    (bounds,) = built.program.range_constraints.values()  # the batch: no max
    assert torch_private.is_infinite_int(bounds.upper) and not torch_private.is_infinite_int(bounds.lower)


def _check_default_tolerances(built: Built) -> None:
    assert torch_private.default_tolerances(torch.float32) == (1.3e-6, 1e-5)


def _check_custom_ops(built: Built) -> None:
    assert torch_private.custom_op_definition(OP_NAME) is not None
    assert torch_private.custom_op_definition("aoti_private_apis::nothing") is None
    assert torch_private.triton_kernels_for_op(OP_NAME) == []


def _check_triton_kernel_side_table(built: Built) -> None:
    table = torch_private.triton_kernel_side_table()
    assert callable(table.get_kernel) and callable(table.get_constant_args)


def _check_inductor_configs(built: Built) -> None:
    snapshot, defaults = torch_private.inductor_config_snapshot(), torch_private.inductor_config_defaults()
    assert "max_autotune" in snapshot and "max_autotune" in defaults
    assert not [key for key in snapshot if key.startswith("_")]


def _check_compiler_and_imports(built: Built) -> None:
    torch_private.import_what_probes_import()
    assert "torch._inductor.cpu_vec_isa" in sys.modules and "torch.utils.cpp_extension" in sys.modules
    torch_private.import_what_compiles_import()
    assert "torch._inductor.compile_fx" in sys.modules
    assert torch_private.cpp_compiler()


def _check_fx_minifier(built: Built) -> None:
    module = torch_private.fx_minifier()
    assert callable(module.minifier) and callable(module.ConcreteProp)


def _check_isa_probes(built: Built) -> None:
    import torch._inductor.cpu_vec_isa as cpu_vec_isa

    torch_private.run_vector_isa_probes()  # the compile ran them: cached
    picked = cpu_vec_isa.pick_vec_isa()
    torch_private.probe_side_by_side(list(cpu_vec_isa.valid_vec_isa_list()) * 2)  # cached verdicts, side by side
    assert cpu_vec_isa.pick_vec_isa() == picked
    memo = torch_private.memoize_isa_checks(set())
    assert isinstance(memo, torch_private.IsaCheckMemo) and all(
        v is True for k, v in memo.answers.items() if k not in memo.failures
    )
    assert torch_private.picked_vec_isa() == (f"{picked} [{picked.build_arch_flags()}]" if picked else "none")


def _check_cuda_state(built: Built) -> None:
    assert isinstance(torch_private.cuda_initialized(), bool)
    assert torch_private.cuda_fork_poisoned() is torch_private.cuda_initialized()


# A fresh interpreter whose environment asks for NaN asserts after torch's configs were read: re-read, they apply.
REREAD = """
import os
import torch._inductor.config as config
from pytest_aoti.core import torch_private

assert torch_private.can_reread_env_configs()
before = config.nan_asserts
os.environ["TORCHINDUCTOR_NAN_ASSERTS"] = "1"
reread = torch_private.reread_env_configs({"TORCHINDUCTOR_NAN_ASSERTS"})
print(before, config.nan_asserts, "torch._inductor.config" in reread)
"""


def _check_env_configs(built: Built) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TORCHINDUCTOR_NAN_ASSERTS"}
    done = subprocess.run([sys.executable, "-c", REREAD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"], done.stdout


# Each check, with the names of torch_private it calls.
CHECKS: list[tuple[Callable[[Built], None], tuple[str, ...]]] = [
    (_check_package_loader, ("AOTICompiledModel", "package_loader")),
    (_check_inductor_load_package, ("inductor_load_package",)),
    (_check_package_metadata, ("package_metadata",)),
    (_check_dispatch_mode, ("TorchDispatchMode", "OpOverload")),
    (_check_higher_order_operator, ("HigherOrderOperator",)),
    (_check_combine_args, ("combine_args",)),
    (_check_tree_map_with_path, ("tree_map_with_path",)),
    (_check_dims, ("is_derived_dim", "dim_hint_name", "is_static_hint")),
    (_check_export_size_guards, ("export_size_guards",)),
    (_check_is_infinite_int, ("is_infinite_int",)),
    (_check_default_tolerances, ("default_tolerances",)),
    (_check_custom_ops, ("custom_op_definition", "triton_kernels_for_op")),
    (_check_triton_kernel_side_table, ("triton_kernel_side_table",)),
    (_check_inductor_configs, ("inductor_config_snapshot", "inductor_config_defaults")),
    (_check_compiler_and_imports, ("import_what_probes_import", "import_what_compiles_import", "cpp_compiler")),
    (_check_fx_minifier, ("fx_minifier",)),
    (
        _check_isa_probes,
        (
            "run_vector_isa_probes",
            "memoize_isa_checks",
            "probe_side_by_side",
            "picked_vec_isa",
        ),
    ),
    (_check_cuda_state, ("cuda_initialized", "cuda_fork_poisoned")),
    (_check_env_configs, ("can_reread_env_configs", "reread_env_configs")),
]


def test_every_private_api_has_a_check() -> None:
    checked = {name for _, names in CHECKS for name in names}
    assert sorted(set(torch_private.__all__) - checked) == [], "add a check for each"
    assert sorted(checked - set(torch_private.__all__)) == []


@pytest.mark.parametrize(("check", "names"), CHECKS, ids=[",".join(names) for _, names in CHECKS])
def test_private_apis_work_on_this_torch(check: Callable[[Built], None], names: tuple[str, ...], built: Built) -> None:
    check(built)
