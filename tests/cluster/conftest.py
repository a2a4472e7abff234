"""Fixtures: loopback clusters, killed when the module's tests end."""

import pytest

from tests.cluster.local_cluster import LocalCluster


def _running_cluster(tmp_path_factory, num_hosts: int):
    cluster = LocalCluster(num_hosts, str(tmp_path_factory.mktemp("cluster{}_logs".format(num_hosts))))
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def cluster2(tmp_path_factory):
    yield from _running_cluster(tmp_path_factory, 2)


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory):
    yield from _running_cluster(tmp_path_factory, 3)
