//! deploy/kubernetes/ against Kubernetes' own schemas: `kubernetes-validate`
//! (PyPI; it bundles the schemas of each Kubernetes release, so no cluster
//! is needed) in a venv of its own, strictly (an unknown field is an
//! error); and the ConfigMap's text read back with PyYAML.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context};

use crate::{setup::venv, util::cmd};

/// Pinned: the schemas it bundles are the check.
pub const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";
/// The Kubernetes versions the manifests are validated against: the oldest
/// they claim (the container's `appArmorProfile` field is 1.30's) and the
/// newest the pinned package bundles.
pub const VERSIONS: [&str; 2] = ["1.31.0", "1.37.0"];

/// kubernetes-validate, installed.
pub struct Validator {
    venv: PathBuf,
}

impl Validator {
    /// The venv `~/.cache/gpumem/venv-deploy`, made once.
    pub fn ensure() -> anyhow::Result<Self> {
        let venv = venv("venv-deploy", &[KUBERNETES_VALIDATE])
            .context("installing kubernetes-validate (needs PyPI) for the Kubernetes manifests' check")?;
        Ok(Self { venv })
    }

    /// Validates `file` strictly against each of [`VERSIONS`]: Ok only when
    /// kubernetes-validate accepts it and warns of nothing (a kind or
    /// apiVersion it has no schema for is only a warning to it).
    pub fn validate(&self, file: &Path) -> anyhow::Result<()> {
        let tool = self.venv.join("bin/kubernetes-validate");
        for version in VERSIONS {
            let out = cmd(&tool)
                .args(["--strict", "--quiet", "--kubernetes-version", version])
                .arg(file)
                .output()
                .with_context(|| format!("starting {}", tool.display()))?;
            let text =
                String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            if !out.status.success() || !text.trim().is_empty() {
                bail!(
                    "kubernetes-validate --strict --kubernetes-version {version} {} ({}):\n{}",
                    file.display(),
                    out.status,
                    text.trim()
                );
            }
        }
        Ok(())
    }

    /// Ok when [`Self::validate`] refuses `file` and names `why` (a
    /// deliberately broken copy): the check can fail.
    pub fn rejects(&self, file: &Path, why: &str) -> anyhow::Result<()> {
        match self.validate(file) {
            Ok(()) => bail!("kubernetes-validate accepted {}, which is broken ({why})", file.display()),
            Err(e) if format!("{e:#}").contains(why) => Ok(()),
            Err(e) => bail!("kubernetes-validate refused {} without naming {why}: {e:#}", file.display()),
        }
    }

    /// The value of `key` in the data of the ConfigMap in `file`, as YAML
    /// reads it (PyYAML, which kubernetes-validate depends on).
    pub fn configmap_value(&self, file: &Path, key: &str) -> anyhow::Result<String> {
        let script = "import sys, yaml\n\
            docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get('kind') == 'ConfigMap']\n\
            assert len(docs) == 1, f'{len(docs)} ConfigMaps in {sys.argv[1]}'\n\
            sys.stdout.write(docs[0]['data'][sys.argv[2]])\n";
        let out = cmd(self.venv.join("bin/python")).arg("-c").arg(script).arg(file).arg(key).output()?;
        if !out.status.success() {
            bail!(
                "reading data.{key} of the ConfigMap in {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        String::from_utf8(out.stdout).context("the ConfigMap's value is not UTF-8")
    }
}

/// Every file in `dir`, in name order (`kubectl apply -f` order).
pub fn manifests(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|f| f.is_file());
    files.sort();
    if files.is_empty() {
        bail!("no manifests in {}", dir.display());
    }
    Ok(files)
}

/// A copy of `source` as `scratch/NAME` with the first `from` replaced by
/// `to` (which must be there, or the broken copy would not be broken).
pub fn broken_copy(
    source: &Path,
    scratch: &Path,
    name: &str,
    from: &str,
    to: &str,
) -> anyhow::Result<PathBuf> {
    let text = fs::read_to_string(source).with_context(|| format!("reading {}", source.display()))?;
    if !text.contains(from) {
        bail!("{} has no `{from}` to break: update this check", source.display());
    }
    fs::create_dir_all(scratch)?;
    let copy = scratch.join(name);
    fs::write(&copy, text.replacen(from, to, 1))?;
    Ok(copy)
}

/// Ok when the ConfigMap in `configmap` holds exactly `toml`'s text.
pub fn configmap_matches(v: &Validator, configmap: &Path, toml: &Path) -> anyhow::Result<()> {
    let want = fs::read_to_string(toml).with_context(|| format!("reading {}", toml.display()))?;
    let key = toml.file_name().and_then(|n| n.to_str()).context("a file name")?;
    let have = v.configmap_value(configmap, key)?;
    if have == want {
        return Ok(());
    }
    let line = want.lines().zip(have.lines()).position(|(a, b)| a != b).map_or_else(
        || format!("they differ in length ({} and {} lines)", want.lines().count(), have.lines().count()),
        |i| format!("first at line {}", i + 1),
    );
    bail!(
        "data.{key} in {} differs from {}: {line}; copy the file into the ConfigMap (indented by four spaces)",
        configmap.display(),
        toml.display()
    )
}
