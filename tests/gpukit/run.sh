#!/bin/bash
# The GPU kit: on a machine with an NVIDIA GPU, its driver and the usual
# Python stack, run as root:   ./run.sh [OUTDIR]   (default: ./out)
# Starts the agent (gpumem, beside this script), runs kit.py's scenarios
# (PyTorch, JAX, CuPy, numba-cuda, cuda.core, cuda-bindings, a limit on
# PyTorch), times allocation pairs and a PyTorch training step with each
# allocator untraced, traced and untraced again, and writes OUTDIR/report.md and report.json, the agent's
# records and log, and `gpumem probe`'s report. Needs no network and no
# Rust. PYTHON picks the interpreter (default python3); GPUKIT_ONLY=NAME
# runs only scenarios whose name contains NAME; GPUKIT_LIBCUDA=PATH
# attaches to that library instead of the ones the agent finds.
set -u
kit=$(cd "$(dirname "$0")" && pwd)
out=${1:-$kit/out}
python=${PYTHON:-python3}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
if [ "$(id -u)" != 0 ]; then
    echo "run.sh: run as root (the agent attaches eBPF programs)" >&2
    exit 1
fi
lib=${GPUKIT_LIBCUDA:-$(ldconfig -p | awk '/libcuda\.so\.1 / {print $NF; exit}')}
if [ -z "$lib" ]; then
    echo "run.sh: no libcuda.so.1 in the ldconfig cache: is NVIDIA's driver installed? (GPUKIT_LIBCUDA=PATH names one)" >&2
    exit 1
fi
echo "run.sh: libcuda: $lib -> $(readlink -f "$lib")"
"$kit/gpumem" probe --libcuda "$lib" >"$out/probe.txt" 2>&1
cat "$out/probe.txt"
"$python" "$kit/environment.py" >"$out/environment.json" || exit 1
: >"$out/pairs.jsonl"
# Both loops (plain cuMemAlloc_v2 pairs, stream-ordered pool pairs) at each stage.
pairs() {
    for loop in plain pool; do
        "$python" "$kit/workloads/pairs.py" "$1" 7 2000 $((1 << 20)) $loop >>"$out/pairs.jsonl" ||
            echo "run.sh: pairs.py $1 $loop failed" >&2
    done
}
# A PyTorch training step with each allocator, at the same stages.
steps() {
    for allocator in native cudaMallocAsync; do
        "$python" "$kit/workloads/train_step.py" "$1" $allocator 3 100 >>"$out/steps.jsonl" ||
            echo "run.sh: train_step.py $1 $allocator failed" >&2
    done
}
: >"$out/steps.jsonl"
pairs untraced
steps untraced
sock=$(mktemp -u /tmp/gpumem-kit.XXXXXX.sock)
attach=()
[ -n "${GPUKIT_LIBCUDA:-}" ] && attach=(--libcuda "$GPUKIT_LIBCUDA")
"$kit/gpumem" run "${attach[@]}" --output "$out/records.jsonl" --socket "$sock" 2>"$out/agent.log" &
agent=$!
# Wait for the agent's ready line (or its death) for at most a minute.
for _ in $(seq 600); do
    grep -q '^gpumem: ready$' "$out/agent.log" && break
    kill -0 $agent 2>/dev/null || break
    sleep 0.1
done
if ! grep -q '^gpumem: ready$' "$out/agent.log"; then
    echo "run.sh: the agent did not become ready; its log:" >&2
    cat "$out/agent.log" >&2
    kill $agent 2>/dev/null
    exit 1
fi
pairs traced
steps traced
# The time inside the agent's programs, per loop: the kernel's statistics
# on for one more traced run of each (they cost two clock reads a run).
stats_was=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo 0)
if sysctl -qw kernel.bpf_stats_enabled=1; then
    : >"$out/programs.jsonl"
    for loop in plain pool; do
        before=$("$python" "$kit/bpf_stats.py" $agent)
        "$python" "$kit/workloads/pairs.py" "statistics on" 1 20000 $((1 << 20)) $loop >/dev/null &&
            echo "{\"loop\": \"$loop\", \"pairs\": 20000, \"before\": $before, \"after\": $("$python" "$kit/bpf_stats.py" $agent)}" >>"$out/programs.jsonl"
    done
    sysctl -qw kernel.bpf_stats_enabled="$stats_was"
else
    echo "run.sh: cannot turn on kernel.bpf_stats_enabled: no per-program times" >&2
fi
only=()
[ -n "${GPUKIT_ONLY:-}" ] && only=(--only "$GPUKIT_ONLY")
"$python" "$kit/kit.py" --gpumem "$kit/gpumem" --socket "$sock" --records "$out/records.jsonl" --out "$out" "${only[@]}"
rc=$?
kill -INT $agent
wait $agent
echo "run.sh: agent exit $?; kit exit $rc"
pairs "untraced after"
steps "untraced after"
"$python" "$kit/report_md.py" "$out" || rc=1
exit $rc
