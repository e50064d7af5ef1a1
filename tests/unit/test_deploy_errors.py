"""What the stand-alone deployment check says when a fresh interpreter cannot rebuild the package's outputs: the
text is the one a 2-layer BERT's package printed there (its outputs are a Hugging Face ModelOutput)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from pytest_aoti.deploy.checks import unregistered_type_explanation

BERT_IN_A_FRESH_INTERPRETER = (
    "bundled.pt2: on cpu the package raised: NotImplementedError: Deserializing "
    "transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions in pytree is not registered.\n"
)


def test_an_unregistered_output_type_names_the_module_to_import() -> None:
    text = unregistered_type_explanation(BERT_IN_A_FRESH_INTERPRETER)
    assert text == (
        "its inputs or outputs are a transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions, "
        "a pytree type that module transformers.modeling_outputs registers with torch; the loader rebuilds it only "
        "where that module is imported. A deployment must import transformers.modeling_outputs before calling the "
        "package, or the model should return plain tuples, lists and dicts (return_dict=False for a Hugging Face "
        "model)"
    )
    assert unregistered_type_explanation("bundled.pt2: on cpu the package raised: RuntimeError: boom") is None
