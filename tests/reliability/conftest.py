"""Fixtures for the reliability suite: one small but realistic generated cluster per session
(several weekly sacct text and JSON dumps sharing the jobs that span a week boundary, sidecar
CSV + metadata, nvidia-smi logs, seff reports)."""
from __future__ import annotations

import pytest

from fixtures.generator import SUBDIRS, generate


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """(root, input folders) of a generated 14-day, 150-job cluster."""
    root = tmp_path_factory.mktemp("cluster") / "data"
    generate(root, jobs=150, days=14, seed=5)
    return root, [root / d for d in SUBDIRS if (root / d).is_dir()]
