//! A container's environment as a kubelet computes it (pure): literal values, `fieldRef`,
//! `secretKeyRef` and `configMapKeyRef`, and `$(VAR)` references to variables defined earlier
//! in the list (`$$` escapes a `$`; an undefined reference stays as written), on a cleared
//! environment.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, Pod};

/// Why the environment cannot be built (the kubelet's `CreateContainerConfigError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the environment may read: Secrets and ConfigMaps of the pod's namespace, by name then
/// key, and the pod IP the kubelet gave it.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Secret data (decoded) by Secret name, then key.
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// ConfigMap data by name, then key.
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    /// The pod IP.
    pub pod_ip: String,
}

/// Expands `$(NAME)` in `s` from `vars` (Kubernetes' rules: `$$` is a literal `$`; a reference
/// to an undefined name is left as written).
pub fn expand(s: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'('
                && let Some(end) = s[i + 2..].find(')')
            {
                let name = &s[i + 2..i + 2 + end];
                match vars.get(name) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&s[i..i + 3 + end]),
                }
                i += 3 + end;
                continue;
            }
        }
        let ch = s[i..].chars().next().unwrap_or('\0');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

fn field(pod: &Pod, path: &str, src: &Sources) -> Result<String, ConfigError> {
    let m = &pod.metadata;
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.hostIP" => src.pod_ip.clone(),
        other => {
            if let Some(key) = other
                .strip_prefix("metadata.labels['")
                .and_then(|k| k.strip_suffix("']"))
            {
                return Ok(m
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(key))
                    .cloned()
                    .unwrap_or_default());
            }
            return Err(ConfigError(format!("fieldRef {other:?} is not supported")));
        }
    })
}

/// Key `key` of object `name` in `objects` (a Secret's or ConfigMap's data): `None` when it is
/// missing and `optional`.
fn key_ref(
    objects: &BTreeMap<String, BTreeMap<String, String>>,
    what: &str,
    name: &str,
    key: &str,
    optional: Option<bool>,
    env: &str,
) -> Result<Option<String>, ConfigError> {
    match objects.get(name).and_then(|o| o.get(key)) {
        Some(v) => Ok(Some(v.clone())),
        None if optional.unwrap_or(false) => Ok(None),
        None => Err(ConfigError(format!(
            "{what} {name:?} key {key:?} not found (env {env})"
        ))),
    }
}

/// The environment of a container with `env` in `pod`, in order.
///
/// # Errors
/// A missing Secret, ConfigMap or key (unless `optional`), or an unsupported source.
pub fn resolve(
    pod: &Pod,
    env: &[EnvVar],
    src: &Sources,
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for e in env {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => Some(expand(v, &vars)),
            (None, None) => Some(String::new()),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    Some(field(pod, &f.field_path, src)?)
                } else if let Some(k) = &from.secret_key_ref {
                    key_ref(&src.secrets, "secret", &k.name, &k.key, k.optional, &e.name)?
                } else if let Some(k) = &from.config_map_key_ref {
                    key_ref(
                        &src.config_maps,
                        "configmap",
                        &k.name,
                        &k.key,
                        k.optional,
                        &e.name,
                    )?
                } else {
                    return Err(ConfigError(format!(
                        "env {}: only fieldRef, secretKeyRef and configMapKeyRef are supported",
                        e.name
                    )));
                }
            }
        };
        if let Some(v) = value {
            vars.insert(e.name.clone(), v.clone());
            out.retain(|(n, _)| n != &e.name);
            out.push((e.name.clone(), v));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c"}], "nodeName": "n1"},
        }))
        .unwrap()
    }

    fn env(json: serde_json::Value) -> Vec<EnvVar> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn values_fields_secrets_and_references_resolve_in_order() {
        let mut src = Sources {
            pod_ip: "127.10.0.7".into(),
            ..Sources::default()
        };
        src.secrets.insert(
            "redis".into(),
            [("url".into(), "redis://127.0.0.1:1".into())].into(),
        );
        src.config_maps
            .insert("cm".into(), [("level".into(), "debug".into())].into());
        let e = env(serde_json::json!([
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "LISTEN", "value": "$(POD_IP):7070"},
            {"name": "LATER", "value": "$(UNDEFINED)-$$(POD_IP)-$(NEXT)"},
            {"name": "NEXT", "value": "n"},
            {"name": "URL", "valueFrom": {"secretKeyRef": {"name": "redis", "key": "url"}}},
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "level"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": true}}},
            {"name": "EMPTY"},
        ]));
        let got = resolve(&pod(), &e, &src).unwrap();
        let m: BTreeMap<_, _> = got.iter().cloned().collect();
        assert_eq!(m["POD_IP"], "127.10.0.7");
        assert_eq!(m["NAME"], "p");
        assert_eq!(m["APP"], "x");
        assert_eq!(m["LISTEN"], "127.10.0.7:7070");
        assert_eq!(m["LATER"], "$(UNDEFINED)-$(POD_IP)-$(NEXT)");
        assert_eq!(m["URL"], "redis://127.0.0.1:1");
        assert_eq!(m["LEVEL"], "debug");
        assert_eq!(m["EMPTY"], "");
        assert!(!m.contains_key("OPT"));
        assert_eq!(got[0].0, "POD_IP", "order kept");
    }

    #[test]
    fn a_missing_key_or_an_unsupported_source_is_a_config_error() {
        let src = Sources::default();
        let e = env(serde_json::json!([
            {"name": "URL", "valueFrom": {"secretKeyRef": {"name": "redis", "key": "url"}}},
        ]));
        let err = resolve(&pod(), &e, &src).unwrap_err();
        assert!(err.0.contains("\"redis\" key \"url\" not found"), "{err}");
        let e = env(serde_json::json!([
            {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.phase"}}},
        ]));
        assert!(
            resolve(&pod(), &e, &src)
                .unwrap_err()
                .0
                .contains("not supported")
        );
        let e = env(serde_json::json!([
            {"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        ]));
        assert!(resolve(&pod(), &e, &src).is_err());
    }

    #[test]
    fn expansion_edge_cases() {
        let vars: BTreeMap<String, String> = [("A".to_owned(), "1".to_owned())].into();
        assert_eq!(expand("$(A)$(A)", &vars), "11");
        assert_eq!(expand("$", &vars), "$");
        assert_eq!(expand("$(A", &vars), "$(A");
        assert_eq!(expand("x$$y", &vars), "x$y");
        assert_eq!(expand("é$(A)ü", &vars), "é1ü");
    }
}
