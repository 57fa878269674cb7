//! An interrupted takeover: the agent taking over was killed (or failed
//! where it could not undo) and left two builds' pins, or one build's with
//! the handover word part way (`gpumem_common::handover`). The word says
//! whose programs run; every other build's programs stand by. The next
//! agent keeps the running build's pins, removes the others', and goes on
//! as from a steady state: it adopts the pins if they are its own build's
//! (and names its build alone), or takes them over.
use std::{path::Path, time::Instant};

use gpumem_common::{handover, map_name};

use super::{error::PersistError, identity, remove, word};

/// One build's directory under the pin root, and its HANDOVER map (id and
/// value) where it has one (a takeover killed while carrying the maps
/// leaves a directory without it).
#[derive(Debug, Clone)]
pub struct Found {
    pub build: String,
    pub handover: Option<(u32, u64)>,
}

/// What is done with the builds found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `keep` runs under `word`; the builds in `remove` stand by.
    Keep { keep: String, remove: Vec<String>, word: u64 },
    /// Which build runs cannot be told: why.
    Unknown(String),
}

/// Decides from the builds found (tagged by `tag`, from a build's name)
/// which one runs.
pub fn decide(found: &[Found], tag: impl Fn(&str) -> u32) -> Verdict {
    let mut maps = found.iter().filter_map(|f| f.handover);
    let Some((id, word)) = maps.next() else {
        return Verdict::Unknown("none of them has a readable HANDOVER map".into());
    };
    if maps.any(|(other, _)| other != id) {
        return Verdict::Unknown(
            "their HANDOVER maps are not one map, so they are not one takeover's".into(),
        );
    }
    let owner = handover::owner(word);
    let Some(keep) = found.iter().find(|f| tag(&f.build) == owner) else {
        return Verdict::Unknown(format!(
            "the handover word ({}) names a build whose pins are not there",
            word::describe(word)
        ));
    };
    let remove = found.iter().filter(|f| f.build != keep.build).map(|f| f.build.clone()).collect();
    Verdict::Keep { keep: keep.build.clone(), remove, word }
}

/// Settles the builds pinned under `root` (more than one: a takeover was
/// interrupted) by removing those whose programs stand by, waiting until
/// the kernel has let go of them; the build left.
pub fn settle(root: &Path, builds: &[String]) -> Result<String, PersistError> {
    let found: Vec<Found> = builds
        .iter()
        .map(|b| {
            let pin = root.join(b).join("maps").join(map_name::HANDOVER);
            Found { build: b.clone(), handover: word::read(&pin).ok().map(|(id, h)| (id, h.word)) }
        })
        .collect();
    let refuse =
        |why| PersistError::Interrupted { root: root.display().to_string(), count: builds.len(), why };
    let (keep, remove, word) = match decide(&found, identity::tag) {
        Verdict::Keep { keep, remove, word } => (keep, remove, word),
        Verdict::Unknown(why) => return Err(refuse(why)),
    };
    for build in remove {
        let started = Instant::now();
        let removed = remove::remove(&root.join(&build)).map_err(|e| PersistError::Settling {
            root: root.display().to_string(),
            build: build.clone(),
            source: Box::new(e),
        })?;
        tracing::warn!(
            "an interrupted takeover was left at {}: build {keep}'s programs run ({}), so build {build}'s \
             pins were removed ({} link(s), {} ms)",
            root.display(),
            word::describe(word),
            removed.links,
            started.elapsed().as_millis()
        );
    }
    Ok(keep)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpumem_common::handover::{joining, leaving, steady};

    const A: u32 = 0xa;
    const B: u32 = 0xb;

    fn tag(build: &str) -> u32 {
        u32::from_str_radix(build, 16).unwrap_or(0)
    }

    fn found(build: &str, map: Option<(u32, u64)>) -> Found {
        Found { build: build.into(), handover: map }
    }

    fn keep(keep: &str, remove: &[&str], word: u64) -> Verdict {
        Verdict::Keep { keep: keep.into(), remove: remove.iter().map(|s| s.to_string()).collect(), word }
    }

    #[test]
    fn the_build_the_word_names_as_running_is_kept() {
        for (word, kept, removed) in [
            (joining(A, B), "a", "b"), // killed while attaching: the old build runs
            (leaving(A, B), "b", "a"), // killed while the old links went: the new runs
            (steady(A), "a", "b"),     // killed before joining: the new attached nothing that runs
            (steady(B), "b", "a"),     // the old pins could not all go
            (joining(B, A), "b", "a"), // a takeover back the other way
        ] {
            let both = [found("a", Some((7, word))), found("b", Some((7, word)))];
            assert_eq!(decide(&both, tag), keep(kept, &[removed], word), "{word:#x}");
        }
        // The new build killed while carrying maps: no HANDOVER of its own yet.
        let partial = [found("a", Some((7, steady(A)))), found("b", None)];
        assert_eq!(decide(&partial, tag), keep("a", &["b"], steady(A)));
        // One build left with the word part way: it is kept, nothing removed.
        assert_eq!(decide(&[found("b", Some((7, leaving(A, B))))], tag), keep("b", &[], leaving(A, B)));
    }

    #[test]
    fn what_cannot_be_told_is_unknown() {
        let unknown = |found: &[Found]| matches!(decide(found, tag), Verdict::Unknown(_));
        assert!(unknown(&[found("a", None), found("b", None)]), "no word");
        assert!(
            unknown(&[found("a", Some((7, steady(A)))), found("b", Some((8, steady(A))))]),
            "two maps: not one takeover"
        );
        assert!(unknown(&[found("a", Some((7, steady(0xc)))), found("b", None)]), "the runner is not there");
        assert!(unknown(&[found("a", Some((7, 0))), found("b", None)]), "no build named");
    }
}
