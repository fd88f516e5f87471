//! The Helm chart `charts/zlink` (issue 18 item 8, acceptance 4):
//! - `helm lint --strict` passes for the defaults and each `ci/` values file, and an unknown
//!   value key fails (the strict `values.schema.json`);
//! - `helm template | kubeconform -strict` passes offline against schemas generated from the
//!   real kube-apiserver's `/openapi/v2` plus `crdgen --kubeconform`'s, examples and the
//!   `e2e/kind` manifests included — and a
//!   misspelt field fails, so the check is not hollow;
//! - `kubectl apply --dry-run=server` accepts the rendered chart, the examples and the `e2e/kind`
//!   manifests;
//! - the operator's ServiceAccount gets exactly its RBAC: SelfSubjectAccessReview allows what it
//!   needs and denies listing Secrets, Nodes and wildcards; `check` passes as that account in
//!   its namespace and fails in another.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;
use zlink_e2e::k8s::{self, ControlPlane};

mod operator_common;

fn chart() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/zlink")
}

fn tool(plane: &ControlPlane, var: &str) -> anyhow::Result<String> {
    plane
        .env()
        .get(var)
        .cloned()
        .with_context(|| format!("scripts/k8s-env printed no {var}"))
}

/// Runs `cmd` with `stdin`; returns (success, stdout, stderr).
fn run(cmd: &mut Command, stdin: Option<&str>) -> anyhow::Result<(bool, String, String)> {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawn {cmd:?}"))?;
    let mut input = child.stdin.take().context("stdin")?;
    if let Some(s) = stdin {
        input.write_all(s.as_bytes())?;
    }
    drop(input);
    let out = child.wait_with_output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn values_files() -> anyhow::Result<Vec<Option<PathBuf>>> {
    let mut out = vec![None];
    for e in std::fs::read_dir(chart().join("ci"))? {
        out.push(Some(e?.path()));
    }
    out.sort();
    ensure!(out.len() >= 3, "the chart needs ci/ values files");
    Ok(out)
}

fn template(helm: &str, ns: &str, values: Option<&Path>) -> anyhow::Result<String> {
    let mut cmd = Command::new(helm);
    cmd.args(["template", "zlink"])
        .arg(chart())
        .args(["--namespace", ns]);
    if let Some(v) = values {
        cmd.arg("-f").arg(v);
    }
    let (ok, out, err) = run(&mut cmd, None)?;
    ensure!(ok, "helm template {values:?} failed: {err}");
    Ok(out)
}

/// kubeconform schemas for every kind `/openapi/v2` serves, in `dir`: one shared strict
/// `_definitions.json` and one `<kind><suffix>.json` per kind that refers into it, with
/// `int-or-string` as either (as kubeconform's own openapi2jsonschema does).
fn write_core_schemas(openapi: &Value, dir: &Path) -> anyhow::Result<usize> {
    let mut defs = openapi
        .get("definitions")
        .cloned()
        .context("no definitions in /openapi/v2")?;
    fn int_or_string(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.get("format").and_then(Value::as_str) == Some("int-or-string") {
                    *v = serde_json::json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
                    return;
                }
                m.values_mut().for_each(int_or_string);
            }
            Value::Array(a) => a.iter_mut().for_each(int_or_string),
            _ => {}
        }
    }
    int_or_string(&mut defs);
    zlink_operator::crdgen::strict(&mut defs);
    let mut kinds = 0;
    for (name, def) in defs.as_object().context("definitions")? {
        let Some(gvks) = def
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for gvk in gvks {
            let (Some(group), Some(version), Some(kind)) = (
                gvk.get("group").and_then(Value::as_str),
                gvk.get("version").and_then(Value::as_str),
                gvk.get("kind").and_then(Value::as_str),
            ) else {
                continue;
            };
            let suffix = match group.split('.').next() {
                Some("") | None => format!("-{version}"),
                Some(g) => format!("-{g}-{version}"),
            };
            let file = dir.join(format!("{}{suffix}.json", kind.to_lowercase()));
            std::fs::write(
                &file,
                serde_json::to_vec(
                    &serde_json::json!({"$ref": format!("_definitions.json#/definitions/{name}")}),
                )?,
            )?;
            kinds += 1;
        }
    }
    std::fs::write(
        dir.join("_definitions.json"),
        serde_json::to_vec(&serde_json::json!({"definitions": defs}))?,
    )?;
    Ok(kinds)
}

fn kubeconform(bin: &str, dir: &Path, input: &str) -> anyhow::Result<(bool, String)> {
    let location = format!(
        "{}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
        dir.display()
    );
    let (ok, out, err) = run(
        Command::new(bin).args(["-strict", "-summary", "-schema-location", &location, "-"]),
        Some(input),
    )?;
    Ok((ok, format!("{out}{err}")))
}

#[tokio::test]
async fn the_chart_lints_renders_validates_and_applies() -> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let helm = tool(plane, "ZLINK_K8S_HELM")?;
    let kc = tool(plane, "ZLINK_K8S_KUBECONFORM")?;
    let kubectl = tool(plane, "ZLINK_K8S_KUBECTL")?;
    let ns = plane.namespace("chart").await?;
    operator_common::install_crds(ns.client()).await?;

    // helm lint --strict, every values file; an unknown key is refused.
    for v in values_files()? {
        let mut cmd = Command::new(&helm);
        cmd.args(["lint", "--strict"]).arg(chart());
        if let Some(v) = &v {
            cmd.arg("-f").arg(v);
        }
        let (ok, out, err) = run(&mut cmd, None)?;
        ensure!(ok, "helm lint --strict {v:?}: {out}{err}");
    }
    let (ok, _, err) = run(
        Command::new(&helm)
            .args(["template", "zlink"])
            .arg(chart())
            .args(["--set", "nope=1"]),
        None,
    )?;
    ensure!(
        !ok && err.contains("nope"),
        "an unknown value key was accepted: {err}"
    );

    // Schemas: the API server's own, plus the CRDs'.
    let dir = std::env::temp_dir().join(format!("zlink-kubeconform-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (ok, openapi, err) = run(
        Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .args(["get", "--raw", "/openapi/v2"]),
        None,
    )?;
    ensure!(ok, "GET /openapi/v2: {err}");
    let kinds = write_core_schemas(&serde_json::from_str(&openapi)?, &dir)?;
    ensure!(kinds > 50, "only {kinds} kinds in /openapi/v2");
    zlink_operator::crdgen::write_kubeconform(&dir)?;

    // The chart's examples and the manifests the e2e/kind scripts apply (with their
    // placeholders filled in as the scripts do; the kind cluster config is not a Kubernetes
    // object and is left out).
    let mut examples = String::new();
    for e in std::fs::read_dir(chart().join("examples"))? {
        examples.push_str("---\n");
        examples.push_str(&std::fs::read_to_string(e?.path())?);
    }
    let kind_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("kind");
    for name in ["mesh.yaml", "load-job.yaml"] {
        let text = std::fs::read_to_string(kind_dir.join(name))?
            .replace("@TAG@", "kind")
            .replace("@DURATION_MS@", "60000");
        ensure!(
            !text.contains('@'),
            "e2e/kind/{name} has an unknown placeholder"
        );
        examples.push_str("---\n");
        examples.push_str(&text);
    }
    for v in values_files()? {
        let rendered = template(&helm, ns.name(), v.as_deref())?;
        let (ok, report) = kubeconform(&kc, &dir, &format!("{rendered}\n{examples}"))?;
        ensure!(ok, "kubeconform {v:?}: {report}");
        ensure!(
            report.contains("Invalid: 0, Errors: 0, Skipped: 0"),
            "{report}"
        );
    }
    // Not hollow: a misspelt field in a Deployment and in a Mesh are both refused.
    let bad = template(&helm, ns.name(), None)?.replace("replicas: 1", "replicaz: 1");
    let (ok, report) = kubeconform(&kc, &dir, &bad)?;
    ensure!(
        !ok && report.contains("replicaz"),
        "a misspelt Deployment field passed: {report}"
    );
    let (ok, report) = kubeconform(&kc, &dir, &examples.replace("maxSurge", "maxSurje"))?;
    ensure!(
        !ok && report.contains("maxSurje"),
        "a misspelt Mesh field passed: {report}"
    );

    // Install the ServiceAccount and its RBAC for real (to look through its eyes below).
    let rendered = template(&helm, ns.name(), None)?;
    let rbac: String = rendered
        .split("\n---")
        .filter(|doc| {
            doc.contains("kind: ServiceAccount")
                || doc.contains("kind: Role")
                || doc.contains("kind: RoleBinding")
        })
        .collect::<Vec<_>>()
        .join("\n---\n");
    let (ok, out, err) = run(
        Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .args(["apply", "-n", ns.name(), "-f", "-"]),
        Some(&rbac),
    )?;
    ensure!(ok, "kubectl apply (RBAC): {out}{err}");
    // The API server accepts the rendered chart and the examples (the ServiceAccount exists
    // now, so the test pod is admitted).
    let (ok, out, err) = run(
        Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .args(["apply", "--dry-run=server", "-n", ns.name(), "-f", "-"]),
        Some(&format!("{rendered}\n{examples}")),
    )?;
    ensure!(ok, "kubectl apply --dry-run=server: {out}{err}");

    let sa = format!("system:serviceaccount:{}:zlink", ns.name());
    let mut config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(plane.kubeconfig())?,
        &KubeConfigOptions::default(),
    )
    .await?;
    config.auth_info.impersonate = Some(sa.clone());
    let as_operator = kube::Client::try_from(config)?;
    let reviews: Api<SelfSubjectAccessReview> = Api::all(as_operator.clone());
    let may =
        async |verb: &str, group: &str, resource: &str, in_ns: bool| -> anyhow::Result<bool> {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(verb.into()),
                        group: Some(group.into()),
                        resource: Some(resource.into()),
                        namespace: in_ns.then(|| ns.name().to_owned()),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let r = reviews.create(&PostParams::default(), &review).await?;
            Ok(r.status.is_some_and(|s| s.allowed))
        };
    for (verb, group, resource) in [
        ("watch", "zlink.io", "meshes"),
        ("patch", "zlink.io", "meshes/status"),
        ("create", "", "pods"),
        ("delete", "", "pods"),
        ("get", "", "secrets"),
        ("create", "policy", "poddisruptionbudgets"),
        ("create", "events.k8s.io", "events"),
        ("update", "coordination.k8s.io", "leases"),
    ] {
        ensure!(
            may(verb, group, resource, true).await?,
            "{sa} may not {verb} {resource}"
        );
    }
    for (verb, group, resource, in_ns) in [
        ("list", "", "secrets", true),
        ("watch", "", "secrets", true),
        ("list", "", "nodes", false),
        ("*", "", "pods", true),
        ("list", "*", "*", true),
        ("update", "zlink.io", "meshes", true),
        ("list", "zlink.io", "meshes", false),
        ("delete", "coordination.k8s.io", "leases", true),
    ] {
        ensure!(
            !may(verb, group, resource, in_ns).await?,
            "{sa} may {verb} {group}/{resource} (in namespace: {in_ns})"
        );
    }
    // `zlink-operator check` as the operator: its namespace yes, every namespace no.
    zlink_operator::controller::check(as_operator.clone(), Some(ns.name()))
        .await
        .map_err(anyhow::Error::msg)?;
    match zlink_operator::controller::check(as_operator, None).await {
        Ok(m) => bail!("check passed cluster-wide with a namespaced Role: {m}"),
        Err(e) => ensure!(e.contains("cannot list Meshes"), "{e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
