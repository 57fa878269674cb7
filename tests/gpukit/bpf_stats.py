"""The kernel's run-time statistics of the eBPF programs a process holds
(the agent's): runs and nanoseconds per program name, summed over the
programs of one name. Read with bpf(2) through ctypes (no bpftool needed):
the program ids from /proc/PID/fdinfo, each program's bpf_prog_info.
The kernel counts only while kernel.bpf_stats_enabled is 1 (run.sh turns
it on around one loop of each kind: it costs two clock reads a run).

Usage: bpf_stats.py PID   (prints one JSON object: {name: [runs, ns]})
"""
import ctypes
import json
import os
import struct
import sys

SYS_BPF = 321  # x86-64
BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
INFO_SIZE = 256
# struct bpf_prog_info: name[16] at 64, run_time_ns and run_cnt at 192.
NAME_AT, RUN_AT = 64, 192

libc = ctypes.CDLL(None, use_errno=True)


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(SYS_BPF, cmd, buf, 128)
    if r < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return r


def prog_ids(pid):
    ids = set()
    fdinfo = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(fdinfo):
        try:
            with open(os.path.join(fdinfo, fd)) as f:
                for line in f:
                    if line.startswith("prog_id:"):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass  # closed meanwhile
    return ids


def stats(pid):
    out = {}
    for pid_ in sorted(prog_ids(pid)):
        try:
            fd = bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", pid_))
        except OSError:
            continue  # unloaded meanwhile
        try:
            info = ctypes.create_string_buffer(INFO_SIZE)
            bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, INFO_SIZE, ctypes.addressof(info)))
        finally:
            os.close(fd)
        name = info.raw[NAME_AT:NAME_AT + 16].split(b"\0")[0].decode()
        ns, runs = struct.unpack_from("QQ", info.raw, RUN_AT)
        total = out.setdefault(name, [0, 0])
        total[0] += runs
        total[1] += ns
    return out


if __name__ == "__main__":
    print(json.dumps(stats(int(sys.argv[1]))))
