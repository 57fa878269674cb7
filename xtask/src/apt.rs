//! apt with gpumem's own configuration: Debian packages (kernels for the
//! matrix, NVIDIA's driver libraries) fetched from the host's Debian mirror
//! without touching the host's own sources, lists or cache.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::util::{cache_dir, output, run};

/// The Debian mirror the host uses (its deb822 sources), or Debian's own.
fn mirror() -> String {
    let sources = fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    sources
        .lines()
        .filter_map(|l| l.strip_prefix("URIs:"))
        .flat_map(str::split_whitespace)
        .find(|u| u.ends_with("/debian"))
        .unwrap_or("http://deb.debian.org/debian")
        .to_string()
}

/// apt-get/apt-cache options that read only gpumem's own sources and lists.
pub struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// An apt configuration of its own under `~/.cache/gpumem/NAME`, with
    /// `sources` (suite, component) from the host's Debian mirror.
    pub fn new(name: &str, sources: &[(&str, &str)]) -> anyhow::Result<Self> {
        let dir = cache_dir().join(name);
        fs::create_dir_all(dir.join("lists/partial"))?;
        fs::create_dir_all(dir.join("archives/partial"))?;
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        let mirror = mirror();
        let list: String =
            sources.iter().map(|(s, c)| format!("deb [signed-by={keyring}] {mirror} {s} {c}\n")).collect();
        fs::write(dir.join("sources.list"), list)?;
        Ok(Self { dir })
    }

    fn command(&self, program: &str) -> Command {
        let d = self.dir.display();
        let mut c = Command::new(program);
        c.args([
            "-q",
            "-o",
            &format!("Dir::Etc::SourceList={d}/sources.list"),
            "-o",
            "Dir::Etc::SourceParts=/dev/null",
            "-o",
            &format!("Dir::State::Lists={d}/lists"),
            "-o",
            &format!("Dir::Cache::Archives={d}/archives"),
        ]);
        c
    }

    /// Fetches the package lists.
    pub fn update(&self) -> anyhow::Result<()> {
        run(self.command("apt-get").arg("update"))
            .context("fetching Debian's package lists through gpumem's own apt configuration (needs the Debian mirror)")
    }

    /// Package names matching `pattern`.
    pub fn search(&self, pattern: &str) -> anyhow::Result<Vec<String>> {
        let out = output(self.command("apt-cache").args(["search", "--names-only", pattern]))?;
        Ok(out.lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect())
    }

    /// Every version of `package` the sources offer: (version, suite).
    pub fn versions(&self, package: &str) -> anyhow::Result<Vec<(String, String)>> {
        let out = output(self.command("apt-cache").args(["madison", package]))?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut cols = l.split('|').map(str::trim);
                let (_, version, source) = (cols.next()?, cols.next()?, cols.next()?);
                let suite = source.split_whitespace().nth(1)?.split('/').next()?;
                Some((version.to_string(), suite.to_string()))
            })
            .collect())
    }

    /// Downloads `package` (`name` or `name=version`) into `dir`,
    /// returning the .deb.
    pub fn download(&self, package: &str, dir: &Path) -> anyhow::Result<PathBuf> {
        let name = package.split('=').next().unwrap_or(package);
        run(self.command("apt-get").current_dir(dir).args(["download", package]))
            .with_context(|| format!("downloading {package}"))?;
        fs::read_dir(dir)?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}_"))))
            .with_context(|| format!("apt-get download {package} left no .deb in {}", dir.display()))
    }
}

/// The numbers in a package's name or version, in order: what "newest"
/// compares.
pub fn version_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}
