"""The eager replay (``pytest_aoti.debug.origin``) on real architectures: transformers models built from tiny configs
in code (random weights, no download), each with a fault brought in the way a user's bug brings it (issue 61 item 6).
A NaN born midway is traced to the user's op past the model's masks and normalizations; an index the model makes out
of range, and a custom op that raises, stop the replay at the op. Each case asserts the op and the user's line. What
the verdict makes of them on a compiled package is ``tests/test_real_architectures.py``'s."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytest_aoti.core.protocol import NonfiniteOrigin
from pytest_aoti.core.source_lines import SourceLine, torch_install_dir, user_line
from pytest_aoti.debug.minify import flat_program
from pytest_aoti.debug.origin import replay

transformers = pytest.importorskip("transformers", reason="the architectures need transformers (pip install .[test])")


class UserLog(torch.nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log(h - 100.0)


class UserSqrt(torch.nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(h - 100)


def _replay(
    model: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
) -> tuple[NonfiniteOrigin, SourceLine | None]:
    """The replay's origin, and the user's line of its node (its stack trace at export)."""
    torch.manual_seed(0)
    program = torch.export.export(model.eval(), args, kwargs or {}, strict=False)
    origin = replay(*flat_program(program, args, kwargs or {}))
    node = next((node for node in program.graph.nodes if node.name == origin.node), None)
    trace = node.meta.get("stack_trace") if node is not None else None
    return origin, user_line(trace, torch_install_dir()) if trace else None


def _made_by_the_users_op(origin: NonfiniteOrigin, line: SourceLine | None, op: str, text: str) -> None:
    assert (origin.outputs, origin.kind, origin.op) == ("nan", "NaN", op), origin
    assert line is not None and line.file == __file__ and line.text == text, (origin, line)


def test_bert_with_an_additive_padding_mask() -> None:
    """BERT's extended attention mask holds ``finfo.min`` at the padded keys; the NaN is the user's log's."""
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    model.encoder.layer[1].intermediate.intermediate_act_fn = UserLog()
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0  # the second sequence is padded
    origin, line = _replay(model, (torch.randint(0, 50, (2, 8)),), {"attention_mask": mask})
    _made_by_the_users_op(origin, line, "aten.log.default", "return torch.log(h - 100.0)")


def test_t5_with_relative_position_buckets() -> None:
    """T5's position buckets take a ``log`` of the relative positions (``log(0)`` is ``-inf``, kept out by a
    ``where``): the NaN is the user's log's, the second ``log`` of the graph."""
    config = transformers.T5Config(
        vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_heads=2, relative_attention_num_buckets=8
    )
    torch.manual_seed(0)
    model = transformers.T5EncoderModel(config)
    model.encoder.block[1].layer[1].DenseReluDense.act = UserLog()
    mask = torch.tensor([[1] * 6 + [0] * 2])
    origin, line = _replay(model, (torch.randint(0, 50, (1, 8)),), {"attention_mask": mask})
    _made_by_the_users_op(origin, line, "aten.log.default", "return torch.log(h - 100.0)")
    assert origin.node != "log", origin  # T5's bucket log comes first in the graph


def test_vit_with_layer_norms() -> None:
    config = transformers.ViTConfig(
        image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32
    )
    torch.manual_seed(0)
    model = transformers.ViTModel(config)
    model.layers[1].mlp.activation_fn = UserSqrt()
    origin, line = _replay(model, (torch.randn(1, 3, 16, 16),))
    _made_by_the_users_op(origin, line, "aten.sqrt.default", "return torch.sqrt(h - 100)")


def test_convnext_with_channels_last_layer_norms() -> None:
    config = transformers.ConvNextConfig(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1])
    torch.manual_seed(0)
    model = transformers.ConvNextModel(config)
    model.encoder.stages[1].layers[0].act = UserLog()
    origin, line = _replay(model, (torch.randn(1, 3, 32, 32),))
    _made_by_the_users_op(origin, line, "aten.log.default", "return torch.log(h - 100.0)")


def _gpt2() -> Any:
    config = transformers.GPT2Config(
        n_layer=2, n_embd=16, n_head=2, n_positions=32, vocab_size=50, use_cache=False, bos_token_id=0, eos_token_id=0
    )
    torch.manual_seed(0)
    return transformers.GPT2Model(config)


def test_gpt2_fed_more_tokens_than_it_has_positions_stops_at_the_position_embedding() -> None:
    """The position ids are made inside the model (an ``arange``): no input check sees them. The replay stops at
    the embedding they index, with the bad index and the table's size."""
    origin, line = _replay(_gpt2(), (torch.randint(0, 50, (1, 40)),))
    assert (origin.outputs, origin.kind, origin.op) == ("raised", "index", "aten.embedding.default"), origin
    assert origin.output == "index 39 outside [0, 32) (dim 0 of a 32x16 table)", origin
    assert any("min 0, max 39" in described for described in origin.inputs), origin
    assert line is not None and line.file.endswith("modeling_gpt2.py"), line
    assert "self.wpe(position_ids)" in line.text, line


@torch.library.custom_op("aoti_origin_tests::checked_scale", mutates_args=())
def checked_scale(x: torch.Tensor, limit: float) -> torch.Tensor:
    if bool((x.abs() > limit).any()):
        raise ValueError(f"checked_scale: a value past the limit {limit}")
    return x * 2


@checked_scale.register_fake
def _checked_scale_fake(x: torch.Tensor, limit: float) -> torch.Tensor:
    return torch.empty_like(x)


class CheckedActivation(torch.nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return checked_scale(torch.nn.functional.gelu(h), 1e-3)


def test_a_custom_op_that_raises_stops_the_replay_at_its_call() -> None:
    model = _gpt2()
    model.h[1].mlp.act = CheckedActivation()
    origin, line = _replay(model, (torch.randint(0, 50, (1, 8)),))
    assert (origin.outputs, origin.kind, origin.op) == ("raised", "error", "aoti_origin_tests.checked_scale.default")
    assert origin.output == "ValueError: checked_scale: a value past the limit 0.001", origin
    assert line is not None and line.file == __file__, line
    assert line.text == "return checked_scale(torch.nn.functional.gelu(h), 1e-3)", line
