//! An event line's JSON, written by hand: byte for byte what serde_json
//! writes for `Line::Event` (the tests compare the two over arbitrary
//! lines), at a fraction of its cost. serde_json escapes every key of a
//! flattened struct and formats through a map; here the keys are constants
//! and a string is copied as it is unless it holds a byte JSON escapes.
//! A container, on every record of a pod's, is written here too (through
//! serde_json, a pod's record cost the agent a fifth more); the rare parts
//! (flags, holders) still go through serde_json.
//!
//! The caller's cgroup and container are most of a pod's line (its path,
//! the container's id, the pod's names: some 430 of 830 bytes), the same
//! on every line of its workload's: [`Placed`] keeps them as written for
//! the line before, and a line of the same cgroup copies them.
use std::{io, sync::Arc};

use bytes::{BufMut, BytesMut};

use super::EventLine;
use crate::enrich::container::Container;

/// The `cgroup` and `container` members of the last line [`write`] wrote
/// (from the comma before `"cgroup"` to the end of the container), and the
/// values they were written from: held here, so that a line whose values
/// are the very same (the same allocations, which cannot change) is given
/// the same bytes.
#[derive(Debug, Default)]
pub struct Placed {
    cgroup: Option<Arc<str>>,
    container: Option<Arc<Container>>,
    /// Empty before the first line and after a member that failed to
    /// write; never empty once written (it begins with `,"cgroup":`).
    json: BytesMut,
}

impl Placed {
    /// Appends the `cgroup` and `container` members of `l` to `out`: the
    /// bytes of the line before where its values are the same ones.
    fn put(&mut self, out: &mut BytesMut, l: &EventLine) -> io::Result<()> {
        let c = &l.caller;
        let same = !self.json.is_empty()
            && same_arc(&self.cgroup, &c.cgroup)
            && same_arc(&self.container, &l.container);
        if !same {
            self.json.clear();
            if let Err(e) = cgroup_members(&mut self.json, c.cgroup.as_deref(), l.container.as_deref()) {
                self.json.clear();
                return Err(e);
            }
            (self.cgroup, self.container) = (c.cgroup.clone(), l.container.clone());
        }
        out.put_slice(&self.json);
        Ok(())
    }
}

/// Whether `a` and `b` are the same allocation (or both absent).
fn same_arc<T: ?Sized>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// `,"cgroup":...` and, for a container's cgroup, `,"container":{...}`.
fn cgroup_members(out: &mut BytesMut, cgroup: Option<&str>, container: Option<&Container>) -> io::Result<()> {
    out.put_slice(b",\"cgroup\":");
    match cgroup {
        Some(path) => string(out, path)?,
        None => out.put_slice(b"null"),
    }
    if let Some(container) = container {
        out.put_slice(b",\"container\":");
        container_object(out, container)?;
    }
    Ok(())
}

/// Appends `l` as one JSON object (no newline) to `out`; `placed`, the
/// cgroup and container of the line before (see [`Placed`]).
pub fn write(out: &mut BytesMut, l: &EventLine, placed: &mut Placed) -> io::Result<()> {
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
    placed.put(out, l)?;
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
