//! The process kubelet (`zlink_e2e::kubelet`, issue 18 item 10) on the real kube-apiserver: a
//! `zlink-fake-node` pod is bound, started on its own 127.x address with its env (fieldRef,
//! `$(POD_IP)`, a Secret key) and a Secret volume, becomes Ready by its httpGet probe, serves
//! its HostAdmin API with the token from that volume, and on delete gets SIGTERM and is
//! removed; an unknown image, a missing key and an unsupported field each get the kubelet's
//! reason.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use zlink_e2e::k8s;
use zlink_e2e::kubelet::{self, Config};
use zlink_operator::crd::Mesh;
use zlink_operator::hosts::{AdminHosts, Hosts as _, PodAddr};
use zlink_operator::planner::{HostObservation, HostState};

const TOKEN: &str = "kubelet-test-token";

async fn wait_pod(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    pred: impl Fn(&Pod) -> bool,
) -> anyhow::Result<Pod> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(p) = pods.get_opt(name).await?
            && pred(&p)
        {
            return Ok(p);
        }
        if tokio::time::Instant::now() > deadline {
            let p = pods.get_opt(name).await?;
            bail!(
                "timed out waiting for {what} of {name}: {:?}",
                p.and_then(|p| p.status)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn fake_pod(name: &str, image: &str, extra_env: serde_json::Value) -> anyhow::Result<Pod> {
    let mut env = vec![
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}),
        json!({"name": "ZLINK_ADMIN_GRPC_LISTEN", "value": "$(POD_IP):7070"}),
        json!({"name": "ZLINK_ADMIN_HTTP_LISTEN", "value": "$(POD_IP):9090"}),
        json!({"name": "ZLINK_ADMIN_TOKEN_FILE", "value": "/var/run/zlink/admin/admin-token"}),
        json!({"name": "ZLINK_APPLICATION_VERSION", "valueFrom": {"secretKeyRef": {"name": "admin", "key": "version"}}}),
    ];
    if let serde_json::Value::Array(more) = extra_env {
        env.extend(more);
    }
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 20,
            "containers": [{
                "name": "node",
                "image": image,
                "env": env,
                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 9090}, "periodSeconds": 1},
                "volumeMounts": [{"name": "admin", "mountPath": "/var/run/zlink/admin", "readOnly": true}],
            }],
            "volumes": [{"name": "admin", "secret": {"secretName": "admin"}}],
        },
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_run_as_processes_with_their_env_volumes_probes_and_deletes() -> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns = plane.namespace("kubelet").await?;
    let env = plane.env();
    let work = std::env::temp_dir().join(format!("zlink-kubelet-{}", std::process::id()));
    let cfg = Config {
        nodes: 2,
        images: BTreeMap::from([(
            "zlink-fake-node".to_owned(),
            env!("CARGO_BIN_EXE_zlink-fake-node").into(),
        )]),
        ip_base: [41, 0],
        work_dir: work.clone(),
        bind_unscheduled: true,
        server: env.get("ZLINK_K8S_SERVER").cloned().context("server")?,
        ca_file: env.get("ZLINK_K8S_CA_FILE").cloned().context("CA")?.into(),
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let kubelet = tokio::spawn(kubelet::run(plane.client().await?, cfg, async move {
        let _ = stop_rx.await;
    }));

    let secrets: Api<Secret> = ns.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "admin"},
        "stringData": {"admin-token": TOKEN, "version": "4"},
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    let pods: Api<Pod> = ns.api();
    let pp = PostParams::default();
    pods.create(&pp, &fake_pod("good", "zlink-fake-node:1", json!([]))?)
        .await?;
    pods.create(&pp, &fake_pod("no-image", "nope:1", json!([]))?)
        .await?;
    pods.create(
        &pp,
        &fake_pod(
            "no-key",
            "zlink-fake-node:1",
            json!([{"name": "X", "valueFrom": {"secretKeyRef": {"name": "admin", "key": "missing"}}}]),
        )?,
    )
    .await?;
    let mut host_net = fake_pod("host-net", "zlink-fake-node:1", json!([]))?;
    if let Some(s) = host_net.spec.as_mut() {
        s.host_network = Some(true);
    }
    pods.create(&pp, &host_net).await?;

    // The good pod: bound, Running on a 127.41.x address, Ready by its probe.
    let p = wait_pod(&pods, "good", "Ready", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    })
    .await?;
    let ip = p
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("podIP")?;
    ensure!(ip.starts_with("127.41."), "pod IP {ip}");
    let node = p
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("nodeName")?;
    ensure!(node.starts_with("process-node-"), "bound to {node}");
    // Its admin API answers with the token from its Secret volume and the version from its env.
    let (tx, _wake) = futures::channel::mpsc::unbounded();
    let hosts = AdminHosts::new(7070, tx);
    let addr = PodAddr {
        mesh: ObjectRef::<Mesh>::new("m").within(ns.name()),
        name: "good".into(),
        uid: p.metadata.uid.clone().context("uid")?,
        ip: ip.clone(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let view = loop {
        if let HostObservation::Status(v) = hosts.observe(&addr, TOKEN) {
            break v;
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the pod's admin API never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    ensure!(
        view.state == HostState::Serving && view.version == 4,
        "{view:?}"
    );
    ensure!(
        view.rid.starts_with("good-"),
        "the RID prefix comes from POD_NAME: {}",
        view.rid
    );

    // The kubelet's reasons.
    let p = wait_pod(&pods, "no-image", "ImagePullBackOff", |p| {
        waiting_reason(p).as_deref() == Some("ImagePullBackOff")
    })
    .await?;
    ensure!(p.status.and_then(|s| s.phase).as_deref() == Some("Pending"));
    wait_pod(&pods, "no-key", "CreateContainerConfigError", |p| {
        waiting_reason(p).as_deref() == Some("CreateContainerConfigError")
    })
    .await?;
    let p = wait_pod(&pods, "host-net", "Unsupported", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await?;
    ensure!(p.status.and_then(|s| s.reason).as_deref() == Some("Unsupported"));

    // The Nodes are registered and Ready.
    let nodes: Api<Node> = Api::all(ns.client());
    for n in ["process-node-0", "process-node-1"] {
        let node = nodes.get(n).await?;
        ensure!(
            node.status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            "{n} not Ready"
        );
    }

    // Delete: SIGTERM (the fake node exits 0 at once, well within the grace period), then the
    // kubelet's final delete removes the object.
    pods.delete("good", &DeleteParams::default()).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while pods.get_opt("good").await?.is_some() {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the deleted pod was never removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(work.join(&addr.uid).join("log")).unwrap_or_default();
    ensure!(
        log.contains("stopped"),
        "the fake node did not stop on SIGTERM: {log}"
    );
    // The admin API is gone with it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !matches!(
        hosts.observe(
            &PodAddr {
                uid: "other".into(),
                ..addr.clone()
            },
            TOKEN
        ),
        HostObservation::Unreachable
    ) {
        ensure!(
            tokio::time::Instant::now() < deadline,
            "the admin API still answers"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop_tx.send(());
    let _ = kubelet.await;
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}
