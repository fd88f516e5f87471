//! Shared by the operator e2e tests: installing the CRDs.

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, CustomResourceExt as _};
use zlink_operator::crd::{Channel, Mesh};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Applies both CRDs (once per test binary is enough, but applying is idempotent) and waits
/// until the API server serves them.
pub async fn install_crds(client: Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    for crd in [Mesh::crd(), Channel::crd()] {
        let name = crd.metadata.name.clone().context("CRD name")?;
        crds.patch(
            &name,
            &PatchParams::apply("zlink-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .with_context(|| format!("applying {name}"))?;
        tokio::time::timeout(TIMEOUT, async {
            loop {
                let crd = crds.get(&name).await?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    return anyhow::Ok(());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .with_context(|| format!("{name} was not Established in time"))??;
    }
    Ok(())
}
