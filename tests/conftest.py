"""Suite-wide test settings.

One intra-op thread per test: the models under test are tiny, and on a shared 2-core machine two contending threads
ran them up to ~30x slower than one. The setting is restored after each test.
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
