"""The models of ``bench/fleet.py``: real architectures from transformers, built from tiny configs in code (random
weights, seeded; nothing downloaded). Each is named by its transformers ``model_type``; :func:`build` returns the
model in eval mode and its example inputs, the same for pytest-aoti's tests and for the hand-written loop.

A tiny config is the architecture's own config with its sizes made small (:data:`SMALL`: only the fields the config
has), ``use_cache=False`` so no cache object is returned. The inputs are ``input_ids`` (1 x 8), with
``decoder_input_ids`` for an encoder-decoder.

``ALL`` is the list for the GPU form (``--models all``); ``CPU`` the few for CI's 2 cores (``--models cpu``).
"""

from __future__ import annotations

import inspect
from typing import Any

# Sizes every tiny config gets where its config class has the field. Heads divide every hidden size below.
SMALL: dict[str, Any] = {
    "vocab_size": 99,
    "hidden_size": 32,
    "d_model": 32,
    "n_embd": 32,
    "dim": 32,
    "embed_dim": 32,
    "num_hidden_layers": 2,
    "num_layers": 2,
    "n_layer": 2,
    "n_layers": 2,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "num_decoder_layers": 2,
    "num_attention_heads": 4,
    "num_heads": 4,
    "n_head": 4,
    "n_heads": 4,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 37,
    "encoder_ffn_dim": 37,
    "decoder_ffn_dim": 37,
    "d_ff": 37,
    "n_inner": 37,
    "hidden_dim": 37,
    "ffn_dim": 37,
    "d_kv": 8,
    "head_dim": 8,
    "max_position_embeddings": 64,
    "n_positions": 64,
    "use_cache": False,
}

# Where the generic sizes do not fit an architecture: a padding id inside the tiny vocabulary, a rotary dim inside
# the head, experts whose rows are a multiple of 16 bytes (grouped matmuls on CPU).
_MOE = {"intermediate_size": 48, "moe_intermediate_size": 48, "num_local_experts": 4, "num_experts": 4}
OVERRIDES: dict[str, dict[str, Any]] = {
    **{name: {"pad_token_id": 0} for name in ("glm", "glm4", "marian", "modernbert", "phi3", "smollm3")},
    **{name: {"rotary_dim": 4} for name in ("codegen", "gptj")},
    **{
        name: _MOE
        for name in ("gpt_oss", "granitemoe", "granitemoeshared", "hunyuan_v1_moe", "jamba", "minimax", "mixtral")
    },
    "phimoe": _MOE,
}

SEQUENCE = 8

# Text architectures whose tiny config builds and runs eagerly on input_ids, checked on CPU with
# ``python bench/fleet_models.py --check --models <names>`` (transformers 5.25.0); export and compile are the
# bench's to find out, on both sides alike. Of the 148 tried, 11 do not fit the generic tiny config (deepseek_v2/v3,
# dots1, esm, falcon, funnel, gpt_neo, olmoe, prophetnet, reformer, squeezebert) and 25 were not checked in time
# (mamba, mamba2, zamba, zamba2, bamba, xlnet, xlm, xlm-roberta, xmod, umt5, t5gemma and newer ones). A list, so
# that a run names what it compiles.
ALL: tuple[str, ...] = (
    "albert",
    "apertus",
    "arcee",
    "bart",
    "bert",
    "bert-generation",
    "big_bird",
    "bigbird_pegasus",
    "biogpt",
    "bitnet",
    "blenderbot",
    "blenderbot-small",
    "bloom",
    "camembert",
    "canine",
    "codegen",
    "cohere",
    "cohere2",
    "convbert",
    "cpmant",
    "ctrl",
    "data2vec-text",
    "deberta",
    "deberta-v2",
    "diffllama",
    "distilbert",
    "doge",
    "electra",
    "ernie",
    "ernie4_5",
    "ernie4_5_moe",
    "exaone4",
    "falcon_h1",
    "falcon_mamba",
    "flaubert",
    "fnet",
    "fsmt",
    "gemma",
    "gemma2",
    "gemma3_text",
    "glm",
    "glm4",
    "glm4_moe",
    "gpt2",
    "gpt_bigcode",
    "gpt_neox",
    "gpt_neox_japanese",
    "gpt_oss",
    "gptj",
    "granite",
    "granitemoe",
    "granitemoeshared",
    "helium",
    "hunyuan_v1_dense",
    "hunyuan_v1_moe",
    "ibert",
    "jamba",
    "jetmoe",
    "led",
    "lfm2",
    "llama",
    "longformer",
    "longt5",
    "luke",
    "m2m_100",
    "marian",
    "markuplm",
    "mbart",
    "megatron-bert",
    "minimax",
    "ministral",
    "mistral",
    "mixtral",
    "mobilebert",
    "modernbert",
    "mpnet",
    "mpt",
    "mra",
    "mt5",
    "mvp",
    "nemotron",
    "nllb-moe",
    "nystromformer",
    "olmo",
    "olmo2",
    "olmo3",
    "openai-gpt",
    "opt",
    "pegasus",
    "pegasus_x",
    "persimmon",
    "phi",
    "phi3",
    "phimoe",
    "plbart",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "recurrent_gemma",
    "rembert",
    "roberta",
    "roberta-prelayernorm",
    "roc_bert",
    "roformer",
    "rwkv",
    "seed_oss",
    "smollm3",
    "stablelm",
    "starcoder2",
    "switch_transformers",
    "t5",
)

# The CPU form: six different families (encoder, decoders with and without rotary embeddings, an encoder-decoder).
CPU: tuple[str, ...] = ("bert", "gpt2", "llama", "opt", "t5", "distilbert")


def tiny_config(model_type: str) -> Any:
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    small = {name: value for name, value in SMALL.items() if hasattr(default, name)}
    small.update(OVERRIDES.get(model_type, {}))
    return AutoConfig.for_model(model_type, **small)


def build(model_type: str) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The model (eval, seeded weights) and its inputs: ``(model, args, kwargs)``."""
    import torch
    from transformers import AutoModel

    torch.manual_seed(0)
    config = tiny_config(model_type)
    model = AutoModel.from_config(config).eval()
    vocab = int(getattr(config, "vocab_size", 99) or 99)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, min(vocab, 99), (1, SEQUENCE), generator=generator)
    kwargs: dict[str, Any] = {"input_ids": ids}
    if "decoder_input_ids" in inspect.signature(model.forward).parameters and config.is_encoder_decoder:
        kwargs["decoder_input_ids"] = ids.clone()
    return model, (), kwargs


def selection(name: str) -> tuple[str, ...]:
    """``all``, ``cpu`` or a comma-separated list of model types."""
    if name == "all":
        return ALL
    if name == "cpu":
        return CPU
    return tuple(part for part in name.split(",") if part)


def _candidates() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def _check(model_type: str, export: bool) -> str | None:
    """None where the tiny model builds and runs (and exports, with ``export``), else why not."""
    import torch

    try:
        model, args, kwargs = build(model_type)
        if "input_ids" not in inspect.signature(model.forward).parameters:
            return "takes no input_ids"
        with torch.no_grad():
            model(*args, **kwargs)
        if export:
            torch.export.export(model, args, kwargs, strict=False)
    except Exception as error:  # an architecture the generic tiny config does not fit
        return f"{type(error).__name__}: {str(error)[:120]}"
    return None


if __name__ == "__main__":
    import argparse
    import sys

    parser = argparse.ArgumentParser(description="check which architectures build from a tiny config")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--export", action="store_true", help="export each too")
    parser.add_argument("--models", default="", help="model types (default: every AutoModel type)")
    options = parser.parse_args()
    names = selection(options.models) if options.models else tuple(_candidates())
    fine = []
    for name in names:
        problem = _check(name, options.export)
        print(f"{name}: {problem or 'ok'}", file=sys.stderr, flush=True)
        if problem is None:
            fine.append(name)
    print(repr(tuple(fine)))
