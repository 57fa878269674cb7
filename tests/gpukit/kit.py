"""The GPU kit's driver: runs each framework's workload under the running
agent and compares, at every checkpoint, three figures for the workload's
process: the framework's own (what its allocator holds from the driver),
gpumem's (`gpumem status --json`, bytes per kind) and NVML's per-process
used memory (through the agent's status and through nvidia-ml-py). Then a
`signal` limit against a real PyTorch process. Writes report.json into
--out (report_md.py renders it).

run.sh starts the agent and calls this; see README.md beside it.
"""
import argparse
import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = os.path.join(HERE, "workloads")
ON_DEVICE = ("device", "array", "vmm")
MiB = 1 << 20

# name, workload argv, extra environment
SCENARIOS = [
    ("pytorch", ["torch_alloc.py"], {}),
    ("pytorch expandable_segments", ["torch_alloc.py"], {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    ("jax", ["jax_alloc.py"], {}),
    ("jax no preallocation", ["jax_alloc.py"], {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
    ("cupy default pool", ["cupy_alloc.py", "default"], {}),
    ("cupy async pool", ["cupy_alloc.py", "async"], {}),
    ("numba-cuda", ["numba_alloc.py"], {}),
    ("cuda.core", ["cuda_core_alloc.py"], {}),
    ("cuda-bindings", ["cuda_bindings_alloc.py"], {}),
    ("cuda-bindings per-thread streams", ["cuda_bindings_alloc.py"], {"CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM": "1"}),
]


class Agent:
    """The running agent, through its own command line."""

    def __init__(self, gpumem, socket):
        self.gpumem, self.socket = gpumem, socket

    def call(self, *args):
        out = subprocess.run([self.gpumem, *args, "--socket", self.socket], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"gpumem {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout

    def status(self):
        return json.loads(self.call("status", "--json"))


def held(status, pid):
    """gpumem's bytes for pid, by kind (all devices)."""
    kinds = collections.Counter()
    for entry in status.get("processes", []):
        if entry.get("pid") == pid:
            for line in entry.get("split", []):
                kinds[line["kind"]] += line["bytes"]
    return dict(kinds)


def on_device(kinds):
    return sum(kinds.get(k, 0) for k in ON_DEVICE)


def nvml_by_agent(status, pid):
    used = [p.get("used_bytes") for d in status.get("devices", []) for p in d.get("processes", []) if p["pid"] == pid]
    return sum(u for u in used if u is not None) if used else None


def nvml_direct(pid):
    """NVML's per-process used memory through nvidia-ml-py, or None."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        total = None
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if p.pid == pid and p.usedGpuMemory is not None:
                    total = (total or 0) + p.usedGpuMemory
        return total
    except pynvml.NVMLError:
        return None


def expected(line):
    """What gpumem should say per kind at this checkpoint: the framework's
    compared figure in the kinds it covers, and the workload's truth for
    the others."""
    want = {}
    if line.get("compare"):
        want["compared"] = line["framework"][line["compare"]]
    truth = line.get("truth") or {}
    for kind in ("host", "managed"):
        if kind in truth:
            want[kind] = truth[kind]
    return want


def observed(kinds, covered=None):
    """gpumem's figures to compare: the covered kinds' sum (default: all
    in device memory), every kind in device memory, host and managed."""
    compared = sum(kinds.get(k, 0) for k in covered) if covered else on_device(kinds)
    return {
        "compared": compared,
        "on_device": on_device(kinds),
        "host": kinds.get("host", 0),
        "managed": kinds.get("managed", 0),
    }


def settle(agent, pid, want, covered=None, deadline=10.0):
    """Polls gpumem until its figures equal `want` or the deadline passes
    (the agent reads the ring buffer a moment after the call)."""
    start = time.monotonic()
    while True:
        status = agent.status()
        kinds = held(status, pid)
        seen = observed(kinds, covered)
        ok = all(seen[k] == v for k, v in want.items())
        if ok or time.monotonic() - start > deadline:
            return status, kinds, ok, time.monotonic() - start


class Workload:
    """A workload process speaking checkpoint.py's protocol."""

    def __init__(self, argv, env, log):
        full_env = dict(os.environ, PYTHONPATH=WORKLOADS, PYTHONUNBUFFERED="1", **env)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(WORKLOADS, argv[0]), *argv[1:]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=full_env,
        )
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next(self, timeout=300):
        """The next JSON line, or None at the end of its output."""
        while True:
            line = self.lines.get(timeout=timeout)
            if line is None:
                return None
            try:
                return json.loads(line)
            except ValueError:
                continue  # a library printing on stdout

    def go_on(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()


def run_scenario(agent, name, argv, env, out):
    log_path = os.path.join(out, name.replace(" ", "_").replace(".", "_") + ".log")
    rows, notes, pid = [], [], None
    with open(log_path, "w") as log:
        w = Workload(argv, env, log)
        try:
            while (line := w.next()) is not None:
                if "checkpoint" not in line:
                    notes.append(line)
                    continue
                pid = line["pid"]
                want = expected(line)
                status, kinds, ok, waited = settle(agent, pid, want, line.get("kinds"))
                seen = observed(kinds, line.get("kinds"))
                rows.append(
                    {
                        "checkpoint": line["checkpoint"],
                        "framework": line["framework"],
                        "compare": line["compare"],
                        "kinds": line.get("kinds"),
                        "gpumem_compared": seen["compared"],
                        "outside": seen["on_device"] - seen["compared"],
                        "truth": line.get("truth"),
                        "expected": want,
                        "gpumem": kinds,
                        "gpumem_on_device": seen["on_device"],
                        "match": ok,
                        "waited_s": round(waited, 3),
                        "nvml_agent": nvml_by_agent(status, pid),
                        "nvml_direct": nvml_direct(pid),
                    }
                )
                w.go_on()
        except queue.Empty:
            w.proc.kill()
            notes.append({"error": "the workload printed nothing for 300 s; killed"})
        code = w.proc.wait()
    after = None
    if pid is not None:
        _, kinds, ok, _ = settle(agent, pid, {"on_device": 0, "host": 0, "managed": 0})
        after = {"gpumem": kinds, "released": ok}
    return {
        "scenario": name,
        "env": env,
        "pid": pid,
        "exit": code,
        "rows": rows,
        "notes": notes,
        "after_exit": after,
        "log": os.path.basename(log_path),
    }


def run_limit(agent, out, step=256 * MiB, steps_allowed=3, max_steps=12):
    """A real PyTorch process under `signal:SIGKILL`: the hard limit leaves
    room for `steps_allowed` steps above what it holds once started."""
    log = open(os.path.join(out, "pytorch_limit.log"), "w")
    w = Workload(["torch_limit.py", str(step), str(max_steps)], {}, log)
    started = w.next()
    if started is None or "checkpoint" not in started:
        w.proc.kill()
        return {"error": "the workload did not start", "exit": w.proc.wait()}
    pid = started["pid"]
    base = started["framework"]["reserved"]
    _, kinds, _, _ = settle(agent, pid, {"compared": base})
    hard = on_device(kinds) + steps_allowed * step + step // 2
    target = f"pid:{pid}"
    agent.call("limit", "set", f"{target}={hard},action=signal:SIGKILL")
    w.go_on()
    steps, finished = [], False
    while (line := w.next()) is not None:
        if "step" in line:
            steps.append(line)
        finished |= bool(line.get("finished"))
    code = w.proc.wait()
    log.close()
    limits = json.loads(agent.call("limit", "list", "--json"))
    agent.call("limit", "clear", target)
    return {
        "pid": pid,
        "started_reserved": base,
        "gpumem_at_start": kinds,
        "hard": hard,
        "steps_allowed": steps_allowed,
        "steps_done": len(steps),
        "finished": finished,
        "exit": code,
        "killed_at_limit": code == -9 and len(steps) == steps_allowed and not finished,
        "limit_usage_after": [l for l in limits if l["target"] == target],
    }


def calls_by_pid(records_path, pids):
    """What each workload process called, from the agent's records:
    (event, api, kind) -> count, and bytes charged."""
    out = {pid: collections.Counter() for pid in pids if pid}
    decisions = []
    with open(records_path) as f:
        for text in f:
            try:
                r = json.loads(text)
            except ValueError:
                continue
            pid = r.get("pid")
            if r.get("event") in ("limit", "limit_soft"):
                decisions.append(r)
            if pid in out and r.get("event") not in ("usage", "limit", "limit_soft"):
                out[pid][f"{r.get('event')} {r.get('api') or '-'} {r.get('kind') or '-'}"] += 1
    return {pid: dict(c) for pid, c in out.items()}, decisions


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gpumem", required=True)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--records", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", action="append", help="run only scenarios whose name contains this")
    args = ap.parse_args()
    agent = Agent(args.gpumem, args.socket)
    results = []
    for name, argv, env in SCENARIOS:
        if args.only and not any(o in name for o in args.only):
            continue
        print(f"kit: {name}", flush=True)
        results.append(run_scenario(agent, name, argv, env, args.out))
    limit = None
    if not args.only or any("limit" in o for o in args.only):
        print("kit: pytorch under a signal limit", flush=True)
        limit = run_limit(agent, args.out)
    pids = [r["pid"] for r in results] + ([limit.get("pid")] if limit else [])
    calls, decisions = calls_by_pid(args.records, pids)
    for r in results:
        r["calls"] = calls.get(r["pid"], {})
    if limit and limit.get("pid"):
        limit["calls"] = calls.get(limit["pid"], {})
        limit["decisions"] = [d for d in decisions if d.get("pid") == limit["pid"]]
    report = {"scenarios": results, "limit": limit, "status": agent.status()}
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)
    print(f"kit: results in {args.out}/report.json", flush=True)


if __name__ == "__main__":
    main()
