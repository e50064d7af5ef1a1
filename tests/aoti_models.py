"""Small real models the project's tests compile. Copied into each pytester directory as ``aoti_models.py``, so
identical models give identical cache keys across test runs (the fixtures seed torch before a test builds them)."""

import ctypes
import os

import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


class LogModel(torch.nn.Module):
    """log of a negative input makes NaN inside the compiled kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x) * 2


class RowScale(torch.nn.Module):
    """Two inputs with a derived dim: y has 2 * batch rows."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.sin() + 1, y * 2


@torch.library.custom_op("aoti_tests::maybe_crash", mutates_args=())
def maybe_crash(x: torch.Tensor) -> torch.Tensor:
    """Segfaults (or aborts, with CRASHY_MODE=abort) when any value is above 100: a real crash inside the
    compiled model, between two compiled kernels."""
    if bool((x > 100).any()):
        if os.environ.get("CRASHY_MODE") == "abort":
            os.abort()
        ctypes.string_at(0)
    return x.clone()


@maybe_crash.register_fake
def _maybe_crash_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Crashy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = maybe_crash(torch.sin(x) * 2 + x)
        return y.cos() + 1


# How the bug planted for batches above 12 shows: "planted" adds 1 for those batches only; "sticky" is a CPU
# stand-in for a CUDA context poisoned by an illegal memory access: after the first bad call every later call fails
# the same way, whatever its input. Read when the op runs, so one compiled package serves both.
PLANTED = {"mode": "planted", "poisoned": False}


@torch.library.custom_op("aoti_tests::planted_double", mutates_args=())
def planted_double(x: torch.Tensor) -> torch.Tensor:
    """x * 2, with a planted bug for batches above 12."""
    if PLANTED["mode"] == "sticky":
        PLANTED["poisoned"] = PLANTED["poisoned"] or x.shape[0] > 12
        if PLANTED["poisoned"]:
            raise RuntimeError("stand-in device error: the context is unusable")
        return x * 2
    return x * 2 + (1.0 if x.shape[0] > 12 else 0.0)


@planted_double.register_fake
def _planted_double_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class PlantedBug(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return planted_double(x)


class CallCounter(torch.nn.Module):
    """Reads a Python call counter in forward: export bakes in its value at trace time while eager reads it afresh,
    so the second call parts from eager in the middle kernel (linear -> pointwise with the counter -> linear)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 4)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        h = torch.relu(self.first(x)) * self.calls + 0.5
        return torch.softmax(self.second(h), dim=-1)
