//! The operators' files in deploy/, checked with the tools operators use:
//! `systemd-analyze` on the systemd unit, Kubernetes' schemas on the
//! manifests, and the ConfigMap against deploy/gpumem.toml. (What needs the
//! agent's own code, that the TOML parses and that both start `gpumem run`
//! with flags it knows, is the `deploy` unit tests of gpumem-tests.)
//!
//! Each check prints one `test deploy::NAME ... ok` or `... FAILED` line;
//! two of them feed deliberately broken copies and pass only when they are
//! refused, so that a check that cannot fail is found out. Nothing here
//! needs root, except installing Debian's `systemd` package where
//! `systemd-analyze` is missing.
mod kubernetes;
mod report;
mod systemd;

use std::path::Path;

use self::{kubernetes::Validator, report::Report};
use crate::{
    tally::Tally,
    util::{root, target_dir},
};

/// Runs every check; the `test result:` line goes to `tally`. `agent`:
/// the built agent, for the unit's ExecStart (None: a stand-in). True when
/// all passed.
pub fn check_all(agent: Option<&Path>, tally: &mut Tally) -> bool {
    let deploy = root().join("deploy");
    let scratch = target_dir().join("deploy-check");
    let _ = std::fs::remove_dir_all(&scratch);
    let mut report = Report::new();
    systemd_checks(&mut report, &deploy, &scratch, agent);
    kubernetes_checks(&mut report, &deploy, &scratch);
    report.finish(tally)
}

fn systemd_checks(report: &mut Report, deploy: &Path, scratch: &Path, agent: Option<&Path>) {
    let unit = deploy.join("systemd/gpumem.service");
    let scratch = scratch.join("systemd");
    let exe = systemd::executable(agent, &scratch);
    let exe = || exe.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
    report.check("systemd_analyze_verify", || {
        systemd::verify(&systemd::copy(&unit, exe()?, &scratch, "as-shipped", Ok)?)
    });
    report.check("systemd_analyze_verify_refuses_a_misspelled_key", || {
        let broken = systemd::copy(&unit, exe()?, &scratch, "misspelled", |text| {
            let from = "\nProtectSystem=strict\n";
            anyhow::ensure!(text.contains(from), "the unit has no `ProtectSystem=strict` to misspell");
            Ok(text.replacen(from, "\nProtectSytem=strict\n", 1))
        })?;
        match systemd::verify(&broken) {
            Ok(()) => {
                anyhow::bail!("verify found nothing wrong in {}, which misspells a key", broken.display())
            }
            Err(e) if format!("{e:#}").contains("ProtectSytem") => Ok(()),
            Err(e) => anyhow::bail!("verify refused {} for another reason: {e:#}", broken.display()),
        }
    });
    report.check("systemd_analyze_security_exposure", || systemd::exposure(&unit));
}

fn kubernetes_checks(report: &mut Report, deploy: &Path, scratch: &Path) {
    let manifests = deploy.join("kubernetes");
    let scratch = scratch.join("kubernetes");
    let validator = Validator::ensure();
    let v = || validator.as_ref().map_err(|e| anyhow::anyhow!("{e:#}"));
    match kubernetes::manifests(&manifests) {
        Ok(files) => {
            for file in files {
                let name = file.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
                report.check(&format!("kubernetes_validate::{name}"), || v()?.validate(&file));
            }
        }
        Err(e) => report.check("kubernetes_validate", || Err(e)),
    }
    let daemonset = manifests.join("30-daemonset.yaml");
    report.check("kubernetes_validate_refuses_a_misspelled_field", || {
        let broken = kubernetes::broken_copy(
            &daemonset,
            &scratch,
            "misspelled.yaml",
            "hostPID: true",
            "hostPid: true",
        )?;
        v()?.rejects(&broken, "'hostPid'")
    });
    report.check("kubernetes_validate_refuses_an_unknown_kind", || {
        let broken = kubernetes::broken_copy(
            &daemonset,
            &scratch,
            "unknown-kind.yaml",
            "kind: DaemonSet",
            "kind: DaemonSett",
        )?;
        v()?.rejects(&broken, "DaemonSett")
    });
    report.check("configmap_holds_gpumem_toml", || {
        kubernetes::configmap_matches(v()?, &manifests.join("20-configmap.yaml"), &deploy.join("gpumem.toml"))
    });
}
