"""Why a package missed, without a compile: the nearest entry of a test, the line naming what differs, and the GPU
index left out of the graph's text unless the graph pins it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytest_aoti.core.cache_key import KEY_PARTS, cuda_indices, pinned_gpus, without_cuda_index
from pytest_aoti.core.cache_miss import Entry, differences, miss_line, nearest, valid_record


def _record(**changed: Any) -> dict[str, Any]:
    """A record as an entry keeps it, then with ``changed`` digests (``graph="1"`` makes the graph's 16 ones) and
    details."""
    digests = {name: "0" * 16 for name in KEY_PARTS}
    details: dict[str, Any] = {
        "shown": {"torch": "2.13.0", "device": "cpu:AVX2", "gpus": "", "compiler": "g++ 12"},
        "weights": {"linear.weight": "a" * 16, "linear.bias": "b" * 16, "norm.weight": "c" * 16},
        "config": {"max_autotune": "False", "size_asserts": "True"},
        "env": {},
        "inputs": {"x": "torch.float32 (4, 8)"},
        "facets": {"graph_ops": "0" * 16, "interface": "0" * 16},
    }
    for name, value in changed.items():
        if name in digests:
            digests[name] = value * 16
        else:
            details[name] = {**details[name], **value}
    return {"digests": digests, **details}


def test_the_line_names_each_part_that_differs() -> None:
    old = _record()
    new = _record(weights="1", inductor_configs="1", codegen_env="1")
    new["weights"] = {"linear.weight": "d" * 16, "linear.bias": "e" * 16, "extra": "f" * 16}
    new["config"] = {"max_autotune": "True", "size_asserts": "True"}
    new["env"] = {"TORCHINDUCTOR_DEBUG_COMPILE": "'1'"}
    assert differences(new, old) == [
        "the graph is the same",
        "the weights differ (4 tensors)",
        "Inductor config 'max_autotune' False → True",
        "codegen env 'TORCHINDUCTOR_DEBUG_COMPILE' unset → '1'",
    ]


def test_few_changed_weights_are_named() -> None:
    new = _record(weights="1")
    new["weights"] = {**new["weights"], "linear.bias": "e" * 16}
    assert differences(new, _record()) == ["the graph is the same", "the weights differ (1 tensor: linear.bias)"]


def test_short_parts_are_named_by_value_and_the_graph_comes_first() -> None:
    new = _record(
        torch="1",
        graph="1",
        compiler="1",
        gpus="1",
        facets={"graph_ops": "1" * 16},
        shown={"torch": "2.14.0", "gpus": "cuda:0,cuda:1", "compiler": "g++ 13"},
    )
    assert differences(new, _record()) == [
        "the graph differs",
        "torch 2.13.0 → 2.14.0",
        "the GPU indices its graph pins none → cuda:0,cuda:1",
        "C++ compiler g++ 12 → g++ 13",
    ]


def test_the_nearest_entry_is_the_tests_own_with_most_parts_in_common() -> None:
    new = _record(weights="1")
    far = Entry("t.py::test_a", _record(weights="2", triton="2"), mtime=3.0)
    near_old = Entry("t.py::test_a", _record(), mtime=1.0)
    near_new = Entry("t.py::test_a", _record(), mtime=2.0)
    other = Entry("t.py::test_b", _record(weights="1", triton="2"), mtime=9.0)
    assert nearest("t.py::test_a", new, [far, near_old, other, near_new]) is near_new
    # A test with no entry: another test's entry of the same graph, named in the line.
    assert nearest("t.py::test_c", new, [other]) is other
    assert miss_line("t.py::test_c", new, [other]) == (
        "t.py::test_c missed (nearest: an entry of t.py::test_b): the graph is the same, the user Triton kernels' "
        "sources differ"
    )
    # No entry to compare with: nothing to say (the miss is counted, not named: issue 63, item 4).
    assert miss_line("t.py::test_c", _record(graph="3"), [other]) is None


@pytest.mark.parametrize(
    "record",
    [None, [], {"digests": {}}, {**_record(), "digests": {"graph": "0" * 16}}, {**_record(), "config": {"a": 1}}],
    ids=["None", "a list", "no digests", "a part missing", "a value not text"],
)
def test_a_record_that_is_not_one_is_left_out(record: Any) -> None:
    assert valid_record(record) is None
    assert valid_record(_record()) == _record()


def test_the_gpu_index_is_left_out_unless_the_graph_pins_it() -> None:
    text = "x :: (3, 4):(4, 1):torch.float32:cuda:1\narange(5, device=device(type='cuda', index=1), pin_memory=False)"
    assert cuda_indices(text) == {1}
    assert without_cuda_index(text) == (
        "x :: (3, 4):(4, 1):torch.float32:cuda\narange(5, device=device(type='cuda'), pin_memory=False)"
    )
    assert pinned_gpus({1}, torch.device("cuda", 1)) == ""
    assert pinned_gpus(set(), torch.device("cuda", 0)) == ""
    # A model split over two GPUs, or one that names a GPU other than the one it is compiled on.
    assert pinned_gpus({0, 1}, torch.device("cuda", 0)) == "cuda:0,cuda:1"
    assert pinned_gpus({1}, torch.device("cuda", 0)) == "cuda:0,cuda:1"
    assert pinned_gpus({0}, torch.device("cpu")) == "cuda:0"


def test_the_nearest_entry_has_the_fewest_differences_not_the_latest() -> None:
    """Issue 62, item 11: an older entry that differs in one config value is nearer than the latest, which differs
    in four (the same one part of the key each: the latest used to win the tie)."""
    config = {"max_autotune": "False", "size_asserts": "True", "a": "1", "b": "1", "c": "1"}
    new = _record(config={**config, "max_autotune": "True"}, inductor_config="1")
    one_change = Entry("t.py::test_a", _record(config=config), mtime=1.0)
    four_changes = Entry("t.py::test_a", _record(config={"a": "2", "b": "2", "c": "2"}, inductor_config="2"), 2.0)
    assert nearest("t.py::test_a", new, [one_change, four_changes]) is one_change
    assert miss_line("t.py::test_a", new, [one_change, four_changes]) == (
        "t.py::test_a missed: the graph is the same, Inductor config 'max_autotune' False → True"
    )


def test_a_signature_that_differs_only_in_its_node_names_is_not_named() -> None:
    """relu -> sigmoid renames the output node: the signature's digest differs, its interface does not."""
    renamed = _record(graph="1", signature="1", facets={"graph_ops": "1" * 16})
    assert differences(renamed, _record()) == ["the graph differs"]
    more_inputs = _record(
        graph="1", signature="1", facets={"graph_ops": "1" * 16, "interface": "1" * 16}, inputs={"y": "torch.int64 ()"}
    )
    assert differences(more_inputs, _record()) == [
        "the graph differs",
        "the signature differs (inputs x → x, y)",
    ]


def test_a_shape_or_dtype_change_names_the_input() -> None:
    """The graph's ops are the same: its inputs' shapes and dtypes say what differs."""
    reshaped = _record(graph="1", inputs={"x": "torch.float16 (2, 8)"})
    assert differences(reshaped, _record()) == [
        "input 'x' dtype torch.float32 → torch.float16",
        "input 'x' shape (4, 8) → (2, 8)",
    ]
    # Ops that differ too (a view's sizes in its arguments) are named with it.
    both = _record(graph="1", inputs={"x": "torch.float32 (2, 8)"}, facets={"graph_ops": "1" * 16})
    assert differences(both, _record()) == ["the graph differs", "input 'x' shape (4, 8) → (2, 8)"]
    # An entry of an earlier version keeps no inputs nor facets: what the graph's digest says.
    old = {key: value for key, value in _record().items() if key not in ("inputs", "facets")}
    assert differences(reshaped, valid_record(old)) == ["the graph differs"]  # type: ignore[arg-type]


def test_an_older_entrys_codegen_env_never_shows_a_secret() -> None:
    """Issue 62, item 3: an entry written before the allow-list keeps Inductor's Redis URL in its env. A miss
    against it names no variable outside the allow-list, and masks any URL a shown value holds."""
    secret = "redis://:hunter2-S3CRET@cache.example:6379/0"
    old = _record(env={"TORCHINDUCTOR_REDIS_URL": secret, "CUDA_HOME": "https://user:pw@example/cuda"})
    new = _record(codegen_env="1", env={"CUDA_HOME": "/usr/local/cuda"})
    line = miss_line("t.py::test_a", new, [Entry("t.py::test_a", old, 1.0)])
    assert line is not None and "hunter2" not in line and "REDIS" not in line and ":pw@" not in line
    assert line == (
        "t.py::test_a missed: the graph is the same, codegen env 'CUDA_HOME' https://***@example/cuda → /usr/local/cuda"
    )
