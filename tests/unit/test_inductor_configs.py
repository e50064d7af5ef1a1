"""Inductor config values: accepted as Inductor's own config accepts them (it checks no type, and reads a flag by
its truth value), refused where Inductor would fail late or read them other than they say."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from pytest_aoti.core.compiler import validate_inductor_configs


@pytest.mark.parametrize(
    "configs",
    [
        # PyTorch's own test_with_profiler (test/inductor/test_aot_inductor.py) passes these.
        {"profile_bandwidth": "1", "profile_bandwidth_regex": ""},
        {"max_autotune": "true"},
        {"max_autotune": 1},
        {"max_autotune": 0},
        {"max_autotune": True},
        {"cpp.threads": 4},
        {"cpp.threads": 4.0},
        {"aot_inductor.debug_intermediate_value_printer": "2"},
        {"aot_inductor.output_path": ""},
    ],
)
def test_values_inductor_reads_as_they_say_are_accepted(configs: dict[str, object]) -> None:
    assert validate_inductor_configs(configs) == configs


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"max_autotune": "false"},
            "inductor_configs['max_autotune']: got str 'false', which turns the flag on (Inductor reads a flag by its "
            "truth value, and a non-empty string is true): pass False",
        ),
        ({"profile_bandwidth": " 0"}, "inductor_configs['profile_bandwidth']: got str ' 0', which turns the flag on"),
        ({"max_autotune": 1.0}, "inductor_configs['max_autotune']: expected a bool (the default is False), got float"),
        ({"cpp.threads": "4"}, "inductor_configs['cpp.threads']: expected an int (the default is -1), got str '4'"),
        ({"cpp.threads": True}, "inductor_configs['cpp.threads']: expected an int (the default is -1), got bool True"),
        (
            {"aot_inductor.debug_intermediate_value_printer": 2},
            "inductor_configs['aot_inductor.debug_intermediate_value_printer']: expected a str (the default is '0')",
        ),
    ],
)
def test_values_inductor_would_fail_on_or_misread_are_refused(configs: dict[str, object], message: str) -> None:
    with pytest.raises(TypeError) as caught:
        validate_inductor_configs(configs)
    assert str(caught.value).startswith(message), str(caught.value)
