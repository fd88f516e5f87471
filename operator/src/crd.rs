//! The custom resources of `zlink.io/v1alpha1`: a [`Mesh`] (the node pods of one mesh, their
//! version, store and rollout settings) and a [`Channel`] (one channel's weight in a mesh).
//!
//! The schemas are derived with kube's `KubeSchema`, so the validation the API server applies
//! lives next to the fields: ranges as OpenAPI bounds, and every rule a user can trip as a CEL
//! rule with a message that says what to do instead (checked on the real kube-apiserver by
//! `e2e/tests/operator_crds.rs`). `zlink-operator crdgen` writes them to `crds/` and
//! `charts/zlink/crds/`; `tests/crd_fresh.rs` fails when a checked-in copy is stale.
//!
//! # Compatibility
//! Within `v1alpha1` changes are additive only: new optional fields with defaults, never a
//! removed or renamed field, never a tighter rule on an existing one.
//!
//! The template types are our own narrow ones (not `k8s-openapi`'s `PodSpec`): the operator
//! owns every pod field but the few a user may set, and a small schema keeps CEL's cost
//! estimate (and the CRD) small.

// kube's `printcolumn(...)` takes one `type_ = …` per column; clippy reads the repeated
// derive-helper arguments as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The API group of both resources.
pub const GROUP: &str = "zlink.io";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";

/// Environment variable names the operator sets on every node container; `template.env` may
/// not set them (nor any `ZLINK_*` name).
pub const RESERVED_ENV: [&str; 4] = ["POD_IP", "POD_NAME", "POD_NAMESPACE", "POD_UID"];

/// The desired state of one mesh: how many node pods, which image and application version, the
/// Location Store they share, and how a rollout and a shutdown may proceed.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "zlink.io",
    version = "v1alpha1",
    kind = "Mesh",
    namespaced,
    status = "MeshStatus",
    derive = "PartialEq",
    shortname = "zmesh",
    category = "zlink",
    doc = "A zlink mesh: node pods that share one Location Store, rolled out by relocating live objects.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(
        name = "Version",
        type_ = "integer",
        json_path = ".spec.applicationVersion"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("has(self.meshSecretRef) == has(oldSelf.meshSecretRef)")
        .message("meshSecretRef is immutable: it can be neither added nor removed after creation"),
    validation = Rule::new("has(self.adminSecretRef) == has(oldSelf.adminSecretRef)")
        .message("adminSecretRef is immutable: it can be neither added nor removed after creation")
)]
#[serde(rename_all = "camelCase")]
pub struct MeshSpec {
    /// Node pods to run (0 drains the mesh: every pod relocates and is deleted).
    #[schemars(range(min = 0, max = 256))]
    #[serde(default = "default_replicas")]
    pub replicas: i32,
    /// The `zlink-node` image of every node pod.
    #[schemars(length(min = 1, max = 1024))]
    pub image: String,
    /// The application version the nodes announce. It may only grow: a rollback is the old
    /// image under a higher version. A change rolls out with `Relocate(RollingUpdate)`.
    #[schemars(range(min = 0))]
    #[x_kube(validation = Rule::new("self >= oldSelf").message(
        "applicationVersion may only grow: to roll back, deploy the old image under a higher version"
    ))]
    pub application_version: i64,
    /// The Location Store (Redis) of the mesh.
    pub location_store: LocationStore,
    /// The Secret holding the mesh admission key (`mesh-key`); generated when absent.
    /// Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("meshSecretRef is immutable"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mesh_secret_ref: Option<SecretName>,
    /// The Secret holding the HostAdmin token (`admin-token`); generated when absent.
    /// Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("adminSecretRef is immutable"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_secret_ref: Option<SecretName>,
    /// How a rollout proceeds.
    #[serde(default)]
    pub rollout: Rollout,
    /// How long a node pod may take to relocate and drain when it stops.
    #[serde(default)]
    pub shutdown: Shutdown,
    /// The PodDisruptionBudget of the node pods.
    #[serde(default)]
    pub disruption: Disruption,
    /// What a user may set on the node pods.
    #[serde(default)]
    pub template: PodTemplate,
}

fn default_replicas() -> i32 {
    3
}

/// Where the Location Store is, and the store namespace of this mesh in it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocationStore {
    /// The key of a Secret in the Mesh's namespace holding the Redis URL.
    pub redis_url_secret_ref: SecretKeyRef,
    /// The key prefix of this mesh in the store. Immutable: every route and lease lives under
    /// it.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("self == oldSelf").message(
        "locationStore.namespace is immutable: every route and lease of the mesh lives under it"
    ))]
    pub namespace: String,
}

/// One key of one Secret in the resource's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key in it.
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// A Secret in the resource's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretName {
    /// The Secret's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Rollout settings.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// New-version pods started above `replicas` (at least 1: an old pod relocates to a new
    /// one).
    #[serde(default = "one")]
    #[x_kube(validation = Rule::new("self >= 1").message(
        "rollout.maxSurge must be at least 1: a rollout starts a new pod before it relocates an old one"
    ))]
    pub max_surge: i32,
    /// Pods that may be unavailable during a rollout (below `replicas`).
    #[schemars(range(min = 0))]
    #[serde(default)]
    pub max_unavailable: i32,
    /// Stops starting new relocations (one in flight finishes).
    #[serde(default)]
    pub paused: bool,
    /// A new pod not Ready within this many seconds marks the rollout `ProgressDeadlineExceeded`.
    #[schemars(range(min = 1))]
    #[serde(default = "default_progress_deadline")]
    pub progress_deadline_seconds: i32,
    /// `Relocate` attempts per pod before `RelocationFailed`.
    #[schemars(range(min = 1, max = 100))]
    #[serde(default = "default_relocation_attempts")]
    pub relocation_attempts: i32,
}

fn one() -> i32 {
    1
}
fn default_progress_deadline() -> i32 {
    600
}
fn default_relocation_attempts() -> i32 {
    3
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            max_surge: 1,
            max_unavailable: 0,
            paused: false,
            progress_deadline_seconds: default_progress_deadline(),
            relocation_attempts: default_relocation_attempts(),
        }
    }
}

/// Shutdown deadlines of a node pod. The pod's grace period is their sum plus the Message
/// Follow window plus 10 s, since `SafeToShutdown` waits for the follow window.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Shutdown {
    /// `Relocate` deadline (the node's `relocation.shutdown_deadline_ms`).
    #[schemars(range(min = 1, max = 3600))]
    #[serde(default = "default_relocation_deadline")]
    pub relocation_deadline_seconds: i32,
    /// Drain deadline after the relocation.
    #[schemars(range(min = 1, max = 3600))]
    #[serde(default = "default_drain_deadline")]
    pub drain_deadline_seconds: i32,
}

fn default_relocation_deadline() -> i32 {
    60
}
fn default_drain_deadline() -> i32 {
    30
}

impl Default for Shutdown {
    fn default() -> Self {
        Self {
            relocation_deadline_seconds: default_relocation_deadline(),
            drain_deadline_seconds: default_drain_deadline(),
        }
    }
}

/// The PodDisruptionBudget.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// Pods an eviction may take down at once.
    #[schemars(range(min = 0))]
    #[serde(default = "one")]
    pub max_unavailable: i32,
}

impl Default for Disruption {
    fn default() -> Self {
        Self { max_unavailable: 1 }
    }
}

/// What a user may set on the node pods. A change is a new pod revision (rolled out with
/// `Relocate(PlannedMaintenance)` when the version stays).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    /// Extra pod labels (`zlink.io/` keys are the operator's).
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('zlink.io/'))")
        .message("template.labels may not use the zlink.io/ prefix: the operator sets those labels"))]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Extra pod annotations (`zlink.io/` keys are the operator's).
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new("self.all(k, !k.startsWith('zlink.io/'))").message(
        "template.annotations may not use the zlink.io/ prefix: the operator sets those annotations"
    ))]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Node selector of the pods.
    #[schemars(extend("maxProperties" = 64))]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the pods.
    #[schemars(length(max = 64))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Priority class of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Extra container environment. `ZLINK_*` and the pod identity names are the operator's.
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new(
        "self.all(e, !e.name.startsWith('ZLINK_') && !(e.name in ['POD_IP', 'POD_NAME', 'POD_NAMESPACE', 'POD_UID']))"
    ).message(
        "template.env may not set ZLINK_* or POD_IP, POD_NAME, POD_NAMESPACE, POD_UID: the operator sets them (node settings go in the Mesh spec)"
    ))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
}

/// Container resources, as quantities (`"500m"`, `"1Gi"`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// Requests by resource name.
    #[schemars(extend("maxProperties" = 16))]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    /// Limits by resource name.
    #[schemars(extend("maxProperties" = 16))]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

/// A pod toleration.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key (empty with `Exists` = every taint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `Equal` or `Exists`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Taint value for `Equal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute` (empty = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
    /// How long a `NoExecute` taint is tolerated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

/// One extra environment variable: a literal value or a key of a Secret or ConfigMap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)")
    .message("an env entry sets exactly one of value and valueFrom"))]
#[serde(rename_all = "camelCase")]
pub struct EnvVar {
    /// The variable's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// A literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// A key of a Secret or ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvSource>,
}

/// Where an env value comes from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = Rule::new("has(self.secretKeyRef) != has(self.configMapKeyRef)")
    .message("valueFrom names exactly one of secretKeyRef and configMapKeyRef"))]
#[serde(rename_all = "camelCase")]
pub struct EnvSource {
    /// A key of a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<SecretKeyRef>,
    /// A key of a ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<SecretKeyRef>,
}

/// What the operator observed of a mesh.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MeshStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Available`, `Progressing`, `Degraded`, `RolloutBlocked`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Node pods that exist (terminating ones included).
    #[serde(default)]
    pub replicas: i32,
    /// Node pods whose readiness probe passes.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Ready node pods that count towards availability (not relocating away).
    #[serde(default)]
    pub available_replicas: i32,
    /// Node pods of the update revision.
    #[serde(default)]
    pub updated_replicas: i32,
    /// The label selector of the node pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// The revision most pods run before the rollout.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_revision: String,
    /// The revision of the spec.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
    /// The lowest application version a pod runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<i64>,
    /// The application version of the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_version: Option<i64>,
    /// One entry per node pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<PodReport>,
    /// Each channel of the mesh and how many nodes run its weight.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<ChannelReport>,
}

/// One channel as the mesh's nodes report it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ChannelReport {
    /// The channel's name.
    pub name: String,
    /// The weight of the Channel spec.
    pub weight: i32,
    /// Serving nodes whose reported weight equals it.
    pub applied_nodes: i32,
    /// Serving nodes.
    pub nodes: i32,
}

/// A status condition (the shape of `metav1.Condition`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, `Available`, `Progressing`, `Degraded`, `RolloutBlocked` (Mesh) or `Accepted`,
    /// `Applied` (Channel).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase reason (`docs/operator.md` lists them).
    pub reason: String,
    /// What happened, for people.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The generation this condition was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One node pod as the operator sees it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    /// The pod's name.
    pub name: String,
    /// `Pending`, `Starting`, `Serving`, `Relocating`, `Relocated`, `Terminating`, `Failed`.
    pub phase: String,
    /// The node's RID, once it reported one.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rid: String,
    /// Live objects on the node.
    #[serde(default)]
    pub objects: u64,
    /// Why the pod is where it is (a condition reason), when it is not plain.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// One channel's weight in a mesh, applied to every node with `SetChannelWeight` (never a
/// rollout).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "zlink.io",
    version = "v1alpha1",
    kind = "Channel",
    namespaced,
    status = "ChannelStatus",
    derive = "PartialEq",
    shortname = "zch",
    category = "zlink",
    doc = "The weight of one channel of a zlink Mesh.",
    printcolumn(name = "Mesh", type_ = "string", json_path = ".spec.meshRef"),
    printcolumn(name = "Channel", type_ = "string", json_path = ".spec.channelName"),
    printcolumn(name = "Weight", type_ = "integer", json_path = ".spec.weight"),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Applied\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ChannelSpec {
    /// The Mesh (same namespace). Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("meshRef is immutable"))]
    pub mesh_ref: String,
    /// The channel's name in the mesh. Immutable.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("channelName is immutable"))]
    pub channel_name: String,
    /// The placement weight, 0..=10000 (0 = not selected for new work).
    #[serde(default = "default_weight")]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 10000")
        .message("weight must be within 0..=10000 (0 = not selected for new work)"))]
    pub weight: i32,
}

fn default_weight() -> i32 {
    100
}

/// What the operator observed of a channel.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ChannelStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Accepted`, `Applied`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Nodes whose reported weight equals the spec.
    #[serde(default)]
    pub applied_nodes: i32,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::CustomResourceExt as _;

    #[test]
    fn the_mesh_crd_has_its_names_subresources_and_rules() {
        let crd = Mesh::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("meshes.zlink.io"));
        assert_eq!(crd.spec.names.short_names, Some(vec!["zmesh".to_owned()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["zlink".to_owned()]));
        let v = &crd.spec.versions[0];
        let sub = v.subresources.as_ref().unwrap();
        assert!(sub.status.is_some());
        let scale = sub.scale.as_ref().unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(
            scale.label_selector_path.as_deref(),
            Some(".status.selector")
        );
        let text = serde_json::to_string(&crd).unwrap();
        for rule in [
            "self >= oldSelf",
            "self == oldSelf",
            "self >= 1",
            "!e.name.startsWith('ZLINK_')",
            "has(self.meshSecretRef) == has(oldSelf.meshSecretRef)",
        ] {
            assert!(text.contains(rule), "missing rule {rule}");
        }
    }

    #[test]
    fn the_channel_crd_bounds_the_weight_and_fixes_its_names() {
        let crd = Channel::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("channels.zlink.io"));
        assert_eq!(crd.spec.names.short_names, Some(vec!["zch".to_owned()]));
        let text = serde_json::to_string(&crd).unwrap();
        assert!(text.contains("self >= 0 && self <= 10000"));
        assert!(text.contains("meshRef is immutable"));
    }

    #[test]
    fn a_minimal_mesh_spec_takes_the_documented_defaults() {
        let spec: MeshSpec = serde_json::from_value(serde_json::json!({
            "image": "zlink-node:1",
            "applicationVersion": 1,
            "locationStore": {
                "redisUrlSecretRef": {"name": "redis", "key": "url"},
                "namespace": "game",
            },
        }))
        .unwrap();
        assert_eq!(spec.replicas, 3);
        assert_eq!(spec.rollout, Rollout::default());
        assert_eq!(spec.rollout.max_surge, 1);
        assert_eq!(spec.shutdown.relocation_deadline_seconds, 60);
        assert_eq!(spec.disruption.max_unavailable, 1);
        assert!(spec.mesh_secret_ref.is_none());
    }
}
