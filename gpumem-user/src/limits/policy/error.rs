//! Why a limit, a size, an action or a target as the user wrote it is
//! refused: each says what is wrong and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("`{0}` is not a size: it must start with a number (for example 8GiB)")]
    SizeWithoutNumber(String),
    #[error("`{text}`: unknown unit `{unit}` (use B, KiB, MiB, GiB, TiB, or KB, MB, GB, TB)")]
    SizeUnit { text: String, unit: String },
    #[error("`{0}` is not a size")]
    Size(String),
    #[error("`{0}` is too large")]
    SizeTooLarge(String),
    #[error("`{0}`: a size has at most 9 decimals")]
    SizeDecimals(String),
    #[error("`{0}`: a limit of zero bytes would refuse every allocation; give a positive size")]
    SizeZero(String),
    #[error("`{0}`: the ring buffer must be a power of two from 64KiB to 1GiB (for example 4MiB)")]
    RingSize(String),
    #[error("`{0}` is not an action: use audit, signal, signal:SIG (e.g. signal:SIGTERM) or deny")]
    Action(String),
    #[error("signal {0} is out of range 1-64")]
    SignalRange(i32),
    #[error("`{0}` is not a signal gpumem knows (use a name like SIGTERM or a number)")]
    Signal(String),
    #[error("`{0}`: expected TARGET=SIZE, e.g. cgroup:/team-a=8GiB")]
    NoSize(String),
    #[error("`{part}` in `{text}`: expected KEY=VALUE")]
    KeyValue { part: String, text: String },
    #[error("device `{0}` is not a device index")]
    Device(String),
    #[error("view `{0}`: use `limit` (the limit as the card's size) or `driver` (the card as it is)")]
    View(String),
    #[error("`{key}` in `{text}`: unknown key (use soft, action, fallback, device, view)")]
    UnknownKey { key: String, text: String },
    #[error("{target}: the soft limit ({soft}) must be below the hard limit ({hard})")]
    SoftNotBelowHard { target: String, soft: u64, hard: u64 },
    #[error("{0}: the fallback for deny cannot itself be deny")]
    FallbackIsDeny(String),
    #[error("{0}: a fallback only applies to action=deny")]
    FallbackWithoutDeny(String),
    #[error("cgroup `{0}`: give the path from the cgroup2 root, starting with /")]
    CgroupNotAbsolute(String),
    #[error("pid `{0}` is not a process id")]
    Pid(String),
    #[error("comm `{0}` must be 1 to 15 characters (the kernel's TASK_COMM_LEN)")]
    Comm(String),
    #[error("`{0}` is not a target: use cgroup:/path, pid:N, comm:NAME, namespace:NS or pod:NS/GLOB")]
    Target(String),
    #[error("give exactly one of cgroup, pid, comm, namespace or pod")]
    OneTarget,
    #[error("`{0}` is not a Kubernetes namespace name (lowercase letters, digits and -, at most 63)")]
    Namespace(String),
    #[error("pod `{0}`: give NAMESPACE/NAME, the name a glob (* and ?), e.g. team-a/trainer-*")]
    PodGlob(String),
    #[error(
        "per `{0}`: use pod (each pod its own limit) or namespace (one limit over the namespace's pods on this \
         node), with namespace only"
    )]
    Per(String),
    #[error("{0}: longer than the {max} bytes the kernel reads of an environment string", max = gpumem_common::declare::CAP - 2)]
    TooLong(String),
    #[error("{0}: action deny needs a kernel that lets uprobe programs write registers, and this one does not; add a fallback, e.g. `,fallback=signal:SIGTERM`")]
    DenyUnsupported(String),
    #[error("{0}: view=limit needs a kernel that lets uprobe programs write user memory, and this one does not; use view=driver, or leave view out")]
    ViewUnsupported(String),
    #[error("`{0}` is not a variable gpumem reads limits from: use GPUMEM_LIMIT, CUDA_DEVICE_MEMORY_LIMIT, NVIDIA_GPU_MEMORY_LIMIT, GPU_MEMORY_LIMIT, all or none")]
    EnvName(String),
    #[error("`{text}` was refused (reason {code})")]
    Unread { code: u32, text: String },
}
