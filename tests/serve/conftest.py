"""Fixtures of the serving tests (helpers live in ``serve_testing.py``)."""

import pytest


@pytest.fixture
def never_stop():
    """A script under which the mock never stops: only the length bound or a cancel ends a request."""
    return lambda request: None
