//! Smoke test of the Kubernetes control plane that `scripts/k8s-env` runs (etcd and
//! kube-apiserver built from Go modules): the API features the operator will rely on work
//! against the real API server, not a mock.
//!
//! Skipped with a message when the tools are not built and neither `CI=true` nor
//! `ZLINK_K8S_REQUIRED=1` is set; see `zlink_e2e::k8s`.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;
use zlink_e2e::k8s::{self, TestNamespace};

const GROUP: &str = "smoke.zlink.test";
const VERSION: &str = "v1";
const KIND: &str = "SmokeWidget";
const PLURAL: &str = "smokewidgets";
const CRD_NAME: &str = "smokewidgets.smoke.zlink.test";
const TIMEOUT: Duration = Duration::from_secs(30);

// The Kubernetes minor that the k8s-openapi feature selects (exactly one of these is compiled).
k8s_openapi::k8s_if_1_33! { const K8S_OPENAPI_MINOR: &str = "33"; }
k8s_openapi::k8s_if_1_34! { const K8S_OPENAPI_MINOR: &str = "34"; }
k8s_openapi::k8s_if_1_35! { const K8S_OPENAPI_MINOR: &str = "35"; }
k8s_openapi::k8s_if_1_36! { const K8S_OPENAPI_MINOR: &str = "36"; }
k8s_openapi::k8s_if_1_37! { const K8S_OPENAPI_MINOR: &str = "37"; }

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// Applies the CRD by server-side apply and waits until the API server serves it.
async fn apply_crd(client: kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": { "name": CRD_NAME },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "plural": PLURAL,
                "singular": "smokewidget",
                "listKind": "SmokeWidgetList",
            },
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": { "size": { "type": "integer", "minimum": 1 } },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "phase": { "type": "string", "enum": ["Pending", "Ready"] },
                                "observedGeneration": { "type": "integer", "format": "int64" },
                            },
                        },
                    },
                }},
            }],
        },
    }))?;
    crds.patch(
        CRD_NAME,
        &PatchParams::apply("zlink-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .context("applying the CRD")?;

    // The apiextensions controllers inside kube-apiserver accept the names and establish it.
    tokio::time::timeout(TIMEOUT, async {
        loop {
            let crd = crds.get(CRD_NAME).await?;
            let established = crd
                .status
                .as_ref()
                .and_then(|status| status.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                return anyhow::Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .context("the CRD was not Established in time")?
}

fn phase(object: &DynamicObject) -> Option<&str> {
    object.data.get("status")?.get("phase")?.as_str()
}

#[tokio::test]
async fn server_version_matches_k8s_openapi_feature() -> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let client = plane.client().await?;
    let info = client.apiserver_version().await?;
    let minor = info.minor.trim_end_matches('+');
    let feature_minor = K8S_OPENAPI_MINOR;
    ensure!(
        info.major == "1" && minor == feature_minor,
        "kube-apiserver is {} but k8s-openapi is built for 1.{feature_minor}: keep the \
         k8s-openapi feature in Cargo.toml and K8S_VERSION in scripts/k8s-tools in step",
        info.git_version
    );
    Ok(())
}

#[tokio::test]
async fn crd_custom_object_status_apply_and_watch() -> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns = plane.namespace("smoke-crd").await?;
    apply_crd(ns.client()).await?;

    let resource = widget_resource();
    let widgets: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &resource);

    // Watch from the current resource version, before creating anything.
    let list = widgets.list(&ListParams::default()).await?;
    ensure!(list.items.is_empty(), "fresh namespace has widgets");
    let version = list
        .metadata
        .resource_version
        .context("list has no resourceVersion")?;
    let mut events = widgets
        .watch(&WatchParams::default().timeout(60), &version)
        .await?
        .boxed();

    let mut widget = DynamicObject::new("w1", &resource).within(ns.name());
    widget.data = json!({ "spec": { "size": 3 } });
    let created = widgets.create(&PostParams::default(), &widget).await?;
    ensure!(created.metadata.generation == Some(1));
    ensure!(phase(&created).is_none(), "status set on create");

    // Status through the status subresource, by server-side apply.
    let status_patch = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "metadata": { "name": "w1" },
        "status": { "phase": "Ready", "observedGeneration": 1 },
    });
    let patched = widgets
        .patch_status(
            "w1",
            &PatchParams::apply("zlink-e2e-status").force(),
            &Patch::Apply(&status_patch),
        )
        .await
        .context("server-side apply of the status")?;
    ensure!(
        phase(&patched) == Some("Ready"),
        "status not applied: {patched:?}"
    );
    ensure!(
        patched.data["spec"]["size"] == 3,
        "spec changed by a status patch"
    );
    ensure!(
        patched.metadata.generation == Some(1),
        "a status change bumped the generation"
    );
    let status_manager = patched
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|entry| entry.manager.as_deref() == Some("zlink-e2e-status"))
        .context("no managedFields entry for the status field manager")?;
    ensure!(status_manager.operation.as_deref() == Some("Apply"));
    ensure!(status_manager.subresource.as_deref() == Some("status"));

    // The main resource ignores status, and the schema is enforced.
    let spec_only = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "size": 4 }, "status": { "phase": "Pending" } })),
        )
        .await?;
    ensure!(spec_only.metadata.generation == Some(2));
    ensure!(
        phase(&spec_only) == Some("Ready"),
        "status written through the main resource"
    );
    let invalid = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "size": 0 } })),
        )
        .await;
    match invalid {
        Err(kube::Error::Api(status)) if status.code == 422 => {}
        other => bail!("an invalid spec was not rejected with 422: {other:?}"),
    }

    // The watch saw the creation, the status change and the spec change, in order.
    let mut seen = Vec::new();
    tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = events.try_next().await? {
            match event {
                WatchEvent::Added(object) | WatchEvent::Modified(object) => {
                    let generation = object.metadata.generation.unwrap_or_default();
                    seen.push((generation, phase(&object).map(str::to_owned)));
                    if generation == 2 {
                        break;
                    }
                }
                WatchEvent::Error(error) => bail!("watch error: {error:?}"),
                WatchEvent::Bookmark(_) | WatchEvent::Deleted(_) => {}
            }
        }
        anyhow::Ok(())
    })
    .await
    .context("the watch did not deliver the changes in time")??;
    ensure!(
        seen == [
            (1, None),
            (1, Some("Ready".to_owned())),
            (2, Some("Ready".to_owned()))
        ],
        "unexpected watch events: {seen:?}"
    );
    Ok(())
}

#[tokio::test]
async fn pod_is_stored_pending_and_deleted() -> anyhow::Result<()> {
    let Some(plane) = k8s::control_plane() else {
        return Ok(());
    };
    let ns: TestNamespace = plane.namespace("smoke-pod").await?;
    let pods: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "p1", "labels": { "app": "smoke" } },
        "spec": {
            "containers": [{ "name": "main", "image": "zlink.invalid/never-pulled:0" }],
        },
    }))?;
    let created = pods.create(&PostParams::default(), &pod).await?;
    let status = created.status.as_ref().context("pod has no status")?;
    ensure!(status.phase.as_deref() == Some("Pending"), "{status:?}");
    let spec = created.spec.as_ref().context("pod has no spec")?;
    ensure!(
        spec.node_name.is_none(),
        "no scheduler, yet the pod is bound"
    );
    // Admission ran: the ServiceAccount plugin filled in the account the harness created.
    ensure!(spec.service_account_name.as_deref() == Some("default"));

    // Nothing runs it: a while later it is still Pending and unscheduled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let again = pods.get("p1").await?;
    ensure!(again.status.and_then(|s| s.phase).as_deref() == Some("Pending"));

    // An unscheduled pod is deleted at once, with no kubelet to confirm.
    pods.delete("p1", &DeleteParams::default()).await?;
    tokio::time::timeout(TIMEOUT, async {
        while pods.get_opt("p1").await?.is_some() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok(())
    })
    .await
    .context("the pod was not deleted in time")??;
    Ok(())
}
