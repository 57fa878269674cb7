//! Kubernetes names in rules: a namespace (a DNS label), and a pod glob
//! `NAMESPACE/NAME` whose name may hold `*` (any run of characters) and
//! `?` (one character).
use super::error::SpecError;

/// Longest namespace name (a DNS-1123 label).
const LABEL_MAX: usize = 63;
/// Longest pod name (a DNS-1123 subdomain).
const SUBDOMAIN_MAX: usize = 253;

/// A namespace name, checked.
pub fn namespace(text: &str) -> Result<String, SpecError> {
    let t = text.trim();
    let inner = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-';
    let ok = !t.is_empty()
        && t.len() <= LABEL_MAX
        && t.bytes().all(inner)
        && !t.starts_with('-')
        && !t.ends_with('-');
    ok.then(|| t.to_string()).ok_or_else(|| SpecError::Namespace(t.into()))
}

/// `NAMESPACE/GLOB`, checked.
pub fn pod_glob(text: &str) -> Result<String, SpecError> {
    let t = text.trim();
    let bad = || SpecError::PodGlob(t.into());
    let (ns, glob) = t.split_once('/').ok_or_else(bad)?;
    namespace(ns).map_err(|_| bad())?;
    let name = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'*' | b'?');
    let ok = !glob.is_empty() && glob.len() <= SUBDOMAIN_MAX && glob.bytes().all(name);
    ok.then(|| t.to_string()).ok_or_else(bad)
}

/// Whether pod `namespace/name` matches `glob` (`NAMESPACE/GLOB`).
pub fn pod_matches(glob: &str, namespace: &str, name: &str) -> bool {
    glob.split_once('/')
        .is_some_and(|(ns, pattern)| ns == namespace && matches(pattern.as_bytes(), name.as_bytes()))
}

/// Glob matching with `*` and `?`: the last `*` is retried one character
/// further at each mismatch (linear in practice, never exponential).
fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    (p, t) = (sp + 1, st + 1);
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_dns_labels() {
        assert_eq!(namespace(" team-a "), Ok("team-a".into()));
        for bad in ["", "Team", "-a", "a-", "a_b", "a/b", &"a".repeat(64)] {
            assert!(namespace(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_globs_name_a_namespace_and_a_name() {
        assert_eq!(pod_glob("team-a/trainer-*"), Ok("team-a/trainer-*".into()));
        for bad in ["trainer-*", "team-a/", "/x", "Team/x", "team-a/x_y", "team-a/x/y"] {
            assert!(pod_glob(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn globs_match_as_shells_do() {
        let m = |g, n| pod_matches(g, "team-a", n);
        assert!(m("team-a/trainer-*", "trainer-7d9f8-x2x4q"));
        assert!(m("team-a/trainer-*", "trainer-"));
        assert!(!m("team-a/trainer-*", "serve-0"));
        assert!(m("team-a/*", "anything"));
        assert!(m("team-a/t?ainer", "trainer"));
        assert!(!m("team-a/t?ainer", "tainer"));
        assert!(m("team-a/*-0", "a-b-0"));
        assert!(!m("team-a/*-0", "a-b-1"));
        assert!(m("team-a/a*b*c", "aXXbYYc"));
        assert!(!m("team-a/a*b*c", "aXXbYY"));
        assert!(!pod_matches("team-b/*", "team-a", "x"), "another namespace");
        assert!(m("team-a/exact", "exact") && !m("team-a/exact", "exact-1"));
    }

    proptest::proptest! {
        /// A glob without wildcards matches exactly itself; `*` matches
        /// any name; a name matches a glob made of it with any one of its
        /// characters replaced by `?` and any run by `*`.
        #[test]
        fn globs_agree_with_their_meaning(name in "[a-z0-9.-]{0,12}", i in 0usize..12, j in 0usize..12) {
            proptest::prop_assert!(matches(name.as_bytes(), name.as_bytes()));
            proptest::prop_assert!(matches(b"*", name.as_bytes()));
            if !name.is_empty() {
                let (i, j) = (i % name.len(), j % name.len());
                let (a, b) = (i.min(j), i.max(j));
                let q = format!("{}?{}", &name[..i], &name[i + 1..]);
                proptest::prop_assert!(matches(q.as_bytes(), name.as_bytes()));
                let s = format!("{}*{}", &name[..a], &name[b..]);
                proptest::prop_assert!(matches(s.as_bytes(), name.as_bytes()));
                let longer = format!("{name}x");
                proptest::prop_assert!(!matches(name.as_bytes(), longer.as_bytes()));
            }
        }
    }
}
