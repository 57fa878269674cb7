//! An event line's JSON, written by hand: byte for byte what serde_json
//! writes for `Line::Event` (the tests compare the two over arbitrary
//! lines), at a fraction of its cost. serde_json escapes every key of a
//! flattened struct and formats through a map; here the keys are constants
//! and a string is copied as it is unless it holds a byte JSON escapes.
//! A container, on every record of a pod's, is written here too (through
//! serde_json, a pod's record cost the agent a fifth more); the rare parts
//! (flags, holders) still go through serde_json.
use std::io;

use bytes::{BufMut, BytesMut};

use super::EventLine;
use crate::enrich::container::Container;

/// Appends `l` as one JSON object (no newline) to `out`.
pub fn write(out: &mut BytesMut, l: &EventLine) -> io::Result<()> {
    let c = &l.caller;
    out.put_slice(b"{\"ts_ns\":");
    number(out, c.ts_ns);
    out.put_slice(b",\"event\":");
    name(out, c.event.name());
    out.put_slice(b",\"api\":");
    name(out, &c.api);
    out.put_slice(b",\"pid\":");
    number(out, c.pid);
    out.put_slice(b",\"tid\":");
    number(out, c.tid);
    out.put_slice(b",\"comm\":");
    string(out, &c.comm)?;
    out.put_slice(b",\"cgroup_id\":");
    number(out, c.cgroup_id);
    out.put_slice(b",\"cgroup\":");
    match &c.cgroup {
        Some(path) => string(out, path)?,
        None => out.put_slice(b"null"),
    }
    if let Some(container) = &l.container {
        out.put_slice(b",\"container\":");
        container_object(out, container)?;
    }
    out.put_slice(b",\"device\":");
    optional(out, l.device);
    out.put_slice(b",\"kind\":");
    name(out, &l.kind);
    out.put_slice(b",\"size\":");
    number(out, l.size);
    out.put_slice(b",\"addr\":");
    name(out, &l.addr);
    out.put_slice(b",\"result\":");
    optional(out, l.result);
    out.put_slice(b",\"proc_total\":");
    number(out, l.proc_total);
    out.put_slice(b",\"cgroup_total\":");
    number(out, l.cgroup_total);
    if !l.flags.is_empty() {
        out.put_slice(b",\"flags\":");
        serde_json::to_writer(out.writer(), &l.flags)?;
    }
    if let Some(holders) = &l.holders {
        out.put_slice(b",\"holders\":");
        serde_json::to_writer(out.writer(), holders)?;
    }
    out.put_u8(b'}');
    Ok(())
}

/// A container as serde_json writes `Container`: its fields in order, the
/// absent ones left out.
fn container_object(out: &mut BytesMut, c: &Container) -> io::Result<()> {
    out.put_slice(b"{\"runtime\":");
    string(out, &c.runtime)?;
    out.put_slice(b",\"id\":");
    string(out, &c.id)?;
    let optional = [
        (&b",\"pod_uid\":"[..], &c.pod_uid),
        (b",\"qos\":", &c.qos),
        (b",\"namespace\":", &c.namespace),
        (b",\"pod\":", &c.pod),
        (b",\"name\":", &c.name),
    ];
    for (key, value) in optional {
        if let Some(v) = value {
            out.put_slice(key);
            string(out, v)?;
        }
    }
    out.put_u8(b'}');
    Ok(())
}

fn number(out: &mut BytesMut, n: impl itoa::Integer) {
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn optional(out: &mut BytesMut, n: Option<u32>) {
    match n {
        Some(n) => number(out, n),
        None => out.put_slice(b"null"),
    }
}

/// A string gpumem makes (an event, entry point or kind name, an
/// address in hex), which never holds a byte JSON escapes: copied between
/// quotes.
fn name(out: &mut BytesMut, s: &str) {
    debug_assert!(!needs_escape(s), "{s:?} is a name gpumem chose");
    quoted(out, s);
}

fn quoted(out: &mut BytesMut, s: &str) {
    out.reserve(s.len() + 2);
    out.put_u8(b'"');
    out.put_slice(s.as_bytes());
    out.put_u8(b'"');
}

/// Whether `s` holds a byte JSON escapes: a control character, a quote
/// or a backslash.
fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// A string from outside (a thread name, a cgroup path): copied between
/// quotes unless it holds a byte JSON escapes, then as serde_json escapes
/// it.
fn string(out: &mut BytesMut, s: &str) -> io::Result<()> {
    match needs_escape(s) {
        false => quoted(out, s),
        true => serde_json::to_writer(out.writer(), s)?,
    }
    Ok(())
}

#[cfg(test)]
mod tests;
