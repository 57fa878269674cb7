//! The `declared` record: what a process declared in its environment at
//! its exec, what of it is in force, and what was refused and why.
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use gpumem_common::{
    declare::{
        declaration::{flag, Declaration},
        names::{source, VarName, DEVICES},
        rule::{error, RuleText},
    },
    limit_view, DEVICE_ANY,
};

use crate::{
    decode::Origin,
    enrich::container::Container,
    limits::{
        containers::ContainerLimit,
        policy::{rule_text, Action},
    },
    output::caller::Caller,
};

/// The `event` of a `declared` record.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DeclaredEvent {
    Declared,
}

/// What a process declared.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeclaredLine {
    #[serde(flatten)]
    pub caller: Caller<DeclaredEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
    /// The limits in force, from here on, for this process.
    pub limits: Vec<DeclaredLimit>,
    /// Variables found and not in force, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refusal>,
    /// The operator's cap (`--env-limits-max`), where it clamped a value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clamped_to: Option<u64>,
    /// The environment had more strings than the kernel reads at exec.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// For a process in a container: what its declaration did to the
    /// container's rules (every process of the container is bound by them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_limit: Option<ContainerLimit>,
}

/// One limit in force.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DeclaredLimit {
    /// The variable it comes from (HAMi's per-device one with its index).
    pub variable: String,
    /// The text of `GPUMEM_LIMIT` as read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Absent: all devices count together; else each device listed is
    /// limited on its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devices: Option<Vec<u32>>,
    pub hard: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soft: Option<u64>,
    pub action: String,
    pub view: String,
    /// Above the operator's cap, and clamped to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clamped: bool,
}

/// A variable found and not in force.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Refusal {
    pub variable: String,
    pub reason: String,
}

impl DeclaredLine {
    pub fn new(o: &Origin, d: &Declaration, cgroup: Option<Arc<str>>, container: Option<Container>) -> Self {
        let clamped = |src: u32| d.clamped & source::bit(src) != 0;
        let mut limits = Vec::new();
        let text = String::from_utf8_lossy(&d.text[..(d.text_len as usize).min(d.text.len())]).into_owned();
        if d.total.active != 0 {
            let t = &d.total;
            limits.push(DeclaredLimit {
                variable: "GPUMEM_LIMIT".into(),
                text: Some(text.clone()),
                devices: (t.device != DEVICE_ANY).then(|| vec![t.device]),
                hard: t.hard,
                soft: (t.soft != 0).then_some(t.soft),
                action: Action::of(t.action, t.signal).to_string(),
                view: limit_view::name(t.view).into(),
                clamped: clamped(source::GPUMEM),
            });
        }
        if d.each_error == 0 {
            limits.extend(device_limits(d));
        }
        let incomplete = d.flags & flag::INCOMPLETE != 0;
        let clamped_to = (d.clamped != 0).then_some(d.cap);
        let caller = Caller::new(o, DeclaredEvent::Declared, "", cgroup);
        Self {
            caller,
            container,
            limits,
            refused: refusals(d, &text),
            clamped_to,
            incomplete,
            container_limit: None,
        }
    }
}

/// Each device's own limits, one entry per variable and size.
fn device_limits(d: &Declaration) -> Vec<DeclaredLimit> {
    let mut out: Vec<DeclaredLimit> = Vec::new();
    for i in 0..DEVICES {
        let Some(src) = d.device_source(i) else { continue };
        let variable = VarName { source: src, device: i }.to_string();
        let hard = d.each[i];
        match out.iter_mut().find(|l| l.variable == variable && l.hard == hard) {
            Some(l) => l.devices.get_or_insert_with(Vec::new).push(i as u32),
            None => out.push(DeclaredLimit {
                variable,
                text: None,
                devices: Some(vec![i as u32]),
                hard,
                soft: None,
                action: Action::of(d.each_action, d.each_signal).to_string(),
                view: limit_view::name(d.each_view).into(),
                clamped: d.cap != 0 && hard == d.cap && d.clamped & source::bit(src) != 0,
            }),
        }
    }
    out
}

/// The variables found and not in force, each with why.
fn refusals(d: &Declaration, text: &str) -> Vec<Refusal> {
    let refused = |variable: &str, reason: String| Refusal { variable: variable.into(), reason };
    let mut out = Vec::new();
    if d.failed & source::bit(source::GPUMEM) != 0 {
        out.push(refused("GPUMEM_LIMIT", rule_reason(d, text)));
    }
    for (src, code) in [(source::NVIDIA, d.nvidia_error), (source::KAI, d.kai_error)] {
        if d.failed & source::bit(src) != 0 {
            let why = match code {
                2 => "above 17592186044415 MiB, the most NVIDIA's hook takes".into(),
                _ => "not a whole number of MiB (decimal digits only, as NVIDIA's hook reads it)".to_string(),
            };
            out.push(refused(source::name(src), why));
        }
    }
    if d.found & source::bit(source::HAMI) != 0 && d.hami_all == 0 {
        out.push(refused("CUDA_DEVICE_MEMORY_LIMIT", "HAMi-core reads it as 0: no limit".into()));
    }
    if d.each_error == error::DENY_UNSUPPORTED {
        let why =
            "the agent's default action is deny, which this kernel cannot do: no device limit is in force";
        out.push(refused("CUDA_DEVICE_MEMORY_LIMIT, NVIDIA_GPU_MEMORY_LIMIT, GPU_MEMORY_LIMIT", why.into()));
    }
    out
}

/// Why `GPUMEM_LIMIT` was refused: its text read again (the same parser
/// as the kernel's) where the record holds all of it, else the code.
fn rule_reason(d: &Declaration, text: &str) -> String {
    let e = &d.error;
    let whole = (d.text_len as usize) < d.text.len();
    let spec = if whole && e.code != error::TOO_LONG {
        match rule_text::read(text, "GPUMEM_LIMIT", text) {
            Err(spec) => spec,
            Ok(_) => rule_text::told(text, "GPUMEM_LIMIT", text, e, &RuleText::default()),
        }
    } else {
        rule_text::told(text, "GPUMEM_LIMIT", text, e, &RuleText::default())
    };
    spec.to_string()
}
