"""Job identity and allocated cores from scheduler environment variables."""
from __future__ import annotations

import os

import pytest

from jobsight.collector import jobenv


def test_slurm_array_task_uses_raw_job_id_and_cluster():
    env = {"SLURM_JOB_ID": "4243", "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "3",
           "SLURM_CLUSTER_NAME": "snellius", "SLURMD_NODENAME": "gcn12"}
    job = jobenv.detect_job(env, pid=99)
    assert (job.job_id, job.cluster, job.host, job.scheduler) == ("4243", "snellius", "gcn12", "slurm")
    assert (job.array_job_id, job.array_task_id) == ("4240", "3")


def test_pbs_job_and_array_index():
    env = {"PBS_JOBID": "1234[7].pbsserver", "PBS_ARRAY_ID": "1234[].pbsserver", "PBS_ARRAY_INDEX": "7"}
    job = jobenv.detect_job(env, pid=1)
    assert (job.job_id, job.scheduler, job.cluster) == ("1234[7].pbsserver", "pbs", "")
    assert (job.array_job_id, job.array_task_id) == ("1234[].pbsserver", "7")


def test_lsf_job_index_zero_is_not_an_array():
    job = jobenv.detect_job({"LSB_JOBID": "555", "LSB_JOBINDEX": "0"}, pid=1)
    assert (job.job_id, job.scheduler, job.array_job_id, job.array_task_id) == ("555", "lsf", None, None)
    job = jobenv.detect_job({"LSB_JOBID": "556", "LSB_JOBINDEX": "12"}, pid=1)
    assert (job.array_job_id, job.array_task_id) == ("556", "12")


def test_outside_a_job_is_local_pid_and_overrides_win():
    job = jobenv.detect_job({}, pid=4321)
    assert (job.job_id, job.scheduler, job.cluster) == ("local-4321", "none", "")
    job = jobenv.detect_job({"SLURM_JOB_ID": "7", "SLURM_CLUSTER_NAME": "a"}, job_id="override", cluster="b", pid=1)
    assert (job.job_id, job.cluster, job.scheduler) == ("override", "b", "slurm")


@pytest.mark.parametrize("text,expected", [
    ("0-3", {0, 1, 2, 3}),
    ("0-3,8,10-11\n", {0, 1, 2, 3, 8, 10, 11}),
    ("0-6:3", {0, 3, 6}),
    ("5", {5}),
])
def test_parse_cpu_list(text, expected):
    assert jobenv.parse_cpu_list(text) == expected


@pytest.mark.parametrize("bad", ["a-b", "3-1", "1,,x"])
def test_parse_cpu_list_rejects_garbage(bad):
    with pytest.raises(ValueError, match="bad cpu"):
        jobenv.parse_cpu_list(bad)


def test_allocated_cores_precedence():
    env = {"SLURM_CPUS_ON_NODE": "6"}
    assert jobenv.allocated_cores(env, "0-3") == (4, "cpuset")
    assert jobenv.allocated_cores(env, None) == (6, "SLURM_CPUS_ON_NODE")
    assert jobenv.allocated_cores({}, None) == (len(os.sched_getaffinity(0)), "affinity")


def test_memory_limit_from_slurm_env():
    assert jobenv.memory_limit_from_env({"SLURM_MEM_PER_NODE": "2048"}, 4) == 2048 * 1024 * 1024
    assert jobenv.memory_limit_from_env({"SLURM_MEM_PER_CPU": "1000"}, 4) == 4000 * 1024 * 1024
    assert jobenv.memory_limit_from_env({}, 4) is None


def test_safe_name_keeps_ids_readable():
    assert jobenv.safe_name("1234[7].pbs/server") == "1234_7_.pbs_server"
    assert jobenv.safe_name("4243") == "4243"
