//! What the privileged end-to-end tests share: starting the real agent on
//! the simulated driver (`agent`), the simulated card and its own count
//! (`card`), running workloads in cgroups made for
//! the test (`cgroup`, `workload`), reading the agent's typed records
//! (`records`), waiting for conditions (`poll`), a disk that fills
//! (`tmpfs`), a real container runtime (`podman`), a real
//! terminal (`tmux`), a bpffs directory for `--persist` (`pins`), the bpf links a process holds (`links`), HTTP and a real Prometheus server (`http`, `prometheus`),
//! and what a test needs to know of where it runs (`env`). Every wait is for a
//! condition, with a deadline that fails the test with context.
mod agent;
mod agent_image;
mod card;
mod cgroup;
mod daemonset;
mod env;
pub mod http;
mod kubelet;
mod links;
mod output;
mod pins;
mod podman;
mod poll;
mod procfs;
mod prometheus;
mod records;
mod tmpfs;
mod tmux;
mod workload;

pub use self::{
    agent::Agent,
    agent_image::AgentContainer,
    card::{card_held, SimCard, CONTEXT_COST},
    cgroup::Cgroup,
    daemonset::{DaemonSet, Mount},
    env::{
        emulated, multi_link_refusal, paths, privileged, provided, register_write_refusal, scratch, skip,
        test_name, user_write_refusal, Paths,
    },
    kubelet::{Driver, KubePod, KubeletLogs},
    links::{link_exists, links_of, BpfLink},
    pins::PinDir,
    podman::{Container, Podman},
    poll::{poll, poll_moving, wait_until, DEADLINE},
    procfs::{all_stopped, cpu_ticks, rss_kib, stat_fields, stopped, stopped_while},
    prometheus::Prometheus,
    records::*,
    tmpfs::Tmpfs,
    tmux::Tmux,
    workload::Workload,
};
