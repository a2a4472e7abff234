"""Fixtures: loopback clusters, killed when the module's tests end."""

import pytest

from tests.cluster.local_cluster import LocalCluster


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory):
    cluster = LocalCluster(2, str(tmp_path_factory.mktemp("cluster2_logs")))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
