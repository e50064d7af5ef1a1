"""``python -m pytest_aoti.verify PACKAGE...``: check shipped packages against their bundled inputs and outputs."""

from pytest_aoti.verify.bundled import main

if __name__ == "__main__":
    raise SystemExit(main())
