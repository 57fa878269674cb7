"""The one protocol every kit workload speaks with kit.py.

At each checkpoint a workload prints one JSON line: its pid, the
checkpoint's name, the framework's own figures (`framework`), the figure
gpumem is compared with (`compare`: a name in `framework`), the gpumem
kinds that figure covers (`kinds`; default: every kind in device memory,
device, array and VMM), and what the workload itself knows it holds per
memory kind (`truth`, bytes; absent where only the framework knows) and,
where it knows that too, per `kind:device` (`split`, as `gpumem status`
splits a process: the e2e tests compare it exactly). Then it waits for a
line on stdin, so kit.py can read gpumem and NVML while the memory is held.
"""
import json
import os
import sys


def checkpoint(name, framework=None, compare=None, truth=None, kinds=None, split=None):
    line = {
        "checkpoint": name,
        "pid": os.getpid(),
        "framework": framework or {},
        "compare": compare,
        "truth": truth,
        "kinds": kinds,
    }
    if split is not None:
        line["split"] = split
    print(json.dumps(line), flush=True)
    if not sys.stdin.readline():
        raise SystemExit("kit.py went away")


def report(**fields):
    """A line kit.py records without waiting (progress, errors)."""
    print(json.dumps({"pid": os.getpid(), **fields}), flush=True)
