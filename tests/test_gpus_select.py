"""Which GPUs are the job's: CUDA_VISIBLE_DEVICES / SLURM_JOB_GPUS mapping rules (no NVML needed)."""
from jobsight.collector.gpu_select import Inventory, job_gpu_uuids

G = [f"GPU-{i}{i}{i}{i}aaaa-0000-4000-8000-00000000000{i}" for i in range(8)]
M1 = "MIG-11110000-0000-4000-8000-000000000000"
M2 = "MIG-11110001-0000-4000-8000-000000000000"
NODE = [Inventory(i, G[i], [M1, M2] if i == 1 else []) for i in range(8)]


def test_no_variables_means_every_visible_gpu():
    assert job_gpu_uuids(NODE, {}) == (G, [])


def test_cuda_visible_devices_indices_keep_their_order():
    assert job_gpu_uuids(NODE, {"CUDA_VISIBLE_DEVICES": "5,2"}) == ([G[5], G[2]], [])


def test_cuda_visible_devices_wins_over_slurm_job_gpus():
    # constrained job: SLURM_JOB_GPUS are global ids (6,7) but the job sees its 2 GPUs as 0,1
    inv = [Inventory(0, G[6]), Inventory(1, G[7])]
    assert job_gpu_uuids(inv, {"CUDA_VISIBLE_DEVICES": "0,1", "SLURM_JOB_GPUS": "6,7"}) == ([G[6], G[7]], [])


def test_cuda_visible_devices_full_uuids_and_prefixes():
    env = {"CUDA_VISIBLE_DEVICES": f"{G[3]},GPU-7777"}
    assert job_gpu_uuids(NODE, env) == ([G[3], G[7]], [])


def test_cuda_visible_devices_mig_uuid():
    assert job_gpu_uuids(NODE, {"CUDA_VISIBLE_DEVICES": M2}) == ([M2], [])


def test_invalid_entry_stops_the_list_like_cuda():
    uuids, problems = job_gpu_uuids(NODE, {"CUDA_VISIBLE_DEVICES": "1,9,2"})
    assert uuids == [G[1]]
    assert len(problems) == 1 and "'9'" in problems[0]


def test_ambiguous_prefix_matches_nothing():
    # "MIG-1111" is a prefix of both MIG instances
    uuids, problems = job_gpu_uuids(NODE, {"CUDA_VISIBLE_DEVICES": "MIG-1111"})
    assert uuids == [] and len(problems) == 1


def test_empty_and_nodevfiles_mean_no_gpus():
    assert job_gpu_uuids(NODE, {"CUDA_VISIBLE_DEVICES": ""}) == ([], [])
    assert job_gpu_uuids(NODE, {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == ([], [])


def test_slurm_job_gpus_are_nvml_indices_when_all_gpus_visible():
    whole = [Inventory(i, G[i]) for i in range(8)]
    assert job_gpu_uuids(whole, {"SLURM_JOB_GPUS": "1,3"}) == ([G[1], G[3]], [])
    assert job_gpu_uuids(whole, {"SLURM_JOB_GPUS": "4-6"}) == ([G[4], G[5], G[6]], [])


def test_slurm_job_gpus_on_a_mig_node_never_bring_a_parent_gpu():
    # Slurm numbers the node's 9 devices (7 whole GPUs + 2 instances): id 1 is not NVML's GPU 1
    uuids, problems = job_gpu_uuids(NODE, {"SLURM_JOB_GPUS": "1,3"})
    assert uuids == [] and len(problems) == 1 and "MIG instances" in problems[0]
    # a job holding every device: the instances and the whole GPUs, not the instances' parent
    assert job_gpu_uuids(NODE, {"SLURM_JOB_GPUS": "0-8"}) == ([G[0], M1, M2, *G[2:]], [])
    one_gpu = [Inventory(0, G[0], [M1, M2])]   # ConstrainDevices: NVML shows one GPU and the job's instances
    assert job_gpu_uuids(one_gpu, {"SLURM_JOB_GPUS": "3,4"}) == ([M1, M2], [])


def test_slurm_job_gpus_under_constrain_devices_takes_what_nvml_shows():
    inv = [Inventory(0, G[4]), Inventory(1, G[6])]  # cgroup shows only the job's two GPUs
    assert job_gpu_uuids(inv, {"SLURM_JOB_GPUS": "4,6"}) == ([G[4], G[6]], [])


def test_slurm_job_gpus_not_ids():
    uuids, problems = job_gpu_uuids(NODE, {"SLURM_JOB_GPUS": "gpu:a100:2"})
    assert uuids == G and "not a list of GPU ids" in problems[0]
