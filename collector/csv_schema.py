"""Sidecar CSV schema v1: the contract between the sidecar and the ingester (see docs/sidecar.md).

Standard library only: the sidecar imports this where jobsight is not installed.
"""
SCHEMA_VERSION = 1

# Order is the header order. Empty cell = not available.
COLUMNS = (
    "time",             # ISO-8601 UTC with 'Z', e.g. 2026-11-21T10:00:00.123Z
    "job_id",           # scheduler's raw job id (SLURM_JOB_ID = sacct JobIDRaw), or local-<pid>
    "cluster",          # SLURM_CLUSTER_NAME or configured
    "host",
    "device",           # 'cpu' or a GPU/MIG UUID
    "util_pct",         # cpu: % of allocated cores busy; GPU: NVML utilisation
    "mem_used_bytes",
    "mem_total_bytes",  # cpu: the job's memory limit; GPU: device memory
    "gpu_index",
    "power_w",
    "energy_j",         # NVML total energy since driver load (difference over the job = job energy)
    "sm_clock_mhz",
    "temperature_c",
    "sm_active_pct",    # NVML GPM SM activity (Hopper+)
)
HEADER = ",".join(COLUMNS)   # what the sidecar writes
# A reader takes any file whose header names the REQUIRED columns, in any order, with any of the
# EXTRAS (GPU readings "where available"); a column it does not know is ignored, so a file from a
# newer sidecar (or a site's own collector in the same shape) still reads.
REQUIRED = COLUMNS[:8]
EXTRAS = COLUMNS[8:]
META_SUFFIX = ".meta.json"
