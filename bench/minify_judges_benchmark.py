"""What a minify judge costs, measured in one run: the same CPU candidate (a NaN-making graph, as the minifier hands
them over) judged three times by a fresh interpreter each (``--judge``, the path CUDA graphs take) and three times by
forks of one judge server (``--judge-server``, the path CPU graphs take). Prints the median seconds per candidate of
each and their ratio; the server's own start-up (its one import of torch and Inductor) is printed apart.

    python bench/minify_judges_benchmark.py

Both compile the candidate from scratch every time (Inductor's FX graph cache is off in AOT mode), so the difference
is what a judge spends before and after its compile.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pytest_aoti.debug.child import private_tmpdir
from pytest_aoti.debug.minify import _EXIT_NONFINITE, Search, _JudgeServer

ROUNDS = 3


class LogModel(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x) * 2


def candidate(directory: Path) -> Path:
    """A candidate directory as ``Search.save`` writes one."""
    directory.mkdir(parents=True)
    inputs = (-torch.ones(4, 3),)
    torch.export.save(torch.export.export(LogModel(), inputs), directory / "exported_program.pt2")
    torch.save({"args": inputs, "kwargs": {}}, directory / "inputs.pt")
    (directory / "inductor_configs.json").write_text("{}")
    (directory / "custom_ops.json").write_text("[]")
    return directory


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        # Loaded packages are extracted under TMPDIR and stay there: a private one (still sharing Inductor's
        # headers) goes away with the scratch dir, as in a real minify stage.
        os.environ["TMPDIR"] = str(private_tmpdir(root))
        bundle = root / "bundle"
        bundle.mkdir()
        (bundle / "env.json").write_text("{}")
        search = Search(bundle, "nonfinite", budget=3600, workdir=root / "work")

        fresh = []
        for n in range(ROUNDS):
            status, seconds = search._judge(candidate(root / f"fresh-{n}"), timeout=600)
            assert status == _EXIT_NONFINITE, (root / f"fresh-{n}" / "judge.log").read_text()
            fresh.append(seconds)

        started = time.monotonic()
        server = _JudgeServer(dict(os.environ), root / "server.log")
        forked = []
        try:
            for n in range(ROUNDS):
                status, seconds = server.judge(candidate(root / f"forked-{n}"), timeout=600)
                assert status == _EXIT_NONFINITE, (root / f"forked-{n}" / "judge.log").read_text()
                forked.append(seconds)
        finally:
            server.close()
        server_total = time.monotonic() - started

    print(f"fresh interpreter per candidate: {json.dumps([round(s, 1) for s in fresh])} s")
    print(f"forked from the judge server:    {json.dumps([round(s, 1) for s in forked])} s")
    print(f"server start-up (once per search): {server_total - sum(forked):.1f} s")
    ratio = statistics.median(forked) / statistics.median(fresh)
    print(f"forked/fresh median seconds per candidate: {ratio:.3f}")


if __name__ == "__main__":
    main()
