"""The deployment checks' errors."""

from __future__ import annotations

from typing import ClassVar

from pytest_aoti.core.errors import AOTIError


class AOTIDeployError(AOTIError, AssertionError):
    """A deployment check (``@pytest.mark.aoti_deploy``, ``--aoti-deploy-check``) found what breaks where the
    package is deployed: it does not run in a fresh interpreter, or not from several threads."""

    failure_kind: ClassVar[str] = "deploy"
    not_rerun: ClassVar[str | None] = (
        "a deployment check failed, and its report says what the deployment lacks or which thread differed"
    )
