use super::*;

fn paths(text: &str, children: &[&str]) -> Vec<String> {
    let children = children.iter().map(|c| c.to_string()).collect();
    referenced_paths(&strip(text), &children).into_iter().map(|(_, p)| p.join("::")).collect()
}

#[test]
fn use_trees_flatten_and_code_paths_are_found() {
    let text = "use crate::{a::b, c::{d, e as f}};\nuse super::g::*;\nfn x() { crate::h::i(); probes::all(); other::thing(); }";
    assert_eq!(
        paths(text, &["probes"]),
        ["crate::a::b", "crate::c::d", "crate::c::e", "super::g", "crate::h::i", "probes::all"]
    );
}

#[test]
fn comments_strings_and_chars_hide_what_looks_like_paths() {
    let text = "// crate::a::b\n/* crate::c */ let s = \"crate::d::e\"; let q = '\"'; let r = r#\"crate::f\"#; crate::g::h();";
    assert_eq!(paths(text, &[]), ["crate::g::h"]);
    assert_eq!(paths("fn f<'a>(x: &'a str) { crate::k::l(x) }", &[]), ["crate::k::l"]);
}

#[test]
fn a_cycle_between_two_files_is_found_and_a_parent_declaring_a_child_is_not_one() {
    let dir = tempfile_dir();
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::x;\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod inner;\npub fn x() { crate::a::y(); }\n").unwrap();
    std::fs::write(src.join("b/inner.rs"), "use super::x;\n").unwrap();
    std::fs::write(
        src.join("c.rs"),
        "use crate::b::inner;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    )
    .unwrap();
    let c = Crate::read(&src, "lib.rs").unwrap();
    assert_eq!(c.cycles().unwrap(), [vec!["a".to_string(), "b".to_string()]]);
    let edges = c.edges().unwrap();
    assert!(
        edges.contains(&("b::inner".into(), "b".into())) && edges.contains(&("c".into(), "b::inner".into()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn tempfile_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("xtask-cycles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
