//! The README and `docs/` as a reader uses them: every relative link
//! resolves (to a file, and to a heading where it names one), and every
//! `gpumem` command quoted in a code block is one the agent's own command
//! line accepts.
use std::path::{Path, PathBuf};

use clap::Parser;
use gpumem::cli::Cli;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The documents a reader is sent to.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut docs = vec![root.join("README.md"), root.join("deploy/README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            let mut in_code = false;
            for part in line.split('`') {
                if !in_code {
                    out.push_str(part);
                }
                in_code = !in_code;
            }
            out.push('\n');
        }
    }
    out
}

/// Each `[text](target)` link's target.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// A heading's anchor as GitHub makes it.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_resolves() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = link.split_once('#').map_or((link.as_str(), None), |(p, f)| (p, Some(f)));
            let target = if path.is_empty() { doc.clone() } else { doc.parent().unwrap().join(path) };
            if !target.exists() {
                broken.push(format!("{}: {link} (no {})", doc.display(), target.display()));
                continue;
            }
            if let Some(f) = fragment {
                let heads = anchors(&std::fs::read_to_string(&target).unwrap_or_default());
                if !heads.iter().any(|h| h == f) {
                    broken.push(format!("{}: {link} (no heading #{f})", doc.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "links that do not resolve:\n{}", broken.join("\n"));
}

/// The `gpumem ...` commands of a text's code blocks (not those marked
/// `text`, `toml`, `yaml` or `json`: output and files), each joined
/// across `\` line ends, its trailing comment and `...` cut; usage
/// synopses (`[--flag VALUE]`) are not commands.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    let mut shell = false;
    let mut pending: Option<String> = None;
    for line in text.lines() {
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            fenced = !fenced;
            shell = fenced && matches!(lang.trim(), "" | "sh" | "shell" | "console" | "bash");
            continue;
        }
        if !shell {
            continue;
        }
        let line = line.split(" # ").next().unwrap_or_default().trim_end();
        let joined = match pending.take() {
            Some(p) => format!("{p} {}", line.trim()),
            None if line.trim_start().starts_with("gpumem ") => line.trim().to_string(),
            None => continue,
        };
        match joined.strip_suffix('\\') {
            Some(more) => pending = Some(more.trim_end().to_string()),
            None if joined.contains(" [-") => {}
            None => out.push(joined.trim_end_matches("...").trim_end().to_string()),
        }
    }
    out
}

/// Words as a shell splits them (quotes, no expansions).
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => out.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

#[test]
fn every_quoted_gpumem_command_is_one_the_agent_accepts() {
    let mut refused = Vec::new();
    let mut seen = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for command in commands(&text) {
            seen += 1;
            if let Err(e) = Cli::try_parse_from(words(&command)) {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                refused.push(format!("{}: `{command}`: {first}", doc.display()));
            }
        }
    }
    assert!(seen >= 10, "the documents quote {seen} gpumem commands");
    assert!(refused.is_empty(), "commands the agent refuses:\n{}", refused.join("\n"));
}

#[test]
fn the_readers_tools_read_as_intended() {
    assert_eq!(
        anchor(" Where each probe sits: NVIDIA's entry points"),
        "where-each-probe-sits-nvidias-entry-points"
    );
    assert_eq!(links("see [a](b.md#c) and `[x](y)`"), ["b.md#c"]);
    let block =
        "```\ngpumem run --limit a \\\n    --limit 'b c'   # note\nother\ngpumem run --persist ...\n```\n";
    assert_eq!(commands(block), ["gpumem run --limit a --limit 'b c'", "gpumem run --persist"]);
    assert!(commands("```text\ngpumem top  records 261\n```\n").is_empty(), "a screen, not a command");
    assert!(commands("```\ngpumem run [--libcuda PATH]...\n```\n").is_empty(), "a synopsis");
    assert_eq!(words("gpumem run --limit 'pod:a/b-*=1G'"), ["gpumem", "run", "--limit", "pod:a/b-*=1G"]);
}

#[test]
fn every_document_the_help_names_is_there() {
    use clap::CommandFactory;
    let mut named = Vec::new();
    let mut cli = Cli::command();
    let mut helps = vec![cli.render_long_help().to_string()];
    for sub in cli.get_subcommands_mut() {
        helps.push(sub.render_long_help().to_string());
    }
    for help in helps {
        for (at, _) in help.match_indices("docs/") {
            let name: String = help[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '/' | '-' | '.' | '_'))
                .collect();
            named.push(name.trim_end_matches('.').to_string());
        }
    }
    assert!(named.len() >= 4, "{named:?}");
    let missing: Vec<&String> = named.iter().filter(|n| !repo().join(n).is_file()).collect();
    assert!(missing.is_empty(), "--help names documents that are not there: {missing:?}");
}
