"""What a debug verdict costs against one plain compile of the same model, measured in one run: a test whose
compiled model makes NaN inside a kernel (``log`` of a negative input, a 3-layer MLP around it) runs once plainly
with an empty package cache (its cache line gives the compile's seconds), then under ``--aoti-debug`` with another
empty cache, where stages ``kernels`` and ``tensors`` each compile their debug build. Prints the compile, each
stage's seconds (as the report shows them: interpreter start, export, compile, load, run), the stages' wall time
(stage tensors runs beside stage kernels) and the ratio of that wall time to the plain compile.

    python bench/debug_stages_benchmark.py [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from numerics_benchmark import _run  # bench/ is on sys.path when this script runs

MODEL = textwrap.dedent(
    """
    class LogMLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(64, 256)
            self.mid = torch.nn.Linear(256, 256)
            self.down = torch.nn.Linear(256, 32)

        def forward(self, x):
            h = torch.tanh(self.up(x))
            h = torch.relu(self.mid(h)) + torch.log(x.sum(dim=-1, keepdim=True))
            return self.down(h)
    """
)
SUITE = (
    "import torch\n"
    + MODEL
    + textwrap.dedent(
        """

    def test_nan(aoti_compile, aoti_device):
        compiled = aoti_compile(LogMLP(), (torch.rand(16, 64, device=aoti_device) + 0.5,))
        compiled(-torch.ones(16, 64, device=aoti_device))
    """
    )
)


def log_mlp() -> Any:
    """The model, for bench/compile_breakdown.py."""
    import torch

    namespace: dict[str, Any] = {"torch": torch}
    exec(MODEL, namespace)
    return namespace["LogMLP"]()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    device = parser.parse_args().device
    with tempfile.TemporaryDirectory(prefix="debug-stages-bench-") as tmp:
        root = Path(tmp)
        (root / "test_nan.py").write_text(SUITE)
        plain, plain_out = _run(root, root / "cache-plain", device)
        debug, debug_out = _run(root, root / "cache-debug", device, "--aoti-debug")
    compiled = re.search(r"^aoti cache: 0 hits, 1 misses, ([\d.]+) s compiling", plain_out, re.MULTILINE)
    stages = {
        name: float(seconds)
        for name, seconds in re.findall(r"^stage (kernels|tensors) \(.*\): .* \[([\d.]+) s\]$", debug_out, re.M)
    }
    verdict = re.search(r"^verdict: .*$", debug_out, re.MULTILINE)
    in_all = re.search(r"^debug stages: ([\d.]+) s in all$", debug_out, re.MULTILINE)
    print(f"device {device}")
    print(f"plain run: {plain:.1f} s, of which compiling {compiled.group(1) if compiled else '?'} s")
    print(f"--aoti-debug run: {debug:.1f} s; each stage's own seconds: {stages}")
    print(f"verdict: {verdict.group(0) if verdict else '?'}")
    if compiled is None or set(stages) != {"kernels", "tensors"} or in_all is None:
        print(plain_out[-3000:], debug_out[-5000:], sep="\n")
        raise SystemExit(1)
    # Stage tensors runs beside stage kernels: what the user waits is the stages' wall time, not their sum.
    print(f"debug stages' wall time: {in_all.group(1)} s")
    ratio = float(in_all.group(1)) / float(compiled.group(1))
    print(f"ratio (stage kernels + stage tensors, wall) / one plain compile: {ratio:.2f}")


if __name__ == "__main__":
    main()
