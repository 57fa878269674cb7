//! Import cycles between the modules (files) of a crate: each file's
//! references to other modules (`use` trees and `crate::`, `super::`,
//! `self::` and child-module paths in code) are read as text, each path is
//! resolved to the deepest module file it names, and any group of files
//! that reach each other is a cycle. A parent declaring a child (`mod x;`)
//! is containment, not an import.
use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// One crate's module files: module path (`a::b`, "" for the root) to file.
pub struct Crate {
    modules: BTreeMap<String, PathBuf>,
}

impl Crate {
    /// The module files under `src` (a crate's `src/`; `bins` are extra
    /// crate roots under it, each read as a crate of its own).
    pub fn read(src: &Path, root_file: &str) -> anyhow::Result<Self> {
        let mut modules = BTreeMap::new();
        modules.insert(String::new(), src.join(root_file));
        let mut stack = vec![(String::new(), src.join(root_file))];
        while let Some((path, file)) = stack.pop() {
            let text = std::fs::read_to_string(&file)?;
            let dir = if path.is_empty() || file.file_name().is_some_and(|n| n == "mod.rs") {
                file.parent().map(Path::to_path_buf).unwrap_or_default()
            } else {
                file.with_extension("")
            };
            for child in declared_modules(&strip(&text)) {
                let candidates = [dir.join(format!("{child}.rs")), dir.join(&child).join("mod.rs")];
                if let Some(f) = candidates.into_iter().find(|f| f.exists()) {
                    let p = if path.is_empty() { child.clone() } else { format!("{path}::{child}") };
                    modules.insert(p.clone(), f.clone());
                    stack.push((p, f));
                }
            }
        }
        Ok(Self { modules })
    }

    /// Every import edge between two of the crate's files.
    pub fn edges(&self) -> anyhow::Result<BTreeSet<(String, String)>> {
        let mut edges = BTreeSet::new();
        for (module, file) in &self.modules {
            let text = strip(&std::fs::read_to_string(file)?);
            let children: BTreeSet<String> = declared_modules(&text).into_iter().collect();
            for (depth, path) in referenced_paths(&text, &children) {
                // Within an inline module (`mod tests { .. }`), `super`
                // first leaves it: the file's own module.
                let leaving = path.iter().take_while(|s| *s == "super").count().min(depth);
                let path = if leaving > 0 {
                    std::iter::once("self".to_string()).chain(path[leaving..].iter().cloned()).collect()
                } else {
                    path
                };
                if let Some(target) = self.resolve(module, &path) {
                    if &target != module {
                        edges.insert((module.clone(), target));
                    }
                }
            }
        }
        Ok(edges)
    }

    /// The deepest module a path used in `module` names, if it is a file.
    fn resolve(&self, module: &str, path: &[String]) -> Option<String> {
        let mut here: Vec<&str> = if module.is_empty() { vec![] } else { module.split("::").collect() };
        let mut rest = path;
        match path.first().map(String::as_str) {
            Some("crate") => {
                here.clear();
                rest = &path[1..];
            }
            Some("self") => rest = &path[1..],
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    here.pop()?;
                    rest = &rest[1..];
                }
            }
            _ => {} // a child module of this one (the caller checked)
        }
        let mut found = here.join("::");
        let mut walk = here.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for seg in rest {
            walk.push(seg.clone());
            let candidate = walk.join("::");
            if !self.modules.contains_key(&candidate) {
                break;
            }
            found = candidate;
        }
        self.modules.contains_key(&found).then_some(found)
    }

    /// Groups of two or more modules that import each other, each sorted.
    pub fn cycles(&self) -> anyhow::Result<Vec<Vec<String>>> {
        Ok(strongly_connected(&self.edges()?).into_iter().filter(|c| c.len() > 1).collect())
    }
}

/// Text without comments, string and char literals (their contents could
/// look like paths).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let (mut out, mut i) = (String::with_capacity(text.len()), 0);
    while i < b.len() {
        let skip = if b[i..].starts_with(b"//") {
            b[i..].iter().position(|&c| c == b'\n').unwrap_or(b.len() - i)
        } else if b[i..].starts_with(b"/*") {
            b[i..].windows(2).position(|w| w == b"*/").map_or(b.len() - i, |p| p + 2)
        } else if let Some(n) = raw_string(&b[i..]) {
            n
        } else if b[i] == b'"' {
            string(&b[i..])
        } else if b[i] == b'\'' {
            char_literal(&b[i..])
        } else {
            0
        };
        if skip == 0 {
            out.push(b[i] as char);
            i += 1;
        } else {
            out.push(' ');
            i += skip;
        }
    }
    out
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`) at the start.
fn raw_string(b: &[u8]) -> Option<usize> {
    if b.first() != Some(&b'r') {
        return None;
    }
    let hashes = b[1..].iter().take_while(|&&c| c == b'#').count();
    if b.get(1 + hashes) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
    let body = 2 + hashes;
    Some(
        b[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map_or(b.len(), |p| body + p + close.len()),
    )
}

/// The length of a string literal at the start.
fn string(b: &[u8]) -> usize {
    let mut i = 1;
    while i < b.len() && b[i] != b'"' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(b.len())
}

/// The length of a char literal at the start (`'x'`, `'\n'`), or 0 for a
/// lifetime.
fn char_literal(b: &[u8]) -> usize {
    if b.get(1) == Some(&b'\\') {
        return b[2..].iter().position(|&c| c == b'\'').map_or(0, |p| p + 3);
    }
    let c = std::str::from_utf8(&b[1..b.len().min(5)]).ok().or_else(|| std::str::from_utf8(&b[1..2]).ok());
    match c.and_then(|s| s.chars().next()) {
        Some(ch) if b.get(1 + ch.len_utf8()) == Some(&b'\'') => 2 + ch.len_utf8(),
        _ => 0,
    }
}

/// `mod x;` declarations (not inline `mod x { }`).
fn declared_modules(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        if let Some(name) = t.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            out.push(name.trim().to_string());
        }
    }
    out
}

/// Every module path the text names, with how many inline modules (`mod
/// x { .. }`) it stands in: flattened `use` trees, and paths in code that
/// start at `crate`, `super`, `self` or a child module.
fn referenced_paths(text: &str, children: &BTreeSet<String>) -> Vec<(usize, Vec<String>)> {
    let inline = inline_modules(text);
    let depth = |at: usize| inline.iter().filter(|(start, end)| (*start..*end).contains(&at)).count();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(&text[from..], "use").map(|p| from + p) {
        let tail = &text[at + 3..];
        let Some(end) = tail.find(';') else { break };
        let mut paths = Vec::new();
        flatten(&[], tail[..end].trim(), &mut paths);
        out.extend(paths.into_iter().map(|p| (depth(at), p)));
        from = at + 3 + end;
    }
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    let mut offset = 0;
    for word in text.split_inclusive(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')) {
        let at = offset;
        offset += word.len();
        let word = word.trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'));
        let segs: Vec<String> = word.split("::").map(str::to_string).collect();
        if segs.len() > 1 && segs.iter().all(|s| ident(s)) {
            let first = segs[0].as_str();
            if matches!(first, "crate" | "super" | "self") || children.contains(first) {
                out.push((depth(at), segs));
            }
        }
    }
    out
}

/// The byte ranges of inline module bodies (`mod x { .. }`).
fn inline_modules(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = find_word(&text[from..], "mod").map(|p| from + p) {
        from = at + 3;
        let rest = &text[from..];
        let name_end = rest.trim_start().find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(0);
        let after = rest.trim_start()[name_end..].trim_start();
        if !after.starts_with('{') {
            continue;
        }
        let open = text.len() - after.len();
        let mut depth = 0;
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                out.push((open, open + i));
                break;
            }
        }
    }
    out
}

/// The byte offset of `word` standing alone in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(p) = text[from..].find(word) {
        let at = from + p;
        let before = text[..at].chars().last().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let after = text[at + word.len()..].chars().next().is_some_and(char::is_whitespace);
        if before && after {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// Flattens a use tree (`a::{b, c::d}`) into paths, each prefixed.
fn flatten(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> =
            tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base: Vec<String> = prefix.iter().cloned().chain(head).collect();
        for part in split_top(inner) {
            flatten(&base, part, out);
        }
        return;
    }
    let name = tree.split(" as ").next().unwrap_or(tree);
    let segs: Vec<String> = prefix
        .iter()
        .cloned()
        .chain(name.split("::").map(str::trim).filter(|s| !s.is_empty() && *s != "*").map(str::to_string))
        .collect();
    if !segs.is_empty() {
        out.push(segs);
    }
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top(s: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// Tarjan's strongly connected components of a directed graph.
fn strongly_connected(edges: &BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        graph.entry(a).or_default().push(b);
        graph.entry(b).or_default();
    }
    let mut t = Tarjan::default();
    for &node in graph.keys() {
        if !t.index.contains_key(node) {
            t.visit(node, &graph);
        }
    }
    t.components
}

#[derive(Default)]
struct Tarjan<'a> {
    next: usize,
    index: BTreeMap<&'a str, usize>,
    low: BTreeMap<&'a str, usize>,
    stack: Vec<&'a str>,
    components: Vec<Vec<String>>,
}

impl<'a> Tarjan<'a> {
    fn visit(&mut self, v: &'a str, graph: &BTreeMap<&'a str, Vec<&'a str>>) {
        self.index.insert(v, self.next);
        self.low.insert(v, self.next);
        self.next += 1;
        self.stack.push(v);
        for &w in &graph[v] {
            if !self.index.contains_key(w) {
                self.visit(w, graph);
                let lw = self.low[w];
                self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
            } else if self.stack.contains(&w) {
                let iw = self.index[w];
                self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if self.low[v] == self.index[v] {
            let mut component = Vec::new();
            while let Some(w) = self.stack.pop() {
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            component.sort();
            self.components.push(component);
        }
    }
}

#[cfg(test)]
mod tests;
