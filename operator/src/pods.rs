//! The objects the operator owns for a Mesh, built from its spec (issue 18 item 4): node pods and
//! the PodDisruptionBudget. Pure: spec in, object out, so every field is table-tested.
//!
//! - Names `<mesh>-<rev8>-<n>` (from the planner), owned through the controller ownerReference.
//! - Labels: the mesh, the revision (which excludes channel weights) and the version.
//! - Configuration is `ZLINK_*` environment only. Every listener binds `$(POD_IP)` and the mesh
//!   advertises it, so one spec fits a real kubelet and the process kubelet (which gives each pod
//!   its own 127.x.y.z). `kubectl port-forward` cannot reach a listener bound to the pod IP
//!   rather than to localhost; reach the admin API from inside the cluster.
//! - Secrets are files (the mesh key and the admin token, mounted read-only); the Redis URL comes
//!   through a `secretKeyRef`.
//! - Readiness `/readyz`, liveness `/healthz`, spread over hosts; the grace period covers the
//!   relocation, the Message Follow window, the drain and 10 s.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, Pod,
    PodSpec, Probe, ResourceRequirements, SecretKeySelector, SecretVolumeSource,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource as _;

use crate::crd::Mesh;

/// The label naming a pod's Mesh.
pub const MESH_LABEL: &str = "zlink.io/mesh";
/// The label holding a pod's revision.
pub const REVISION_LABEL: &str = "zlink.io/revision";
/// The label holding a pod's application version.
pub const VERSION_LABEL: &str = "zlink.io/version";
/// The node container's name.
pub const CONTAINER: &str = "node";
/// The mesh (ZeroMQ) port.
pub const MESH_PORT: i32 = 7000;
/// The HostAdmin gRPC port.
pub const ADMIN_PORT: i32 = 7070;
/// The HTTP port (`/healthz`, `/readyz`, `/metrics`).
pub const HTTP_PORT: i32 = 9090;
/// The node's default Message Follow duration (glossary `MessageFollowDuration`), which
/// `SafeToShutdown` waits for.
pub const MESSAGE_FOLLOW_SECONDS: i64 = 30;
/// The key of the mesh admission secret in its Secret.
pub const MESH_KEY: &str = "mesh-key";
/// The key of the admin token in its Secret.
pub const ADMIN_TOKEN_KEY: &str = "admin-token";

const MESH_SECRET_DIR: &str = "/var/run/zlink/mesh";
const ADMIN_SECRET_DIR: &str = "/var/run/zlink/admin";

/// The Secret holding the mesh key: the spec's, or the generated `<mesh>-mesh`.
pub fn mesh_secret_name(mesh: &Mesh) -> String {
    mesh.spec
        .mesh_secret_ref
        .as_ref()
        .map_or_else(|| format!("{}-mesh", name_of(mesh)), |r| r.name.clone())
}

/// The Secret holding the admin token: the spec's, or the generated `<mesh>-admin`.
pub fn admin_secret_name(mesh: &Mesh) -> String {
    mesh.spec
        .admin_secret_ref
        .as_ref()
        .map_or_else(|| format!("{}-admin", name_of(mesh)), |r| r.name.clone())
}

fn name_of(mesh: &Mesh) -> String {
    mesh.metadata.name.clone().unwrap_or_default()
}

/// The labels every object of `mesh` carries (the PDB's and the pods' selector).
pub fn selector_labels(mesh: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "zlink-node".to_owned()),
        (
            "app.kubernetes.io/managed-by".to_owned(),
            "zlink-operator".to_owned(),
        ),
        (MESH_LABEL.to_owned(), mesh.to_owned()),
    ])
}

/// The label selector string of the pods of `mesh` (for the scale subresource and lists).
pub fn selector(mesh: &str) -> String {
    selector_labels(mesh)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The controller ownerReference to `mesh`.
pub fn owner(mesh: &Mesh) -> Option<OwnerReference> {
    mesh.controller_owner_ref(&())
}

/// `terminationGracePeriodSeconds`: relocation + drain deadlines + the Message Follow window +
/// 10 s.
pub fn grace_period_seconds(mesh: &Mesh) -> i64 {
    let s = &mesh.spec.shutdown;
    i64::from(s.relocation_deadline_seconds)
        + i64::from(s.drain_deadline_seconds)
        + MESSAGE_FOLLOW_SECONDS
        + 10
}

fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(HTTP_PORT),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// The environment the operator sets (user entries follow it).
fn operator_env(mesh: &Mesh, channels: &[(String, i32)]) -> Vec<EnvVar> {
    let spec = &mesh.spec;
    let s = &spec.shutdown;
    let mut channels: Vec<&(String, i32)> = channels.iter().collect();
    channels.sort();
    let mut out = vec![
        field_env("POD_IP", "status.podIP"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        field_env("POD_UID", "metadata.uid"),
        env("ZLINK_MESH_NAME", name_of(mesh)),
        env("ZLINK_MESH_RID_PREFIX", "$(POD_NAME)"),
        env("ZLINK_MESH_BIND_HOST", "$(POD_IP)"),
        env("ZLINK_MESH_ADVERTISE_HOST", "$(POD_IP)"),
        env("ZLINK_MESH_PORT", MESH_PORT.to_string()),
        env(
            "ZLINK_MESH_SECRET_FILE",
            format!("{MESH_SECRET_DIR}/{MESH_KEY}"),
        ),
        env(
            "ZLINK_MESH_CHANNELS",
            channels
                .iter()
                .map(|(name, weight)| format!("{name}:server:{weight}"))
                .collect::<Vec<_>>()
                .join(","),
        ),
        EnvVar {
            name: "ZLINK_REDIS_URL".into(),
            value: None,
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: spec.location_store.redis_url_secret_ref.name.clone(),
                    key: spec.location_store.redis_url_secret_ref.key.clone(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
        },
        env(
            "ZLINK_REDIS_NAMESPACE",
            spec.location_store.namespace.clone(),
        ),
        env(
            "ZLINK_APPLICATION_VERSION",
            spec.application_version.to_string(),
        ),
        env("ZLINK_ADMIN_GRPC_LISTEN", format!("$(POD_IP):{ADMIN_PORT}")),
        env("ZLINK_ADMIN_HTTP_LISTEN", format!("$(POD_IP):{HTTP_PORT}")),
        env(
            "ZLINK_ADMIN_TOKEN_FILE",
            format!("{ADMIN_SECRET_DIR}/{ADMIN_TOKEN_KEY}"),
        ),
        env("ZLINK_RELOCATION_ON_SHUTDOWN", "planned_maintenance"),
        env(
            "ZLINK_RELOCATION_SHUTDOWN_DEADLINE_MS",
            (i64::from(s.relocation_deadline_seconds) * 1000).to_string(),
        ),
        env(
            "ZLINK_DRAIN_DEADLINE_MS",
            ((grace_period_seconds(mesh) - 5) * 1000).to_string(),
        ),
        env("ZLINK_LOG_LEVEL", "info"),
    ];
    for e in &spec.template.env {
        out.push(EnvVar {
            name: e.name.clone(),
            value: e.value.clone(),
            value_from: e.value_from.as_ref().map(|f| EnvVarSource {
                secret_key_ref: f.secret_key_ref.as_ref().map(|r| SecretKeySelector {
                    name: r.name.clone(),
                    key: r.key.clone(),
                    optional: Some(false),
                }),
                config_map_key_ref: f.config_map_key_ref.as_ref().map(|r| {
                    k8s_openapi::api::core::v1::ConfigMapKeySelector {
                        name: r.name.clone(),
                        key: r.key.clone(),
                        optional: Some(false),
                    }
                }),
                ..EnvVarSource::default()
            }),
        });
    }
    out
}

/// Node pod `name` of `mesh` at `revision`, in the channels `channels` (name, weight).
pub fn node_pod(mesh: &Mesh, channels: &[(String, i32)], name: &str, revision: &str) -> Pod {
    let spec = &mesh.spec;
    let t = &spec.template;
    let mesh_name = name_of(mesh);
    let mut labels = t.labels.clone();
    labels.extend(selector_labels(&mesh_name));
    labels.insert(REVISION_LABEL.into(), revision.into());
    labels.insert(VERSION_LABEL.into(), spec.application_version.to_string());
    let quantities = |m: &BTreeMap<String, String>| {
        (!m.is_empty()).then(|| {
            m.iter()
                .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                .collect::<BTreeMap<_, _>>()
        })
    };
    let resources = t.resources.as_ref().map(|r| ResourceRequirements {
        requests: quantities(&r.requests),
        limits: quantities(&r.limits),
        ..ResourceRequirements::default()
    });
    let secret_volume = |vol: &str, secret: String| Volume {
        name: vol.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(0o400),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    let mount = |vol: &str, dir: &str| VolumeMount {
        name: vol.into(),
        mount_path: dir.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let port = |name: &str, p: i32| ContainerPort {
        name: Some(name.into()),
        container_port: p,
        ..ContainerPort::default()
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: mesh.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!t.annotations.is_empty()).then(|| t.annotations.clone()),
            owner_references: owner(mesh).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: CONTAINER.into(),
                image: Some(spec.image.clone()),
                args: Some(vec!["run".into()]),
                env: Some(operator_env(mesh, channels)),
                ports: Some(vec![
                    port("mesh", MESH_PORT),
                    port("admin", ADMIN_PORT),
                    port("http", HTTP_PORT),
                ]),
                readiness_probe: Some(http_probe("/readyz", 2, 3)),
                liveness_probe: Some(http_probe("/healthz", 5, 6)),
                resources,
                volume_mounts: Some(vec![
                    mount("mesh-secret", MESH_SECRET_DIR),
                    mount("admin-secret", ADMIN_SECRET_DIR),
                ]),
                ..Container::default()
            }],
            volumes: Some(vec![
                secret_volume("mesh-secret", mesh_secret_name(mesh)),
                secret_volume("admin-secret", admin_secret_name(mesh)),
            ]),
            termination_grace_period_seconds: Some(grace_period_seconds(mesh)),
            restart_policy: Some("Always".into()),
            node_selector: (!t.node_selector.is_empty()).then(|| t.node_selector.clone()),
            tolerations: (!t.tolerations.is_empty()).then(|| {
                t.tolerations
                    .iter()
                    .map(|x| k8s_openapi::api::core::v1::Toleration {
                        key: x.key.clone(),
                        operator: x.operator.clone(),
                        value: x.value.clone(),
                        effect: x.effect.clone(),
                        toleration_seconds: x.toleration_seconds,
                    })
                    .collect()
            }),
            priority_class_name: t.priority_class_name.clone(),
            topology_spread_constraints: Some(vec![TopologySpreadConstraint {
                max_skew: 1,
                topology_key: "kubernetes.io/hostname".into(),
                when_unsatisfiable: "ScheduleAnyway".into(),
                label_selector: Some(LabelSelector {
                    match_labels: Some(selector_labels(&mesh_name)),
                    ..LabelSelector::default()
                }),
                ..TopologySpreadConstraint::default()
            }]),
            enable_service_links: Some(false),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// The PodDisruptionBudget of `mesh`'s pods (`disruption.maxUnavailable`).
pub fn pdb(mesh: &Mesh) -> PodDisruptionBudget {
    let mesh_name = name_of(mesh);
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(mesh_name.clone()),
            namespace: mesh.metadata.namespace.clone(),
            labels: Some(selector_labels(&mesh_name)),
            owner_references: owner(mesh).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(mesh.spec.disruption.max_unavailable)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(&mesh_name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    pub(crate) fn mesh() -> Mesh {
        let mut m: Mesh = serde_json::from_value(serde_json::json!({
            "apiVersion": "zlink.io/v1alpha1",
            "kind": "Mesh",
            "metadata": {"name": "game", "namespace": "ns", "uid": "mesh-uid"},
            "spec": {
                "image": "zlink-node:7",
                "applicationVersion": 7,
                "locationStore": {
                    "redisUrlSecretRef": {"name": "redis", "key": "url"},
                    "namespace": "game-store",
                },
                "template": {
                    "labels": {"team": "rooms"},
                    "env": [{"name": "RUST_BACKTRACE", "value": "1"}],
                    "resources": {"requests": {"cpu": "250m"}},
                },
            },
        }))
        .unwrap();
        m.metadata.uid = Some("mesh-uid".into());
        m
    }

    fn env_of(p: &Pod) -> Vec<EnvVar> {
        p.spec.as_ref().unwrap().containers[0].env.clone().unwrap()
    }

    fn value(p: &Pod, name: &str) -> Option<String> {
        env_of(p)
            .into_iter()
            .find(|e| e.name == name)
            .and_then(|e| e.value)
    }

    #[test]
    fn a_node_pod_is_owned_labelled_and_configured_by_env_only() {
        let m = mesh();
        let p = node_pod(
            &m,
            &[("zone".into(), 5), ("chat".into(), 100)],
            "game-aaaaaaaa-0",
            "aaaaaaaabbbbbbbb",
        );
        let meta = &p.metadata;
        assert_eq!(meta.name.as_deref(), Some("game-aaaaaaaa-0"));
        assert_eq!(meta.namespace.as_deref(), Some("ns"));
        let owner = &meta.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Mesh", "game"));
        assert_eq!(owner.controller, Some(true));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels[MESH_LABEL], "game");
        assert_eq!(labels[REVISION_LABEL], "aaaaaaaabbbbbbbb");
        assert_eq!(labels[VERSION_LABEL], "7");
        assert_eq!(labels["team"], "rooms");
        // Every listener binds the pod IP; the pod IP comes from the downward API.
        assert_eq!(
            value(&p, "ZLINK_MESH_BIND_HOST").as_deref(),
            Some("$(POD_IP)")
        );
        assert_eq!(
            value(&p, "ZLINK_ADMIN_GRPC_LISTEN").as_deref(),
            Some("$(POD_IP):7070")
        );
        let pod_ip = env_of(&p).into_iter().find(|e| e.name == "POD_IP").unwrap();
        assert_eq!(
            pod_ip.value_from.unwrap().field_ref.unwrap().field_path,
            "status.podIP"
        );
        // $(POD_IP) is only expanded when POD_IP is defined earlier.
        let names: Vec<String> = env_of(&p).into_iter().map(|e| e.name).collect();
        let at = |n: &str| names.iter().position(|x| x == n).unwrap();
        assert!(at("POD_IP") < at("ZLINK_MESH_BIND_HOST"));
        assert!(at("POD_NAME") < at("ZLINK_MESH_RID_PREFIX"));
        // The Redis URL through a secretKeyRef, the secrets as files.
        let redis = env_of(&p)
            .into_iter()
            .find(|e| e.name == "ZLINK_REDIS_URL")
            .unwrap();
        let r = redis.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!((r.name.as_str(), r.key.as_str()), ("redis", "url"));
        assert_eq!(
            value(&p, "ZLINK_MESH_SECRET_FILE").as_deref(),
            Some("/var/run/zlink/mesh/mesh-key")
        );
        assert_eq!(
            value(&p, "ZLINK_REDIS_NAMESPACE").as_deref(),
            Some("game-store")
        );
        assert_eq!(value(&p, "ZLINK_APPLICATION_VERSION").as_deref(), Some("7"));
        assert_eq!(
            value(&p, "ZLINK_MESH_CHANNELS").as_deref(),
            Some("chat:server:100,zone:server:5")
        );
        // User env comes after the operator's.
        assert_eq!(names.last().map(String::as_str), Some("RUST_BACKTRACE"));
        let spec = p.spec.as_ref().unwrap();
        let vols: Vec<String> = spec
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .map(|v| v.secret.as_ref().unwrap().secret_name.clone().unwrap())
            .collect();
        assert_eq!(vols, ["game-mesh", "game-admin"]);
        let c = &spec.containers[0];
        assert_eq!(
            c.readiness_probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .as_deref(),
            Some("/readyz")
        );
        assert_eq!(
            c.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"],
            Quantity("250m".into())
        );
    }

    #[test]
    fn the_grace_period_covers_relocation_follow_window_drain_and_ten_seconds() {
        let mut m = mesh();
        assert_eq!(grace_period_seconds(&m), 60 + 30 + 30 + 10);
        m.spec.shutdown.relocation_deadline_seconds = 5;
        m.spec.shutdown.drain_deadline_seconds = 7;
        assert_eq!(grace_period_seconds(&m), 5 + 7 + 30 + 10);
        let p = node_pod(&m, &[], "x", "r");
        assert_eq!(
            p.spec.as_ref().unwrap().termination_grace_period_seconds,
            Some(52)
        );
        // The node's drain deadline ends before the kubelet's SIGKILL.
        assert_eq!(
            value(&p, "ZLINK_DRAIN_DEADLINE_MS").as_deref(),
            Some("47000")
        );
        assert_eq!(
            value(&p, "ZLINK_RELOCATION_SHUTDOWN_DEADLINE_MS").as_deref(),
            Some("5000")
        );
    }

    #[test]
    fn secret_refs_name_the_secrets_and_the_pdb_selects_the_pods() {
        let mut m = mesh();
        m.spec.mesh_secret_ref = Some(crate::crd::SecretName {
            name: "mine".into(),
        });
        assert_eq!(mesh_secret_name(&m), "mine");
        assert_eq!(admin_secret_name(&m), "game-admin");
        let b = pdb(&m);
        let spec = b.spec.unwrap();
        assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
        let sel = spec.selector.unwrap().match_labels.unwrap();
        let pod_labels = node_pod(&m, &[], "x", "r").metadata.labels.unwrap();
        assert!(sel.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
        assert_eq!(
            selector("game"),
            "app.kubernetes.io/managed-by=zlink-operator,app.kubernetes.io/name=zlink-node,zlink.io/mesh=game"
        );
    }
}
