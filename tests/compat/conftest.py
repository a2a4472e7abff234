"""Fixtures of the compat tests."""

import pytest

from tpu_estimator import compat


@pytest.fixture
def installed():
    """`compat.install()` for the test; `compat.uninstall()` after it, whatever happened."""
    compat.install()
    try:
        yield
    finally:
        compat.uninstall()
