import torch


def test_matches_eager(aoti_check, zoo_entry):
    model, example, more = zoo_entry
    compiled = aoti_check(model, example, more_inputs=more)
    assert compiled.device.type == "cpu"


def test_rejects_a_wrong_batch_before_running(aoti_compile, zoo_entry):
    from pytest_aoti import AOTIInvariantError
    model, example, _ = zoo_entry
    compiled = aoti_compile(model, example)
    wrong = torch.cat([example[0], example[0][:1]])
    try:
        compiled(wrong, *example[1:])
    except AOTIInvariantError as error:
        assert error.invariant == "input_shape" and error.index == 0
    else:
        raise AssertionError("a static-shape package accepted a different batch size")
