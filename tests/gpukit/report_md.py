"""The kit's report as markdown: the environment, one table of
checkpoints, the limit's outcome, the cost of tracing on the real driver
and what each client called.

Usage: report_md.py OUTDIR   (reads report.json, environment.json,
pairs.jsonl, programs.jsonl and steps.jsonl there; writes report.md)
"""
import json
import os
import statistics
import sys

MiB = 1 << 20


def size(n):
    if n is None:
        return "-"
    return f"{n:,} ({n / MiB:.1f} MiB)" if abs(n) >= MiB else f"{n:,}"


def cost(pairs):
    """The pairs.py runs: median ns per pair of each, per loop, and the
    traced run's ratio to the untraced ones."""
    if not pairs:
        return []
    out = ["## What tracing costs on the real driver", ""]
    names = {
        "plain": "cuMemAlloc_v2 + cuMemFree_v2",
        "pool": "cuMemAllocAsync + cuMemFreeAsync (the default pool, legacy stream)",
    }
    for loop in ("plain", "pool"):
        runs = [p for p in pairs if p.get("loop", "plain") == loop]
        if not runs:
            continue
        out += [
            f"{names[loop]} of {runs[0]['size']:,} bytes through cuda-bindings, "
            f"{runs[0]['pairs']:,} pairs a round (pairs.py); median of the rounds:",
            "",
        ]
        medians = {p["label"]: statistics.median(p["ns_per_pair"]) for p in runs}
        for p in runs:
            out.append(f"- {p['label']}: {medians[p['label']]:,.0f} ns/pair (rounds: {p['ns_per_pair']})")
        base = [v for k, v in medians.items() if k.startswith("untraced")]
        if "traced" in medians and base:
            out.append(f"- traced / untraced: {medians['traced'] / statistics.mean(base):.3f}")
        out.append("")
    return out


def training(steps):
    """steps.jsonl: a PyTorch training step's milliseconds, per allocator,
    untraced, traced and untraced again (train_step.py)."""
    if not steps:
        return []
    out = [
        "A PyTorch training step (train_step.py: 4-layer transformer encoder, batch 16 x 128, AdamW), "
        "median of the rounds, ms per step:",
        "",
        "| allocator | untraced | traced | untraced after | traced / untraced |",
        "| --- | --- | --- | --- | --- |",
    ]
    for allocator in ("native", "cudaMallocAsync"):
        runs = {s["label"]: s for s in steps if s["allocator"] == allocator}
        if not runs:
            continue
        skipped = [s["skipped"] for s in runs.values() if "skipped" in s]
        if skipped:
            out.append(f"| {allocator} | not run: {skipped[0]} | | | |")
            continue
        med = {k: statistics.median(v["ms_per_step"]) for k, v in runs.items()}

        def cell(k):
            return f"{med[k]:.2f} ({runs[k]['ms_per_step']})" if k in med else "-"

        base = [med[k] for k in ("untraced", "untraced after") if k in med]
        ratio = f"{med['traced'] / statistics.mean(base):.3f}" if "traced" in med and base else "-"
        out.append(f"| {allocator} | {cell('untraced')} | {cell('traced')} | {cell('untraced after')} | {ratio} |")
    out.append("")
    return out


def programs(runs):
    """programs.jsonl: the time inside each of the agent's programs that ran
    every pair of a loop (the kernel's run-time statistics), per loop."""
    if not runs:
        return []
    out = [
        "Inside gpumem's programs (kernel.bpf_stats_enabled, one more traced run of each loop):",
        "",
        "| loop | program | runs a pair | ns a run | ns a pair |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in runs:
        total = 0.0
        for name in sorted(r["after"]):
            runs_, ns = (a - b for a, b in zip(r["after"][name], r["before"].get(name, [0, 0])))
            total += ns / r["pairs"]
            if runs_ >= r["pairs"]:
                out.append(f"| {r['loop']} | {name} | {runs_ / r['pairs']:.2f} | {ns / runs_:,.0f} | {ns / r['pairs']:,.0f} |")
        out.append(f"| {r['loop']} | all, per pair | | | {total:,.0f} |")
    out.append("")
    return out


def render(report, env=None, pairs=(), progs=(), steps=()):
    out = ["# gpumem GPU kit report", ""]
    if env:
        out += [
            f"- kernel {env['kernel']}, Python {env['python']}",
            f"- GPU: {'; '.join(env['gpus'])}",
            "- " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()),
        ]
    status = report["status"]
    out += [f"- libraries attached: {', '.join(status.get('libraries', []))}", ""]
    out += [
        "## Each framework's figure, gpumem's and NVML's, per checkpoint",
        "",
        "gpumem = bytes the agent charged to the process in the kinds the framework's figure "
        "covers (device, array and VMM unless the row names them); outside = its other bytes in "
        "device memory; NVML = the driver's per-process used memory (allocations plus context and "
        "modules, which no allocation call shows).",
        "",
        "| scenario | checkpoint | framework figure | gpumem | equal | outside | NVML | NVML - gpumem | host/managed (gpumem = truth) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in report["scenarios"]:
        for r in s["rows"]:
            fig = r["framework"].get(r["compare"]) if r["compare"] else None
            nvml = r["nvml_direct"] if r["nvml_direct"] is not None else r["nvml_agent"]
            extra = []
            for kind in ("host", "managed"):
                if kind in r["expected"]:
                    extra.append(f"{kind} {size(r['gpumem'].get(kind, 0))} = {size(r['expected'][kind])}")
            kinds = f" ({', '.join(r['kinds'])})" if r.get("kinds") else ""
            out.append(
                f"| {s['scenario']} | {r['checkpoint']} | {r['compare']} {size(fig)} | {size(r['gpumem_compared'])}{kinds} "
                f"| {'yes' if r['match'] else '**no**'} | {size(r['outside'])} | {size(nvml)} "
                f"| {size(nvml - r['gpumem_on_device']) if nvml is not None else '-'} | {'; '.join(extra) or '-'} |"
            )
        after = s.get("after_exit") or {}
        out.append(
            f"| {s['scenario']} | after exit ({s['exit']}) | - | {size(sum((after.get('gpumem') or {}).values()))} "
            f"| {'yes' if after.get('released') else '**no**'} | - | - | - | - |"
        )
    out.append("")
    out += cost(pairs)
    out += training(steps)
    out += programs(progs)
    limit = report.get("limit")
    if limit:
        out += ["## A real PyTorch process under `signal:SIGKILL`", ""]
        if "error" in limit:
            out.append(f"- {limit['error']} (exit {limit['exit']})")
        else:
            out += [
                f"- hard limit {size(limit['hard'])} on pid {limit['pid']}, which held {size(limit['started_reserved'])} "
                f"when set; room for {limit['steps_allowed']} steps of 256 MiB",
                f"- steps done: {limit['steps_done']}; exit {limit['exit']}; "
                f"killed at the limit: {'yes' if limit['killed_at_limit'] else '**no**'}",
                f"- decisions recorded: {len(limit.get('decisions', []))}"
                + (f"; the first: `{json.dumps(limit['decisions'][0])[:400]}`" if limit.get("decisions") else ""),
            ]
        out.append("")
    out += ["## What each client called (records of its process: event, api, kind: count)", ""]
    for s in report["scenarios"]:
        calls = ", ".join(f"{k}: {v}" for k, v in sorted(s.get("calls", {}).items()))
        out.append(f"- **{s['scenario']}**: {calls or 'nothing recorded'}")
        for n in s["notes"]:
            out.append(f"  - note: `{json.dumps(n)[:300]}`")
    out.append("")
    return "\n".join(out)


def main():
    out = sys.argv[1]

    def read(name, default):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            return default
        with open(path) as f:
            if name.endswith(".jsonl"):
                return [json.loads(line) for line in f if line.strip()]
            return json.load(f)

    report = read("report.json", None)
    if report is None:
        raise SystemExit(f"no report.json in {out}: kit.py did not finish")
    text = render(
        report,
        read("environment.json", None),
        read("pairs.jsonl", []),
        read("programs.jsonl", []),
        read("steps.jsonl", []),
    )
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
