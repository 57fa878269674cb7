#!/bin/busybox sh
# /init of the test VMs (see xtask/src/vm): mounts what the agent and the
# tests need, runs every test binary with one thread, reports on the serial
# console, powers off. Lines starting GPUMEM-VM- are read by the host.
/bin/busybox --install -s /bin
export PATH=/bin HOME=/root CARGO_TARGET_DIR=/t RUST_BACKTRACE=1
# The profile the agent, the workload and the tests were built in
# (xtask/src/vm/mod.rs: PROFILE); the tests find them under /t/PROFILE.
export GPUMEM_BUILD_PROFILE="$(/bin/busybox cat /etc/gpumem-profile)"
# Under QEMU's emulation: the tests that repeat a race check many times
# repeat it fewer times here (tests/src/harness/env.rs: `emulated`).
export GPUMEM_EMULATED=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
echo "GPUMEM-VM-KERNEL $(uname -r)"
"/t/$GPUMEM_BUILD_PROFILE/gpumem" probe | sed 's/^/GPUMEM-VM-PROBE /'
# Known failures on this kernel (xtask/src/vm/kernels.rs): said, not run.
skips=""
while read -r prefix test reason; do
    case "$(uname -r)" in
    "$prefix"*)
        echo "SKIPPED $test: known failure on $prefix kernels: $reason"
        skips="$skips --skip $test"
        ;;
    esac
done < /etc/gpumem-skips
# NVIDIA's own driver library, for the tests that use it.
[ -f /nvidia/libcuda.so.1 ] && export GPUMEM_NVIDIA_LIBCUDA=/nvidia/libcuda.so.1
# Python with the real clients (cuda-bindings, numba-cuda), at its host path.
[ -x "$(cat /etc/gpumem-python)" ] && export GPUMEM_PYTHON="$(cat /etc/gpumem-python)"
[ -d /kit/workloads ] && export GPUMEM_KIT_WORKLOADS=/kit/workloads
# The suites (modules of the end-to-end binary) that run here.
suites="$(cat /etc/gpumem-suites)"
rc=0
round=1
repeat="$(cat /etc/gpumem-repeat)"
while [ "$rc" = 0 ] && [ "$round" -le "$repeat" ]; do
    echo "GPUMEM-VM-RUN e2e round $round of $repeat: $suites"
    /tests/e2e --test-threads=1 $suites $skips || rc=1
    round=$((round + 1))
done
echo "GPUMEM-VM-END rc=$rc"
sync
poweroff -f
