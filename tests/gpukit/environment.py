"""What the kit ran on: kernel, GPU and driver (nvidia-smi), Python and
the frameworks' versions. Prints JSON."""
import json
import platform
import subprocess
import sys
from importlib import metadata

PACKAGES = [
    "torch", "jax", "jaxlib", "jax-cuda13-plugin", "cupy-cuda13x", "cupy-cuda12x", "numba",
    "numba-cuda", "cuda-core", "cuda-bindings", "nvidia-ml-py",
]


def smi():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30,
        )
        return [l.strip() for l in out.stdout.splitlines() if l.strip()]
    except (OSError, subprocess.TimeoutExpired) as e:
        return [f"nvidia-smi: {e}"]


def versions():
    found = {}
    for p in PACKAGES:
        try:
            found[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return found


print(json.dumps({
    "kernel": platform.release(),
    "python": sys.version.split()[0],
    "gpus": smi(),
    "packages": versions(),
}))
