//! The shell scripts (issue 18 acceptance 6): every script of `e2e/kind/` and every bash script
//! of `scripts/` and `.ci/` parses (`bash -n`) and passes shellcheck (`-x`: sourced files
//! followed). The kind scripts need Docker and are not run here; their manifests are checked by
//! kubeconform and a server dry run in `operator_chart.rs`.
//!
//! shellcheck comes from the Debian package `scripts/test` installs; without it this test fails
//! under CI (`CI=true` or `ZLINK_K8S_REQUIRED=1`) and is skipped with a notice otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, ensure};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The bash scripts to check: `e2e/kind/*.sh`, and the files of `scripts/` and `.ci/` whose
/// first line names bash.
fn scripts() -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(repo().join("e2e/kind"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "sh") {
            out.push(p);
        }
    }
    for dir in ["scripts", ".ci"] {
        for e in std::fs::read_dir(repo().join(dir))? {
            let p = e?.path();
            let first = std::fs::read_to_string(&p)
                .ok()
                .and_then(|t| t.lines().next().map(str::to_owned))
                .unwrap_or_default();
            if p.is_file() && first.starts_with("#!") && first.contains("bash") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Runs `cmd` in the repository root; (success, output).
fn run(cmd: &mut Command) -> anyhow::Result<(bool, String)> {
    let out = cmd
        .current_dir(repo())
        .output()
        .with_context(|| format!("spawn {cmd:?}"))?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

fn shellcheck_available() -> anyhow::Result<bool> {
    let found = Command::new("shellcheck").arg("--version").output().is_ok();
    if !found {
        ensure!(
            !zlink_e2e::k8s::required(),
            "shellcheck is not installed (scripts/test installs the Debian package)"
        );
        eprintln!("NOTICE: shellcheck is not installed: the scripts are checked with bash -n only");
    }
    Ok(found)
}

#[test]
fn every_script_parses_and_passes_shellcheck() -> anyhow::Result<()> {
    let scripts = scripts()?;
    let kind: Vec<&PathBuf> = scripts
        .iter()
        .filter(|p| p.parent().is_some_and(|d| d.ends_with("e2e/kind")))
        .collect();
    for name in [
        "lib.sh", "up.sh", "load.sh", "bump.sh", "drain.sh", "down.sh",
    ] {
        ensure!(
            kind.iter().any(|p| p.ends_with(name)),
            "e2e/kind/{name} is missing"
        );
    }
    ensure!(
        scripts.len() > kind.len() + 5,
        "too few scripts found: {scripts:?}"
    );
    let shellcheck = shellcheck_available()?;
    for script in &scripts {
        let (ok, out) = run(Command::new("bash").arg("-n").arg(script))?;
        ensure!(ok, "bash -n {}: {out}", script.display());
        if script.file_name().is_some_and(|n| n != "lib.sh") {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(script)?.permissions().mode();
            ensure!(mode & 0o111 != 0, "{} is not executable", script.display());
        }
        if shellcheck {
            let rel = script.strip_prefix(repo()).unwrap_or(script);
            let (ok, out) = run(Command::new("shellcheck").arg("-x").arg(rel))?;
            ensure!(ok, "shellcheck {}:\n{out}", rel.display());
        }
    }
    Ok(())
}

/// Not hollow: both checks refuse a broken script.
#[test]
fn the_checks_refuse_a_broken_script() -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("zlink-kind-scripts-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let unparsable = dir.join("unparsable.sh");
    std::fs::write(
        &unparsable,
        "#!/usr/bin/env bash\nif true; then\n  echo missing fi\n",
    )?;
    let (ok, _) = run(Command::new("bash").arg("-n").arg(&unparsable))?;
    ensure!(!ok, "bash -n passed a script with an unclosed if");
    if shellcheck_available()? {
        let sloppy = dir.join("sloppy.sh");
        std::fs::write(&sloppy, "#!/usr/bin/env bash\nls $1\n")?;
        let (ok, out) = run(Command::new("shellcheck").arg(&sloppy))?;
        ensure!(
            !ok && out.contains("SC2086"),
            "shellcheck passed an unquoted expansion: {out}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
