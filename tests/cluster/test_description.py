"""The cluster description, shard layout, session config and cross-host sums, without worker processes."""

import json
import socket
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator.compat.cluster_resolver import TPUClusterResolver
from tpu_estimator.hosts import cluster as cluster_lib
from tpu_estimator.hosts import shard_devices as devices_lib
from tpu_estimator.replicas import replication

SPEC = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}


def _resolver(spec=SPEC, master=""):
    return tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec(spec), master=master)


def test_from_a_cluster_resolver():
    config = te.RunConfig(cluster=_resolver())
    assert config.tpu_cluster == cluster_lib.Cluster(
        "worker", ("127.0.0.1:2222", "127.0.0.1:2223"), "grpc://127.0.0.1:2222"
    )
    assert config.master == config.evaluation_master == "grpc://127.0.0.1:2222"
    # The workers know the cluster: a session cluster_def naming task 0 is refused by TensorFlow, so none is sent.
    session_config = config.session_config
    assert not session_config.HasField("cluster_def")
    assert session_config.operation_timeout_in_ms == cluster_lib.DEFAULT_OPERATION_TIMEOUT_MS


def test_resolver_master_and_user_deadline_are_kept():
    user = tf.compat.v1.ConfigProto(operation_timeout_in_ms=1234)
    config = te.RunConfig(cluster=_resolver(master="grpc://127.0.0.1:2223"), session_config=user)
    assert config.master == "grpc://127.0.0.1:2223"
    assert config.session_config.operation_timeout_in_ms == 1234


def test_from_master_and_session_cluster_def():
    user = tf.compat.v1.ConfigProto()
    user.cluster_def.CopyFrom(tf.train.ClusterSpec({"hosts": SPEC["worker"]}).as_cluster_def())
    config = te.RunConfig(master="grpc://127.0.0.1:2222", session_config=user)
    assert config.tpu_cluster.job == "hosts"  # the only job
    assert config.tpu_cluster.addresses == tuple(SPEC["worker"])
    assert not config.session_config.HasField("cluster_def")


def test_from_tf_config(monkeypatch):
    tf_config = {"cluster": {"chief": ["127.0.0.1:2221"], **SPEC}, "task": {"type": "chief", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    config = te.RunConfig()
    assert config.tpu_cluster.addresses == tuple(SPEC["worker"])
    assert config.master == "grpc://127.0.0.1:2222"


def _host_tf_config(monkeypatch, host=1):
    """TF_CONFIG of host `host` of SPEC's job (one process per host); the host's server is not started."""
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": SPEC, "task": {"type": "worker", "index": host}}))
    started = []
    monkeypatch.setattr(cluster_lib, "host_server", lambda cluster, cpus: started.append((cluster, cpus)))
    return started


@pytest.mark.parametrize(
    "arguments",
    [
        lambda: dict(cluster=TPUClusterResolver("my-tpu")),
        lambda: dict(cluster=TPUClusterResolver(None), master=""),
        lambda: dict(cluster=tf.distribute.cluster_resolver.TFConfigClusterResolver()),
        lambda: dict(master="grpc://127.0.0.1:2223"),
    ],
    ids=["tpu_resolver", "local_resolver_and_empty_master", "tf_config_resolver", "own_master"],
)
def test_a_tpu_programs_own_cluster_means_this_job_under_a_hosts_tf_config(monkeypatch, arguments):
    # A TPU program's RunConfig(cluster=TPUClusterResolver(FLAGS.tpu)): upstream's RunConfig would refuse the
    # TF_CONFIG ('If "cluster" is set in TF_CONFIG, it must have one "chief" node.').
    started = _host_tf_config(monkeypatch)
    config = te.RunConfig(tpu_config=te.TPUConfig(num_shards=4), **arguments())
    assert config.tpu_cluster == cluster_lib.Cluster("worker", tuple(SPEC["worker"]), "grpc://127.0.0.1:2223", 1)
    assert (config.task_type, config.task_id, config.is_chief, config.num_worker_replicas) == ("worker", 1, False, 2)
    assert config.master == "grpc://127.0.0.1:2223"
    assert [(c.this_host, cpus) for c, cpus in started] == [(1, 2)]
    # Sessions share the table shards with the other hosts: no isolated session state.
    assert not config.session_config.isolate_session_state


def test_a_run_config_naming_other_hosts_under_a_hosts_tf_config_is_a_one_line_error(monkeypatch):
    started = _host_tf_config(monkeypatch)
    other = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
    where = "TF_CONFIG makes this process host 1 of job 'worker' (127.0.0.1:2222, 127.0.0.1:2223)"
    with pytest.raises(ValueError) as error:
        te.RunConfig(cluster=_resolver(other))
    assert str(error.value).startswith("RunConfig(cluster=<tensorflow.")
    assert where + ": pass no cluster= (or a resolver of TF_CONFIG's cluster), or unset TF_CONFIG" in str(error.value)
    with pytest.raises(ValueError, match=r"^RunConfig\(master='grpc://10.0.0.1:2222'\) names another session target, "):
        te.RunConfig(master="grpc://10.0.0.1:2222")
    user = tf.compat.v1.ConfigProto()
    user.cluster_def.CopyFrom(tf.train.ClusterSpec(other).as_cluster_def())
    with pytest.raises(ValueError, match="clear session_config.cluster_def"):
        te.RunConfig(session_config=user)
    for message in (str(error.value),):
        assert "\n" not in message
    assert started == []  # refused before this host's server starts


def test_tf_config_without_the_hosts_job_is_no_cluster(monkeypatch):
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": {"chief": ["127.0.0.1:2221"]}, "task": {"type": "chief", "index": 0}})
    )
    assert te.RunConfig().tpu_cluster is None


def test_tpu_job_name_picks_the_job():
    spec = {"worker": ["127.0.0.1:1"], "tpu_hosts": SPEC["worker"]}
    config = te.RunConfig(cluster=_resolver(spec), tpu_config=te.TPUConfig(tpu_job_name="tpu_hosts"))
    assert config.tpu_cluster.job == "tpu_hosts"
    with pytest.raises(
        ValueError, match=r"tpu_job_name='nope' is not a job of the cluster \(jobs: \['tpu_hosts', 'worker'\]\)"
    ):
        te.RunConfig(cluster=_resolver(spec), tpu_config=te.TPUConfig(tpu_job_name="nope"))
    with pytest.raises(ValueError, match="none is named 'worker': set TPUConfig.tpu_job_name"):
        te.RunConfig(cluster=_resolver({"a": ["h:1"], "b": ["h:2"]}))


def test_local_runs_are_unchanged():
    config = te.RunConfig(tpu_config=te.TPUConfig(num_shards=4))
    assert config.tpu_cluster is None
    expected = devices_lib.session_config_for_shards(te.RunConfig().session_config, 4)
    assert config.session_config == expected
    layout = config.shard_layout()
    assert layout.devices == tuple("/device:CPU:%d" % i for i in range(4))
    assert layout.host_devices == ("/device:CPU:0",)


def test_shards_must_divide_over_hosts():
    cluster = cluster_lib.Cluster("worker", tuple(SPEC["worker"]), "grpc://127.0.0.1:2222")
    devices = {
        0: ["/job:worker/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:1"],
        1: ["/job:worker/task:1/device:CPU:0", "/job:worker/task:1/device:CPU:1"],
    }
    layout = cluster_lib.cluster_layout(cluster, 4, devices)
    assert layout.devices == tuple(devices[0] + devices[1])
    assert layout.host_devices == ("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0")
    assert [layout.host_of_replica(r) for r in range(4)] == [0, 0, 1, 1]
    with pytest.raises(ValueError) as error:
        cluster_lib.cluster_layout(cluster, 3, devices)
    message = str(error.value)
    assert "num_shards=3 must divide evenly over the 2 hosts of job 'worker'" in message
    assert (
        "/job:worker/task:1 (127.0.0.1:2223): /job:worker/task:1/device:CPU:0, /job:worker/task:1/device:CPU:1"
        in message
    )
    with pytest.raises(
        ValueError, match=r"num_shards=6 needs 3 devices on each of the 2 hosts, but /job:worker/task:0"
    ):
        cluster_lib.cluster_layout(cluster, 6, devices)


def test_dense_sums_add_per_host_then_across_hosts():
    devices = ["/job:worker/task:%d/device:CPU:%d" % (h, j) for h in range(2) for j in range(2)]
    with tf.Graph().as_default() as graph:
        values = []
        for device in devices:
            with tf.device(device):
                values.append(tf.constant([1.0, 2.0]) * float(len(values) + 1))
        first_op = len(graph.get_operations())
        sums = replication._sum_groups(values, devices, None)
        built = graph.get_operations()[first_op:]
        adds = [op for op in built if op.type == "AddN"]
        # Per host one AddN of its 2 replicas, then one AddN of the 2 host sums on host 0.
        assert sorted((op.device, len(op.inputs)) for op in adds) == [
            ("/job:worker/task:0/device:CPU:0", 2),
            ("/job:worker/task:0/device:CPU:0", 2),
            ("/job:worker/task:1/device:CPU:0", 2),
        ]
        # Every input crossing hosts is one per host (host 1's sum in, the total out), never a replica's value.
        crossing = [
            (t.op.name, op.name)
            for op in built
            for t in op.inputs
            if tf.DeviceSpec.from_string(t.device).task != tf.DeviceSpec.from_string(op.device).task
        ]
        assert len(crossing) == 2
        assert [s.device for s in sums] == [devices[0], devices[0], devices[2], devices[2]]
        # The values: the same graph without devices, run here.
        graph_def = graph.as_graph_def()
    for node in graph_def.node:
        node.device = ""
    with tf.Graph().as_default():
        names = [s.name for s in sums]
        outputs = tf.compat.v1.import_graph_def(graph_def, return_elements=names, name="")
        with tf.compat.v1.Session() as session:
            assert [list(v) for v in session.run(outputs)] == [[10.0, 20.0]] * 4


def test_fault_error_names_the_task_and_what_to_do():
    cluster = cluster_lib.Cluster("worker", ("127.0.0.1:1", "127.0.0.1:1"), "grpc://127.0.0.1:1")
    error = tf.errors.UnavailableError(None, None, "From /job:worker/replica:0/task:1:\nfailed to connect")
    message = str(cluster_lib.fault_error(cluster, "train()", error))
    assert "train() on the cluster failed (UnavailableError: From /job:worker/replica:0/task:1:)" in message
    # Nothing listens on port 1: both hosts are unreachable.
    assert "host /job:worker/task:0 (127.0.0.1:1), /job:worker/task:1 (127.0.0.1:1) did not respond" in message
    assert "Restart the worker(s) with the same cluster spec and call train() again" in message


def test_a_collective_aborted_by_a_lost_task_is_a_fault_other_internal_errors_are_not():
    lost = tf.errors.InternalError(
        None,
        None,
        "Collective ops is aborted by: failed to connect to all addresses\n... originally returned UnavailableError, "
        "and was replaced by InternalError to avoid invoking TF network error handling logic.",
    )
    assert cluster_lib.is_fault(lost)
    assert cluster_lib.is_fault(tf.errors.UnavailableError(None, None, "Socket closed"))
    assert not cluster_lib.is_fault(tf.errors.InternalError(None, None, "Blas GEMM launch failed"))
    assert cluster_lib.is_fault(
        tf.errors.CancelledError(None, None, "Collective ops is aborted by: RPC Request was cancelled")
    )
    assert not cluster_lib.is_fault(tf.errors.CancelledError(None, None, "FIFOQueue 'q' is closed."))
    cluster = cluster_lib.Cluster("worker", ("127.0.0.1:1", "127.0.0.1:1"), "grpc://127.0.0.1:1")
    with pytest.raises(cluster_lib.ClusterError, match=r"train\(\) on the cluster failed \(InternalError: Collective"):
        with cluster_lib.reporting_faults(cluster, "train()"):
            raise lost
    with pytest.raises(tf.errors.InternalError, match="Blas GEMM"):
        with cluster_lib.reporting_faults(cluster, "train()"):
            raise tf.errors.InternalError(None, None, "Blas GEMM launch failed")


def test_an_unreachable_cluster_is_a_clear_error():
    # Nothing listens on port 1: discovery fails within the session deadline, naming the target and hosts.
    config = te.RunConfig(
        cluster=_resolver({"worker": ["127.0.0.1:1"]}),
        session_config=tf.compat.v1.ConfigProto(operation_timeout_in_ms=2000),
    )
    with pytest.raises(
        cluster_lib.ClusterError,
        match=r"Cannot reach the cluster at grpc://127.0.0.1:1 \(job 'worker', hosts /job:worker/task:0 \(127.0.0.1:1\)\)",
    ):
        config.shard_layout()


def test_tpu_cluster_resolver_with_grpc_addresses_is_a_cluster():
    resolver = te.compat.TPUClusterResolver(tpu=["grpc://127.0.0.1:2222", "grpc://127.0.0.1:2223"])
    assert resolver.cluster_spec().as_dict() == SPEC
    assert resolver.master() == "grpc://127.0.0.1:2222"
    assert resolver.master(task_id=1, rpc_layer="grpc") == "grpc://127.0.0.1:2223"
    config = te.RunConfig(cluster=resolver)
    assert config.tpu_cluster == cluster_lib.Cluster(
        "worker", ("127.0.0.1:2222", "127.0.0.1:2223"), "grpc://127.0.0.1:2222"
    )
    one = te.compat.TPUClusterResolver(tpu="grpc://127.0.0.1:2222", job_name="hosts")
    assert te.RunConfig(cluster=one).tpu_cluster == cluster_lib.Cluster(
        "hosts", ("127.0.0.1:2222",), "grpc://127.0.0.1:2222"
    )
    # A TPU name is this process, as before.
    local = te.compat.TPUClusterResolver(tpu="my-tpu")
    assert local.master() == "" and local.cluster_spec().as_dict() == {}
    assert te.RunConfig(cluster=local).tpu_cluster is None


def test_tpu_cluster_resolver_refuses_mixed_or_malformed_addresses():
    resolver_class = te.compat.TPUClusterResolver
    with pytest.raises(ValueError, match="either grpc://host:port addresses .* or one TPU name"):
        resolver_class(tpu=["grpc://127.0.0.1:2222", "my-tpu"])
    with pytest.raises(ValueError, match=r"'grpc://127.0.0.1' is not a grpc://host:port address"):
        resolver_class(tpu="grpc://127.0.0.1")
    with pytest.raises(ValueError, match="no task 2 of job 'worker' \\(2 workers\\)"):
        resolver_class(tpu=["grpc://127.0.0.1:2222", "grpc://127.0.0.1:2223"]).master(task_id=2)


def _task_of(device):
    return tf.DeviceSpec.from_string(device).task if device else None


def test_dense_gradients_and_variable_reads_cross_hosts_once_per_host():
    # 2 hosts x 2 shards through CrossShardOptimizer, as a model_fn builds them (the last replica's thread builds
    # the sums inside colocate_with(its gradient)); variables live with replica 0 on host 0.
    devices = ["/job:worker/task:%d/device:CPU:%d" % (h, j) for h in range(2) for j in range(2)]
    with tf.Graph().as_default() as graph:

        def replica(i):
            w = tf.compat.v1.get_variable("w", [4, 3], initializer=tf.compat.v1.ones_initializer(), use_resource=True)
            x = tf.constant([[1.0, 2.0, 3.0, 4.0]]) * float(i + 1)
            loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
            opt = replication.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.01))
            return opt.minimize(loss)

        train_op = replication.build_replicas(replica, devices).outputs[0]
        # The ops a step runs (what train_op needs), each on its device, or a read without one on its variable's.
        ops, stack = set(), [train_op]
        while stack:
            op = stack.pop()
            if op not in ops:
                ops.add(op)
                stack.extend([t.op for t in op.inputs] + list(op.control_inputs))
        task = {op: _task_of(op.inputs[0].op.device if op.type == "ReadVariableOp" else op.device) for op in ops}
        crossing = [(t.op, op) for op in ops for t in op.inputs if task[t.op] != task[op]]
        # Host 0 -> host 1: one read of w, for both of host 1's replicas. The total gradient goes where w is
        # updated (host 0) only: host 1's copy of it feeds only its replicas' updates, which do not run.
        into_host_1 = [(src.type, dst.type, dst.device) for src, dst in crossing if task[dst] == 1]
        assert into_host_1 == [("ReadVariableOp", "Identity", devices[2])]
        # Host 1 -> host 0: its replicas' gradient sum only, never a replica's own gradient.
        into_host_0 = [(src.type, dst.type, dst.device) for src, dst in crossing if task[dst] == 0]
        assert into_host_0 == [("AddN", "AddN", devices[0])]
        graph_def = graph.as_graph_def()
    # The same numbers: the graph without devices, one step here.
    for node in graph_def.node:
        node.device = ""
    with tf.Graph().as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session() as session:
            session.run("w/Assign")
            session.run(train_op.name)
            got = session.run("w/Read/ReadVariableOp:0")
    x = np.array([1.0, 2.0, 3.0, 4.0])
    gradient = sum(np.outer((i + 1) * x, 2 * (i + 1) * x.sum() * np.ones(3)) for i in range(4)) / 4
    np.testing.assert_allclose(got, 1.0 - 0.01 * gradient, rtol=1e-6)


def test_a_host_waits_for_every_host_to_listen_before_speaking_grpc_to_it(monkeypatch, capsys):
    # Host 1's server starts 1.2 s late: the wait returns only once it listens, and says on stderr (programs set
    # TensorFlow's logger to ERROR) which host it waits for.
    monkeypatch.setattr(cluster_lib, "_LISTEN_REPORT_SECS", 0.5)
    own, late = socket.socket(), socket.socket()
    own.bind(("127.0.0.1", 0))
    own.listen()
    late.bind(("127.0.0.1", 0))
    late_port = late.getsockname()[1]
    cluster = cluster_lib.Cluster(
        "worker", ("127.0.0.1:%d" % own.getsockname()[1], "127.0.0.1:%d" % late_port), "grpc://x", this_host=0
    )
    timer = threading.Timer(1.2, late.listen)
    timer.start()
    start = time.monotonic()
    try:
        cluster_lib.wait_for_every_host_to_listen(cluster, poll_secs=0.05)
        waited = time.monotonic() - start
    finally:
        timer.join()
        own.close()
        late.close()
    assert 1.1 < waited < 5, waited
    reports = capsys.readouterr().err.splitlines()
    assert reports and all(
        r.startswith("tpu_estimator: host 0: waiting for host(s) /job:worker/task:1 (127.0.0.1:%d)" % late_port)
        for r in reports
    ), reports


def test_the_wait_for_every_host_to_listen_ends_naming_the_host_that_never_listens(monkeypatch):
    own, never = socket.socket(), socket.socket()
    own.bind(("127.0.0.1", 0))
    own.listen()
    never.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    never_port = never.getsockname()[1]
    cluster = cluster_lib.Cluster(
        "worker", ("127.0.0.1:%d" % own.getsockname()[1], "127.0.0.1:%d" % never_port), "grpc://x", 0
    )
    monkeypatch.setenv(cluster_lib.HOSTS_WAIT_ENV, "1.5")
    start = time.monotonic()
    try:
        with pytest.raises(cluster_lib.ClusterError) as error:
            cluster_lib.wait_for_every_host_to_listen(cluster, poll_secs=0.05)
    finally:
        own.close()
        never.close()
    assert 1.4 < time.monotonic() - start < 5
    assert str(error.value).startswith(
        "Host 0: host /job:worker/task:1 (127.0.0.1:%d) did not start within 2 s" % never_port
    )
    assert "TPU_ESTIMATOR_HOSTS_WAIT_SECS" in str(error.value)


@pytest.mark.parametrize("text", ["0", "-3", "soon", "inf", "nan"])
def test_a_bad_hosts_wait_is_refused_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv(cluster_lib.HOSTS_WAIT_ENV, text)
    with pytest.raises(ValueError, match="TPU_ESTIMATOR_HOSTS_WAIT_SECS=.* must be a positive number of seconds"):
        cluster_lib.hosts_wait_secs()
