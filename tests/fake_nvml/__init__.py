"""Build and configure the fake libnvidia-ml.so.1 (fake_nvml.c) that the real pynvml loads.

pynvml dlopens "libnvidia-ml.so.1" by name, so the code under test must run in a process started
with LD_LIBRARY_PATH pointing at the build directory (the dynamic loader reads it at start-up).

    from fake_nvml import fake_nvml_env
    env = fake_nvml_env(tmp_dir, "gpus=8\n")      # builds (cached) + writes the config
    subprocess.run([...], env={**os.environ, **env})

In-process alternative (benchmarks): load_in_process(dir) preloads the fake under its soname before
pynvml's dlopen("libnvidia-ml.so.1"), which then gets the already-loaded library (glibc matches the
soname of loaded objects):

    from fake_nvml import load_in_process, eight_gpu_config
    load_in_process(tmp_dir, eight_gpu_config())      # before anything initialises NVML
    src = collector.gpus.open_gpus({}, "auto", 10.0)   # 8 fake A100s

For a shell: `python tests/fake_nvml/__init__.py 8 DIR` prints `export ...` lines.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nvml.c"
BUILD_ROOT = HERE.parent / "_build" / "fake_nvml"   # tests/_build/ is gitignored
LIBNAME = "libnvidia-ml.so.1"

# variant -> extra gcc flags. "old-driver" lacks nvmlDeviceGetMemoryInfo_v2 (drivers before R510).
VARIANTS = {"default": [], "old-driver": ["-DFAKE_NO_MEMINFO_V2"]}


def gcc_available() -> bool:
    return shutil.which("gcc") is not None


def build_fake_nvml(variant: str = "default") -> Path:
    """Compile fake_nvml.c once per variant (rebuilt when the source changes); return its directory."""
    out_dir = BUILD_ROOT / variant
    lib = out_dir / LIBNAME
    if lib.exists() and lib.stat().st_mtime >= SOURCE.stat().st_mtime:
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{LIBNAME}.{os.getpid()}"
    cmd = ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", f"-Wl,-soname,{LIBNAME}",
           *VARIANTS[variant], "-o", str(tmp), str(SOURCE)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed: {' '.join(cmd)}\n{res.stderr}")
    os.replace(tmp, lib)  # atomic: a parallel build never leaves a half-written library
    return out_dir


def fake_nvml_env(workdir: str | os.PathLike, config: str, variant: str = "default") -> dict[str, str]:
    """Build the library, write `config` to workdir/fake_nvml.conf; return the env vars to set."""
    lib_dir = build_fake_nvml(variant)
    conf = Path(workdir) / "fake_nvml.conf"
    conf.write_text(config)
    return {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_CONFIG": str(conf)}


def run_probe(req: dict, env: dict[str, str]) -> dict:
    """Run probe.py (the GPU layer in a child process, so LD_LIBRARY_PATH picks the fake) and
    return what it reported, with its stderr lines under "stderr"."""
    res = subprocess.run([sys.executable, str(HERE / "probe.py"), json.dumps(req)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    out["stderr"] = res.stderr.splitlines()
    return out


def load_in_process(workdir: str | os.PathLike, config: str) -> None:
    """Make this process's pynvml use the fake (call before the first nvmlInit in this process)."""
    import ctypes
    env = fake_nvml_env(workdir, config)
    os.environ["FAKE_NVML_CONFIG"] = env["FAKE_NVML_CONFIG"]  # read by the fake at nvmlInit
    ctypes.CDLL(str(Path(env["LD_LIBRARY_PATH"]) / LIBNAME), mode=ctypes.RTLD_GLOBAL)


def eight_gpu_config() -> str:
    """8 busy A100s with every field available (GPM on), as used by the sidecar benchmark."""
    lines = ["gpus=8"]
    for i in range(8):
        lines += [f"gpu.{i}.util=90,95", f"gpu.{i}.mem_used={(40 + i) * 2**30}", f"gpu.{i}.power_mw=350000",
                  f"gpu.{i}.energy_step_mj=3500000", f"gpu.{i}.temp=65", f"gpu.{i}.gpm=1", f"gpu.{i}.sm_active=71.5"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    # usage: python tests/fake_nvml/__init__.py [N_GPUS=8] [DIR=tests/_build/fake_nvml]
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    d = Path(sys.argv[2]) if len(sys.argv) > 2 else BUILD_ROOT
    d.mkdir(parents=True, exist_ok=True)
    cfg = eight_gpu_config() if n == 8 else f"gpus={n}\n"
    for k, v in fake_nvml_env(d, cfg).items():
        print(f"export {k}={v}")
