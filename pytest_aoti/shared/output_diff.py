"""How a tensor differs from a recorded one (a golden output, a package's bundled output), and the smallest
tolerances that would pass it: one comparison for the golden outputs and for self-verifying packages."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """``(rtol, atol)`` as ``torch.testing.assert_close`` picks them for ``dtype``; exact for other dtypes."""
    try:
        from pytest_aoti.core.torch_private import default_tolerances

        rtol, atol = default_tolerances(dtype)
        return float(rtol), float(atol)
    except Exception:  # a dtype assert_close has no default for (float8): exact
        return 0.0, 0.0


def _index(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), shape)) if len(shape) else ()


def _fmt(value: float | complex) -> str:
    return f"({value.real:.4g}{value.imag:+.4g}j)" if isinstance(value, complex) else f"{value:.4g}"


@dataclass(frozen=True)
class OutputDiff:
    """How one output differs from its golden, and the smallest tolerances that would pass it."""

    name: str
    problem: str | None = None  # dtype, shape or structure: no tolerance passes
    total: int = 0
    beyond: int = 0
    unmatched_nonfinite: int = 0  # NaN/Inf where the golden has another value (or the reverse): no tolerance passes
    max_abs: float = 0.0
    max_abs_at: tuple[int, ...] = ()
    got: float | complex = 0.0
    golden: float | complex = 0.0
    max_rel: float = 0.0
    max_rel_at: tuple[int, ...] = ()
    needed_atol: float = 0.0
    needed_rtol: float = 0.0
    exact: bool = False  # booleans: a tolerance means nothing, so none is suggested

    def lines(self, rtol: float, atol: float) -> list[str]:
        if self.problem is not None:
            return [f"{self.name}: {self.problem}"]
        head = (
            f"{self.name}: {self.beyond} of {self.total} element(s) beyond tolerance; max abs diff "
            f"{_fmt(self.max_abs)} at {self.max_abs_at} (got {_fmt(self.got)}, golden {_fmt(self.golden)}); "
            f"max rel diff {_fmt(self.max_rel)} at {self.max_rel_at}"
        )
        if self.unmatched_nonfinite:
            nonfinite = f"{self.unmatched_nonfinite} NaN/Inf value(s) where the golden differs: no tolerance passes"
            return [head, f"  {nonfinite}"]
        if self.exact:
            return [head, "  booleans compare exactly: no tolerance passes"]
        needed_rtol = (
            "no rtol (a golden value is 0)" if math.isinf(self.needed_rtol) else f"rtol >= {_fmt(self.needed_rtol)}"
        )
        return [
            head,
            f"  passes with atol >= {_fmt(self.needed_atol)} (at rtol {rtol:g}) or {needed_rtol} (at atol {atol:g})",
        ]


def compare(name: str, got: torch.Tensor, golden: torch.Tensor, rtol: float, atol: float) -> OutputDiff | None:
    """None when ``got`` matches ``golden`` within ``rtol``/``atol`` (NaN matches NaN, an Inf the same Inf)."""
    if got.dtype != golden.dtype:
        return OutputDiff(name, problem=f"dtype {golden.dtype} (golden) → {got.dtype}")
    if got.shape != golden.shape:
        return OutputDiff(name, problem=f"shape {tuple(golden.shape)} (golden) → {tuple(got.shape)}")
    if got.is_complex():  # compared as complex numbers: |got - golden| and |golden|, both parts counted
        actual, expected = got.detach().cpu().to(torch.complex128), golden.to(torch.complex128)
    elif got.dtype == torch.bool or not got.is_floating_point():
        actual, expected = got.cpu().to(torch.int64), golden.to(torch.int64)
    else:
        actual, expected = got.detach().cpu().to(torch.float64), golden.to(torch.float64)
    if actual.numel() == 0:
        return None
    finite = actual.isfinite() & expected.isfinite()
    unmatched = ~finite & ~_same_nonfinite(actual, expected)
    diff = torch.where(finite, (actual - expected).abs(), torch.zeros((), dtype=actual.dtype)).abs().double()
    magnitude = expected.abs().double().where(finite, torch.zeros((), dtype=torch.float64))
    beyond = (diff > atol + rtol * magnitude) | unmatched
    if not bool(beyond.any()):
        return None
    flat_diff, flat_mag = diff.flatten(), magnitude.flatten()
    at = int(flat_diff.argmax())
    rel = torch.where(flat_mag > 0, flat_diff / flat_mag.clamp_min(1e-300), torch.zeros((), dtype=torch.float64))
    over_atol = flat_diff > atol
    needed_rtol = 0.0
    if bool(over_atol.any()):
        needed_rtol = (
            math.inf
            if bool((over_atol & (flat_mag == 0)).any())
            else float(((flat_diff - atol) / flat_mag.clamp_min(1e-300))[over_atol].max())
        )
    return OutputDiff(
        name,
        total=actual.numel(),
        beyond=int(beyond.sum()),
        unmatched_nonfinite=int(unmatched.sum()),
        max_abs=float(flat_diff[at]),
        max_abs_at=_index(at, actual.shape),
        got=actual.flatten()[at].item(),
        golden=expected.flatten()[at].item(),
        max_rel=float(rel.max()),
        max_rel_at=_index(int(rel.argmax()), actual.shape),
        needed_atol=float((flat_diff - rtol * flat_mag).clamp_min(0).max()),
        needed_rtol=needed_rtol,
        exact=got.dtype == torch.bool,
    )


def _same_nonfinite(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Where both are the same value, NaN counted equal to NaN (for complex values, part by part)."""
    parts = (torch.view_as_real(actual), torch.view_as_real(expected)) if actual.is_complex() else (actual, expected)
    same = (parts[0] == parts[1]) | (parts[0].isnan() & parts[1].isnan())
    return same.all(dim=-1) if actual.is_complex() else same
