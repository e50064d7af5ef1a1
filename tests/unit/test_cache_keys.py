"""The package key (pytest_aoti/core/cache_key.py) on real exported programs, without a compile: what changes it
(weights, configs, build variables, an op, a cond branch) and what does not (a re-export, another checkout, moved
lines, the cache's location). (The cache's scenarios, with compiles and pytest runs: tests/test_cache.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytest_aoti.core.cache_key import package_key  # noqa: E402


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).tanh()


def export_small(model: torch.nn.Module) -> torch.export.ExportedProgram:
    return torch.export.export(model, (torch.randn(3, 4),))


def seeded_small() -> Small:
    torch.manual_seed(0)
    return Small()


CPU = torch.device("cpu")


def test_identical_reexport_gives_the_same_key() -> None:
    assert package_key(export_small(seeded_small()), {}, CPU) == package_key(export_small(seeded_small()), {}, CPU)


def test_weight_change_gives_a_new_key() -> None:
    changed = seeded_small()
    with torch.no_grad():
        changed.linear.weight[0, 0] += 1e-3
    assert package_key(export_small(seeded_small()), {}, CPU) != package_key(export_small(changed), {}, CPU)


def test_config_change_gives_a_new_key() -> None:
    ep = export_small(seeded_small())
    assert package_key(ep, {}, CPU) != package_key(ep, {"max_autotune": True}, CPU)


@pytest.mark.parametrize("variable", ["TORCHINDUCTOR_DEBUG_COMPILE", "TORCHINDUCTOR_DEBUG_SYMBOL"])
def test_a_build_env_change_gives_a_new_key(monkeypatch: pytest.MonkeyPatch, variable: str) -> None:
    """Read by Inductor when it builds, not through its config (which the debug stages' variables go through:
    tests/test_cache_key_env.py)."""
    ep = export_small(seeded_small())
    before = package_key(ep, {}, CPU)
    monkeypatch.setenv(variable, "1")
    assert package_key(ep, {}, CPU) != before


MODEL_FILE = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, x):{padding}
        y = self.linear(x)
        return y.{activation}()
"""


def _key_of_checkout(directory: Path, *, padding: str = "", activation: str = "tanh") -> str:
    """Export the model defined in ``directory/model.py`` (a checkout of the user's code) and key it."""
    import importlib.util

    directory.mkdir(parents=True)
    source = directory / "model.py"
    source.write_text(MODEL_FILE.format(padding=padding, activation=activation))
    spec = importlib.util.spec_from_file_location(f"model_{directory.name}", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    return package_key(torch.export.export(module.Model(), (torch.randn(3, 4),)), {}, CPU)


def test_two_checkouts_and_moved_lines_give_the_same_key(tmp_path: Path) -> None:
    first = _key_of_checkout(tmp_path / "checkout-a")
    assert _key_of_checkout(tmp_path / "elsewhere" / "checkout-b") == first
    assert _key_of_checkout(tmp_path / "edited", padding="\n        # a comment\n\n") == first


def test_an_op_change_gives_a_new_key(tmp_path: Path) -> None:
    assert _key_of_checkout(tmp_path / "a") != _key_of_checkout(tmp_path / "b", activation="sigmoid")


class Branches(torch.nn.Module):
    def __init__(self, op: str) -> None:
        super().__init__()
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda x: getattr(x, self.op)(), lambda x: x.cos(), (x,))


def test_a_change_inside_a_cond_branch_gives_a_new_key() -> None:
    """The top graph names a branch only by its attribute (``true_graph_0``): the branches' graphs are keyed too, or
    an edited branch would be served its stale package."""
    keys = {op: package_key(torch.export.export(Branches(op), (torch.randn(3),)), {}, CPU) for op in ("sin", "tanh")}
    assert keys["sin"] != keys["tanh"]


def test_inductor_config_patched_in_python_gives_a_new_key() -> None:
    import torch._inductor.config as inductor_config

    ep = export_small(seeded_small())
    before = package_key(ep, {}, CPU)
    with inductor_config.patch(max_autotune=True):
        assert package_key(ep, {}, CPU) != before
    assert package_key(ep, {}, CPU) == before


def test_cache_location_changes_no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ep = export_small(seeded_small())
    before = package_key(ep, {}, CPU)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    assert package_key(ep, {}, CPU) == before
