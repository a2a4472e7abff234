"""Launching where users run: `tpu-estimator-tf-config` (`tpu_estimator/app/cluster_env.py`) derives each host's
`TF_CONFIG` from a Slurm job step's `SLURM_*` variables or a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX`, then
runs the program. The environments are simulated: the variables, and two local processes as the job's hosts.
"""

import json
import os
import socket
import subprocess
import sys

import pytest
import tensorflow as tf
import yaml

from tests.cluster import host_jobs
from tpu_estimator.app import cluster_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = os.path.join(os.path.dirname(__file__), "host_program.py")


def test_slurm_tasks_are_the_hosts_in_slurms_order():
    env = {
        "SLURM_PROCID": "3",
        "SLURM_STEP_NODELIST": "n[09-10],gpu7",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2),1",
        "SLURM_STEP_NUM_TASKS": "5",
    }
    assert cluster_env.resolve(env, port=2222) == {
        "cluster": {"worker": ["n09:2222", "n09:2223", "n10:2222", "n10:2223", "gpu7:2222"]},
        "task": {"type": "worker", "index": 3},
    }
    # The job's variables when the step's are absent (sbatch script outside srun).
    job_env = {"SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "a,b", "SLURM_TASKS_PER_NODE": "1(x2)"}
    assert cluster_env.resolve(job_env)["cluster"]["worker"] == ["a:2222", "b:2222"]


def test_slurm_layout_equals_tensorflows_slurm_cluster_resolver():
    # TensorFlow's resolver sorts the nodes by name: on a sorted node list the two agree task for task.
    env = {
        "SLURM_PROCID": "2",
        "SLURM_STEP_NODELIST": "node[1-3]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
        "SLURM_STEP_NUM_TASKS": "6",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            port_base=3000, gpus_per_node=2, gpus_per_task=1, auto_set_gpu=False
        )
        expected = resolver.cluster_spec().as_dict()
        expected_task = resolver.get_task_info()
    got = cluster_env.resolve(env, port=3000)
    assert got["cluster"] == expected
    assert (got["task"]["type"], got["task"]["index"]) == expected_task


def test_kubernetes_indexed_job_pods_are_the_hosts():
    env = {"JOB_COMPLETION_INDEX": "2", "JOB_NAME": "train"}
    assert cluster_env.resolve(env, service="trainer", num_hosts=4, port=2222) == {
        "cluster": {"worker": ["train-{}.trainer:2222".format(i) for i in range(4)]},
        "task": {"type": "worker", "index": 2},
    }
    listed = cluster_env.resolve({"JOB_COMPLETION_INDEX": "1"}, hosts="10.0.0.1:2222,10.0.0.2:2222")
    assert listed["task"]["index"] == 1 and listed["cluster"]["worker"] == ["10.0.0.1:2222", "10.0.0.2:2222"]


@pytest.mark.parametrize(
    "env,flags,message",
    [
        ({"SLURM_PROCID": "0"}, {}, "SLURM_STEP_NODELIST or SLURM_JOB_NODELIST or SLURM_NODELIST is not set"),
        (
            {"SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x3)"},
            {},
            "Slurm lists 2 node(s) (n1,n2) but tasks for 3",
        ),
        (
            {"SLURM_PROCID": "2", "SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"},
            {},
            "SLURM_PROCID=2 is not one of the 2 task(s).",
        ),
        ({"SLURM_PROCID": "0", "SLURM_STEP_NODELIST": "n[2-1]"}, {}, "Not a Slurm host list: 'n[2-1]'"),
        ({"JOB_COMPLETION_INDEX": "0"}, {"service": "trainer"}, "Kubernetes: pass --hosts=host:port,..., or --service"),
        ({"JOB_COMPLETION_INDEX": "4", "JOB_NAME": "t"}, {"service": "s", "num_hosts": 4}, "JOB_COMPLETION_INDEX=4"),
        ({}, {}, "No Slurm job step (SLURM_PROCID) or Indexed Job (JOB_COMPLETION_INDEX) here"),
        ({}, {"hosts": "a:1,b", "index": 0}, "--hosts: 'b' is not host:port."),
        ({}, {"hosts": "a:1", "index": 0, "port": 0}, "--port=0 is not a port"),
    ],
)
def test_what_is_missing_or_wrong_is_named(env, flags, message):
    with pytest.raises(cluster_env.LaunchError) as error:
        cluster_env.resolve(env, **flags)
    assert message in str(error.value)


def _two_free_consecutive_ports():
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535:
            try:
                with socket.socket() as a, socket.socket() as b:
                    a.bind(("127.0.0.1", port))
                    b.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise RuntimeError("no two consecutive free ports")


def _run_hosts(envs, args, model_dir):
    """Starts one `python -m tpu_estimator.app.cluster_env [args] -- python host_program.py ...` per env."""
    command = [sys.executable, "-m", "tpu_estimator.app.cluster_env"] + args
    command += ["--", sys.executable, PROGRAM, str(model_dir), "2", "2"]
    processes = [
        subprocess.Popen(
            command, env=dict(host_jobs.program_env(), **env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        for env in envs
    ]
    try:
        outputs = [p.communicate(timeout=host_jobs.RUN_TIMEOUT_SECS)[0].decode(errors="replace") for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-4000:]
    results = host_jobs.host_results(model_dir, len(envs))
    assert [r["is_chief"] for r in results] == [True, False]
    assert host_jobs.checkpoint_values(model_dir)["global_step"] == 2


def test_a_simulated_slurm_step_of_two_tasks_trains(tmp_path):
    port = _two_free_consecutive_ports()
    slurm = {"SLURM_STEP_NODELIST": "127.0.0.1", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_STEP_NUM_TASKS": "2"}
    envs = [dict(slurm, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank)) for rank in range(2)]
    _run_hosts(envs, ["--port={}".format(port)], tmp_path / "slurm")


def test_a_simulated_indexed_job_of_two_pods_trains(tmp_path):
    hosts = ",".join(host_jobs.hosts.loopback_addresses(2))
    envs = [{"JOB_COMPLETION_INDEX": str(index)} for index in range(2)]
    _run_hosts(envs, ["--hosts=" + hosts], tmp_path / "k8s")


def test_the_kubernetes_example_derives_its_hosts_from_the_index_and_the_headless_service():
    with open(os.path.join(ROOT, "examples", "kubernetes", "indexed_job.yaml")) as f:
        service, job = list(yaml.safe_load_all(f))
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"] == {"job-name": job["metadata"]["name"]}
    (container,) = pod["containers"]
    command = container["command"]
    assert command[0] == "tpu-estimator-tf-config"
    flags = dict(a[2:].split("=", 1) for a in command[1 : command.index("--")])
    assert flags["service"] == service["metadata"]["name"]
    assert int(flags["num_hosts"]) == job["spec"]["completions"] == job["spec"]["parallelism"]
    assert int(flags["port"]) == container["ports"][0]["containerPort"] == service["spec"]["ports"][0]["port"]
    (job_name_env,) = [e for e in container["env"] if e["name"] == "JOB_NAME"]
    assert job_name_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['job-name']"
    # What each pod's command makes of it.
    config = cluster_env.resolve(
        {"JOB_COMPLETION_INDEX": "1", "JOB_NAME": job["metadata"]["name"]},
        service=flags["service"],
        num_hosts=int(flags["num_hosts"]),
        port=int(flags["port"]),
    )
    name = job["metadata"]["name"]
    assert config["cluster"]["worker"][1] == "{}-1.{}:{}".format(name, flags["service"], flags["port"])
    assert json.dumps(config)
