"""The deployment checks' errors without a compile: what the stand-alone check says when a fresh interpreter cannot
rebuild the package's outputs (the text a 2-layer BERT's package printed there: its outputs are a Hugging Face
ModelOutput), and the ``aoti_deploy`` markers that would check nothing, refused naming the test: that test alone fails,
at setup."""

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


@pytest.mark.parametrize(
    ("marker", "fixture", "message"),
    [
        (
            "aoti_deploy",
            "aoti_compile",
            "names no check, so it checks nothing; ask for one or more of standalone=True, threads=N, weights=True, "
            "cuda_graph=True, probe_dims=True, device_matrix=True",
        ),
        (
            "aoti_deploy(standalone=True, calls=4)",
            "aoti_compile",
            "calls=4 applies to the threads check, which is off (threads=0): add threads=N to call the package from N "
            "threads at once",
        ),
        ("aoti_deploy(weights=True, num_runners=2)", "aoti_check", "num_runners=2 applies to the threads check"),
        (
            "aoti_deploy(standalone=True)",
            "aoti_device",
            "the checks run on the packages that aoti_compile or aoti_check build in this test, and the test uses "
            "neither, so nothing would be checked",
        ),
        ("aoti_deploy(threads=True)", "aoti_compile", "threads= expected a whole number >= 0, got True"),
    ],
)
def test_a_deploy_marker_that_checks_nothing_fails_only_its_test(
    pytester: pytest.Pytester, marker: str, fixture: str, message: str
) -> None:
    pytester.makepyfile(
        test_user=f"""
        import pytest

        @pytest.mark.{marker}
        def test_marked({fixture}):
            pass

        def test_after():
            pass
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at setup of test_marked*", f"*test_user.py::test_marked: @pytest.mark.aoti_deploy: {message}*"]
    )
    assert "Traceback" not in result.stdout.str()


def test_a_module_marker_applies_to_the_tests_that_build_packages(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user="""
        import pytest

        pytestmark = pytest.mark.aoti_deploy(threads=2)

        def test_builds_nothing():
            pass
        """
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
