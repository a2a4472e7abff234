"""The module paths of releases before the stage subpackages import as the moved modules themselves."""

import importlib
import subprocess
import sys
from unittest import mock

from tests.helpers.modules import REPO
from tpu_estimator import _moved_modules


def test_every_old_path_is_the_moved_module():
    for old, new in sorted(_moved_modules.MOVED.items()):
        assert importlib.import_module(old) is importlib.import_module(new), old
        assert importlib.import_module(new).__spec__.name == new, "the module keeps its own spec"


def test_no_old_path_is_a_file_any_more_and_every_new_one_is():
    for old, new in _moved_modules.MOVED.items():
        assert not (REPO / (old.replace(".", "/") + ".py")).exists(), old
        assert (REPO / (new.replace(".", "/") + ".py")).exists(), new


def test_a_program_importing_old_paths_in_a_fresh_process():
    program = (
        "from tpu_estimator.finite_checkpoints import FiniteCheckpointListener\n"
        "from tpu_estimator import cluster, devices\n"
        "import tpu_estimator.train_loop\n"
        "print(FiniteCheckpointListener.__module__, cluster.__name__, devices.__name__,"
        " tpu_estimator.train_loop.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == [
        "tpu_estimator.checkpoints.finite_checkpoints",
        "tpu_estimator.hosts.cluster",
        "tpu_estimator.hosts.shard_devices",
        "tpu_estimator.modes.train_loop",
    ]


def test_a_patch_through_an_old_path_is_seen_through_the_new_one():
    from tpu_estimator.hosts import cluster

    with mock.patch("tpu_estimator.cluster.ClusterError", KeyError):
        assert cluster.ClusterError is KeyError
    assert cluster.ClusterError is not KeyError


def test_unknown_names_are_left_to_the_other_finders():
    assert _moved_modules.MovedModuleFinder().find_spec("tpu_estimator.no_such_module", None) is None
