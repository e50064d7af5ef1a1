"""Issue 61's open questions, measured on a GPU (one run, one script): prints what it finds, writes logs to $OUT.

1. Precision: SegFormer and the InternVL vision tower (tiny configs, random weights). RMSE to a float64 run of the
   eager model and of its AOTI package, under the default precision settings and with TF32 off everywhere
   (``torch.backends.cudnn.allow_tf32`` and ``torch.backends.cuda.matmul.allow_tf32``), and which TF32-sensitive
   calls the package's generated code holds.
2. A device-side assert fired while Inductor runs kernels at compile time (GPT-2 fed more tokens than it has
   positions): the compile's stderr (Triton's assert line), with and without compile-time autotuning.

Run: LD_PRELOAD=libstdc++.so.6 python bench/gpu_real_arch_probe.py precision|assert-compile|assert-runtime
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import zipfile
from pathlib import Path

import torch

OUT = Path(os.environ.get("OUT", "/tmp/probe-out"))
OUT.mkdir(parents=True, exist_ok=True)


def float64_run(model, args):
    state = {
        n: t.double() if t.is_floating_point() else t for n, t in [*model.named_parameters(), *model.named_buffers()]
    }
    wide = tuple(a.double() if a.is_floating_point() else a for a in args)
    with torch.no_grad():
        return torch.func.functional_call(model, state, wide)


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    return next(t for t in out if isinstance(t, torch.Tensor))


def rmse(ref, value):
    return math.sqrt(torch.mean((ref.double() - value.double()) ** 2).item())


@contextlib.contextmanager
def tf32(on: bool):
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def segformer():
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    config = SegformerConfig(
        num_channels=3,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        decoder_hidden_size=32,
        num_labels=4,
    )
    return SegformerForSemanticSegmentation(config).eval(), (torch.randn(1, 3, 64, 64),)


def internvl():
    from transformers import InternVLVisionConfig, InternVLVisionModel

    config = InternVLVisionConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
    )
    return InternVLVisionModel(config).eval(), (torch.randn(1, 3, 32, 32),)


def precision() -> None:
    torch.manual_seed(0)
    print(
        "defaults: cudnn.allow_tf32",
        torch.backends.cudnn.allow_tf32,
        "matmul.allow_tf32",
        torch.backends.cuda.matmul.allow_tf32,
        "float32_matmul_precision",
        torch.get_float32_matmul_precision(),
    )
    for name, make in (("segformer", segformer), ("internvl_vision", internvl)):
        try:
            model, args = make()
        except Exception as error:  # a config this transformers lacks
            print(name, "not built:", type(error).__name__, error)
            continue
        model, args = model.cuda(), tuple(a.cuda() for a in args)
        truth = first_tensor(float64_run(model, args))
        for compile_tf32 in (True, False):
            with tf32(compile_tf32):
                ep = torch.export.export(model, args, strict=False)
                path = torch._inductor.aoti_compile_and_package(
                    ep, package_path=str(OUT / f"{name}-{compile_tf32}.pt2")
                )
            package = torch._inductor.aoti_load_package(path)
            with zipfile.ZipFile(path) as archive:
                code = "\n".join(
                    archive.read(n).decode(errors="replace")
                    for n in archive.namelist()
                    if n.endswith((".cpp", ".py", ".h", ".wrapper.cpp"))
                )
            calls = {
                key: code.count(key)
                for key in (
                    "convolution",
                    "mm_out",
                    "addmm",
                    "bmm",
                    "tl.dot",
                    "tf32",
                    "scaled_dot_product",
                    "_efficient_attention",
                    "flash",
                )
            }
            for run_tf32 in (True, False):
                with tf32(run_tf32), torch.no_grad():
                    eager = first_tensor(model(*args))
                    got = first_tensor(package(*args))
                print(
                    f"{name}: compiled tf32={compile_tf32} run tf32={run_tf32}: RMSE to float64 eager "
                    f"{rmse(truth, eager):.3g} package {rmse(truth, got):.3g}; package-eager max "
                    f"{(got - eager).abs().max().item():.3g}"
                )
            print(f"{name}: package code (compiled tf32={compile_tf32}):", calls)
        # Which op makes the package differ: each op under TF32 or not, in eager
        with torch.no_grad(), tf32(True):
            on = first_tensor(model(*args))
        print(f"{name}: eager with TF32 on: RMSE {rmse(truth, on):.3g}")


def gpt2_long():
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=100)
    model = GPT2Model(config).eval().cuda()
    return model, (torch.randint(0, 100, (1, 80), device="cuda"),)


def assert_compile() -> None:
    """Compile GPT-2 fed 80 tokens (64 positions) for CUDA: prints Triton's assert at compile time (stderr)."""
    configs = {"triton.autotune_at_compile_time": False} if "--no-autotune" in sys.argv else {}
    model, args = gpt2_long()
    ep = torch.export.export(model, args, strict=False)
    print("compiling with", configs, flush=True)
    path = torch._inductor.aoti_compile_and_package(
        ep, package_path=str(OUT / "gpt2-long.pt2"), inductor_configs=configs
    )
    print("compiled:", path, flush=True)
    package = torch._inductor.aoti_load_package(path)
    out = package(*args)
    torch.cuda.synchronize()
    print("ran:", first_tensor(out).shape, flush=True)


if __name__ == "__main__":
    {"precision": precision, "assert-compile": assert_compile}[sys.argv[1]]()
