//! Harness for tests against a real Kubernetes control plane.
//!
//! [`control_plane`] starts etcd and kube-apiserver through `scripts/k8s-env` once per test
//! binary (the first test to ask starts it; the others wait and share it). Each test then takes
//! its own namespace with [`ControlPlane::namespace`], so tests in one binary run in parallel
//! without seeing each other's objects.
//!
//! That shared control plane is an API server only: no scheduler, controller-manager or kubelet.
//! Pods are stored but stay `Pending`; namespaces never finish deleting; nothing
//! garbage-collects owned objects. `docs/testing.md` lists what that means for tests.
//!
//! Tests that need the rest take [`full_control_plane`] (shared per test binary, with
//! kube-controller-manager, kube-scheduler and an audit log), or a control plane of their own
//! with [`own_control_plane`] when they disturb it (restarting the apiserver, say). They are not
//! in the API-only plane because tests share it across namespaces and were written for it.
//!
//! # When the tools are missing
//! The binaries come from `scripts/k8s-tools`, which builds them from Go modules once (about
//! 20-30 minutes on two cores; `scripts/test` does it). With `CI=true` or
//! `ZLINK_K8S_REQUIRED=1`, [`control_plane`] builds them if needed and panics if that fails, so
//! the test fails. Otherwise, when they are not built yet, it prints how to build them and
//! returns `None`, and the test returns early.
//!
//! # Using a cluster that is already running
//! With `ZLINK_E2E_KUBECONFIG=<path>` the harness starts nothing and uses that kubeconfig's
//! current context (a `scripts/k8s-env` session, or a kind cluster). Its user must be allowed
//! to create namespaces, CRDs and pods.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// A running control plane (or an external cluster), shared by the tests of one test binary.
pub struct ControlPlane {
    kubeconfig: PathBuf,
    env: HashMap<String, String>,
    /// Holds `scripts/k8s-env`, the write end of its stdin and its stdout. A shared control plane
    /// is never waited for: when the test binary exits the pipe closes, and the script stops
    /// its processes and deletes its directory. An owned one ([`own_control_plane`]) is stopped
    /// and waited for when dropped.
    process: Option<Mutex<Script>>,
}

/// A running `scripts/k8s-env`.
struct Script {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// What a control plane runs besides etcd and kube-apiserver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// kube-controller-manager and kube-scheduler (`ZLINK_K8S_COMPONENTS`): garbage collection,
    /// Deployments, ReplicaSets, ServiceAccounts, namespace deletion, PDB status, scheduling.
    pub controllers: bool,
    /// An audit log (`ZLINK_K8S_AUDIT_LOG`), read with [`ControlPlane::audit_events`].
    pub audit_log: bool,
}

impl Options {
    /// Everything: controllers, scheduler and the audit log.
    pub const FULL: Self = Self {
        controllers: true,
        audit_log: true,
    };
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("kubeconfig", &self.kubeconfig)
            .field("server", &self.env.get("ZLINK_K8S_SERVER"))
            .finish_non_exhaustive()
    }
}

/// The outcome of the first start, shared: a failure is reported to every test, not retried.
static CONTROL_PLANE: OnceLock<Result<Option<ControlPlane>, String>> = OnceLock::new();
static FULL_CONTROL_PLANE: OnceLock<Result<Option<ControlPlane>, String>> = OnceLock::new();
static NAMESPACE_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Returns the control plane of this test binary, starting it on first use.
///
/// Returns `None` (after printing why, once) only when the tools are not built and the tests are
/// not required to run (neither `CI=true` nor `ZLINK_K8S_REQUIRED=1`). Panics when the control
/// plane is required but cannot be built or started.
pub fn control_plane() -> Option<&'static ControlPlane> {
    match CONTROL_PLANE.get_or_init(|| start(Options::default(), &[]).map_err(|e| format!("{e:#}")))
    {
        Ok(plane) => plane.as_ref(),
        Err(error) => panic!("could not start the Kubernetes control plane: {error}"),
    }
}

/// Like [`control_plane`], with kube-controller-manager, kube-scheduler and an audit log
/// ([`Options::FULL`]); one per test binary, shared by the tests that ask for it.
pub fn full_control_plane() -> Option<&'static ControlPlane> {
    match FULL_CONTROL_PLANE.get_or_init(|| start(Options::FULL, &[]).map_err(|e| format!("{e:#}")))
    {
        Ok(plane) => plane.as_ref(),
        Err(error) => panic!("could not start the Kubernetes control plane: {error}"),
    }
}

/// A control plane for the calling test alone (for tests that restart or break it), stopped when
/// dropped. `Ok(None)` under the same condition as [`control_plane`]. It blocks while the control
/// plane starts (a few seconds).
///
/// With `ZLINK_E2E_KUBECONFIG` set (an external cluster, which cannot be owned, restarted or
/// audited from here) it prints a notice and returns `Ok(None)`: the test is skipped.
///
/// # Errors
/// When it cannot be started.
pub fn own_control_plane(options: Options) -> anyhow::Result<Option<ControlPlane>> {
    own_control_plane_with_env(options, &[])
}

/// Like [`own_control_plane`], with `env` set for `scripts/k8s-env` (its test switches, e.g.
/// `ZLINK_K8S_FIRST_PORT_SCHEDULER`).
///
/// # Errors
/// When it cannot be started.
pub fn own_control_plane_with_env(
    options: Options,
    env: &[(&str, &str)],
) -> anyhow::Result<Option<ControlPlane>> {
    if std::env::var_os("ZLINK_E2E_KUBECONFIG").is_some() {
        eprintln!(
            "NOTICE: skipped: this test needs a control plane of its own, and ZLINK_E2E_KUBECONFIG names an external cluster"
        );
        return Ok(None);
    }
    start(options, env)
}

/// Whether a missing control plane fails the test rather than skipping it.
pub fn required() -> bool {
    let set = |name: &str| {
        std::env::var(name)
            .map(|value| !matches!(value.trim(), "" | "0" | "false"))
            .unwrap_or(false)
    };
    set("CI") || set("ZLINK_K8S_REQUIRED")
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// Writes to the real stderr, past the test harness's output capture, so the message shows
/// even when the test passes.
fn notice(message: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "zlink-e2e: {message}");
}

fn start(options: Options, extra_env: &[(&str, &str)]) -> anyhow::Result<Option<ControlPlane>> {
    if let Some(path) = std::env::var_os("ZLINK_E2E_KUBECONFIG") {
        let kubeconfig = PathBuf::from(path);
        notice(&format!(
            "using the cluster of ZLINK_E2E_KUBECONFIG={}",
            kubeconfig.display()
        ));
        return Ok(Some(ControlPlane {
            kubeconfig,
            env: HashMap::new(),
            process: None,
        }));
    }

    let root = repo_root();
    let tools = root.join("scripts/k8s-tools");
    let built = Command::new(&tools)
        .arg("--check")
        .status()
        .with_context(|| format!("running {} --check", tools.display()))?
        .success();
    if !built && !required() {
        notice(
            "SKIPPING Kubernetes control-plane tests: the tools (kube-apiserver, etcd, ...) are \
             not built yet. Build them once with `scripts/k8s-tools` (about 20-30 min on 2 \
             cores; scripts/test does it), or set ZLINK_K8S_REQUIRED=1 to build them from the \
             test. Under CI=true these tests fail instead of skipping.",
        );
        return Ok(None);
    }
    if !built {
        notice("building the Kubernetes test tools first (scripts/k8s-tools); this takes a while");
    }

    let script = root.join("scripts/k8s-env");
    let components = if options.controllers {
        "controller-manager,scheduler"
    } else {
        "none"
    };
    let mut command = Command::new(&script);
    command.env("ZLINK_K8S_COMPONENTS", components);
    command.envs(extra_env.iter().copied());
    if options.audit_log {
        command.env("ZLINK_K8S_AUDIT_LOG", "1");
    } else {
        command.env_remove("ZLINK_K8S_AUDIT_LOG");
    }
    let mut child = command
        .current_dir(&root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawning {}", script.display()))?;
    let stdin = child.stdin.take().context("no stdin pipe")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;

    let mut stdout = BufReader::new(stdout);
    let mut env = HashMap::new();
    let mut ready = false;
    let mut line = String::new();
    loop {
        line.clear();
        if stdout
            .read_line(&mut line)
            .context("reading the output of scripts/k8s-env")?
            == 0
        {
            break;
        }
        let line = line.trim_end();
        if line == "ZLINK_K8S_READY=1" {
            ready = true;
            break;
        }
        let assignment = line.strip_prefix("export ").unwrap_or(line);
        if let Some((key, value)) = assignment.split_once('=') {
            env.insert(key.to_owned(), unquote(value));
        }
    }
    if !ready {
        let status = child.wait().context("waiting for scripts/k8s-env")?;
        bail!(
            "{} stopped before the control plane was ready ({status}); its messages are above",
            script.display()
        );
    }
    let kubeconfig = env
        .get("KUBECONFIG")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("scripts/k8s-env printed no KUBECONFIG"))?;
    Ok(Some(ControlPlane {
        kubeconfig,
        env,
        process: Some(Mutex::new(Script {
            child,
            stdin: Some(stdin),
            stdout,
        })),
    }))
}

/// Undoes bash's `printf %q` for the values k8s-env prints (paths, URLs, lists): `\x` → `x`.
fn unquote(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            let mut script = process.into_inner().unwrap_or_else(|p| p.into_inner());
            // End of stdin: the script stops its processes and removes its directory.
            drop(script.stdin.take());
            let _ = script.child.wait();
        }
    }
}

impl ControlPlane {
    /// The admin kubeconfig of this control plane.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The environment printed by `scripts/k8s-env` (`KUBECONFIG`, `ZLINK_K8S_SERVER`, tool
    /// paths such as `ZLINK_K8S_KUBECTL`); empty for an external cluster.
    pub fn env(&self) -> &HashMap<String, String> {
        &self.env
    }

    /// The audit log file, when this control plane writes one ([`Options::audit_log`]).
    pub fn audit_log(&self) -> Option<PathBuf> {
        self.env.get("ZLINK_K8S_AUDIT_LOG").map(PathBuf::from)
    }

    /// The audit events written so far (one JSON object per line; a torn last line is skipped).
    ///
    /// # Errors
    /// When there is no audit log or it cannot be read.
    pub fn audit_events(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let path = self
            .audit_log()
            .context("this control plane writes no audit log (Options::audit_log)")?;
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the audit log {}", path.display()))?;
        Ok(text
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect())
    }

    /// Stops kube-apiserver (SIGTERM) and starts it again on the same port and etcd, returning
    /// once it is ready. Clients reconnect on their own. This blocks for a few seconds: from an
    /// async test, call it through `tokio::task::block_in_place` on a multi-threaded runtime.
    ///
    /// # Errors
    /// For an external cluster, or when the script fails to bring it back.
    pub fn restart_apiserver(&self) -> anyhow::Result<()> {
        self.restart("kube-apiserver")
    }

    /// Stops kube-controller-manager and starts it again, returning once it is healthy: its API
    /// discovery starts fresh, so its controllers see CRDs created after it first started (the
    /// disruption controller needs a CRD's scale subresource to count a PDB's pods). Blocks
    /// like [`Self::restart_apiserver`].
    ///
    /// # Errors
    /// For an external cluster, a control plane without controllers, or when the script fails
    /// to bring it back.
    pub fn restart_controller_manager(&self) -> anyhow::Result<()> {
        self.restart("kube-controller-manager")
    }

    fn restart(&self, component: &str) -> anyhow::Result<()> {
        let process = self
            .process
            .as_ref()
            .context("an external cluster (ZLINK_E2E_KUBECONFIG) cannot be restarted")?;
        let mut script = process.lock().unwrap_or_else(|p| p.into_inner());
        let stdin = script
            .stdin
            .as_mut()
            .context("the control plane is stopping")?;
        writeln!(stdin, "restart {component}").context("writing to scripts/k8s-env")?;
        stdin.flush().context("writing to scripts/k8s-env")?;
        let mut line = String::new();
        loop {
            line.clear();
            if script
                .stdout
                .read_line(&mut line)
                .context("reading scripts/k8s-env")?
                == 0
            {
                bail!("scripts/k8s-env exited while restarting {component} (its log is above)");
            }
            match line.trim_end() {
                "ZLINK_K8S_RESTARTED=1" => return Ok(()),
                other if other.starts_with("ZLINK_K8S_ERROR=") => {
                    bail!("scripts/k8s-env: {other}")
                }
                _ => {}
            }
        }
    }

    /// A client for the admin user, bound to the calling tokio runtime (each `#[tokio::test]`
    /// has its own runtime, so make one per test).
    pub async fn client(&self) -> anyhow::Result<Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .context("loading the kubeconfig")?;
        Client::try_from(config).context("building the kube client")
    }

    /// Creates a fresh namespace for one test, named `<hint>-<n>-<random>`, with the `default`
    /// service account (made here when no controller-manager runs, or before it gets to it), so
    /// pods can be admitted at once.
    pub async fn namespace(&self, hint: &str) -> anyhow::Result<TestNamespace> {
        let client = self.client().await?;
        let name = namespace_name(hint);
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(name.clone());
        namespace.metadata.labels = Some(
            [("zlink.test/e2e".to_owned(), "true".to_owned())]
                .into_iter()
                .collect(),
        );
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let mut account = ServiceAccount::default();
        account.metadata.name = Some("default".to_owned());
        match accounts.create(&PostParams::default(), &account).await {
            Ok(_) => {}
            // The controller-manager's ServiceAccount controller was first.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(e).with_context(|| format!("creating service account {name}/default"));
            }
        }
        Ok(TestNamespace { name, client })
    }
}

/// A namespace owned by one test, and a client bound to that test's runtime.
///
/// It is not deleted afterwards: without a namespace controller a deleted namespace stays
/// `Terminating` forever, and the whole control plane is thrown away when the test binary ends.
#[derive(Clone)]
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TestNamespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The admin client.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// An API handle for a namespaced resource in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

/// `<hint>-<n>-<random>`, a valid DNS-1123 label of at most 63 characters.
fn namespace_name(hint: &str) -> String {
    let mut prefix: String = hint
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    prefix.truncate(40);
    let prefix = prefix.trim_matches('-');
    let prefix = if prefix.is_empty() { "test" } else { prefix };
    let n = NAMESPACE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .subsec_nanos();
    format!(
        "{prefix}-{n}-{:06x}",
        (nanos ^ std::process::id()) & 0xff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::namespace_name;

    #[test]
    fn namespace_names_are_dns_labels() {
        for hint in ["smoke", "Weird_Name.with.dots", "", "---", &"x".repeat(100)] {
            let name = namespace_name(hint);
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
                "{name}"
            );
            assert!(!name.starts_with('-') && !name.ends_with('-'), "{name}");
        }
        assert_ne!(namespace_name("a"), namespace_name("a"));
    }
}
