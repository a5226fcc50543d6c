//! Probing a push-mode member: `/readyz`, `/version`, its Nodes' allocatable resources and its
//! identity, bounded by a timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::health::{MemberFacts, ProbeOutcome};

/// Probes the member behind `client`; never takes longer than `timeout`.
pub async fn probe(client: &Client, timeout: Duration) -> ProbeOutcome {
    match tokio::time::timeout(timeout, probe_inner(client)).await {
        Ok(outcome) => outcome,
        Err(_) => ProbeOutcome::Unreachable(format!("no answer within {}s", timeout.as_secs())),
    }
}

fn classify(error: kube::Error, what: &str) -> ProbeOutcome {
    match &error {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => {
            ProbeOutcome::Unauthorized(format!("{what}: {} {}", s.code, s.reason))
        }
        kube::Error::Api(s) if s.code >= 500 => {
            ProbeOutcome::NotReady(format!("{what}: {} {}", s.code, s.message))
        }
        kube::Error::Api(s) => ProbeOutcome::NotReady(format!("{what}: {} {}", s.code, s.message)),
        _ => ProbeOutcome::Unreachable(format!("{what}: {error}")),
    }
}

async fn probe_inner(client: &Client) -> ProbeOutcome {
    let readyz = http::Request::get("/readyz").body(Vec::new());
    let Ok(readyz) = readyz else {
        return ProbeOutcome::Unreachable("cannot build the /readyz request".into());
    };
    match client.request_text(readyz).await {
        Ok(body) if body.trim() == "ok" => {}
        Ok(body) => return ProbeOutcome::NotReady(body.trim().chars().take(200).collect()),
        Err(e) => return classify(e, "GET /readyz"),
    }
    let version = match client.apiserver_version().await {
        Ok(v) => v.git_version,
        Err(e) => return classify(e, "GET /version"),
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let allocatable = match nodes.list(&ListParams::default()).await {
        Ok(list) => sum_allocatable(
            list.items
                .iter()
                .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()),
        ),
        Err(e) => return classify(e, "listing Nodes"),
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let cluster_id = match namespaces.get_opt("kube-system").await {
        Ok(ns) => ns.and_then(|n| n.metadata.uid),
        Err(e) => return classify(e, "reading namespace kube-system"),
    };
    ProbeOutcome::Healthy(MemberFacts {
        kubernetes_version: version,
        allocatable,
        cluster_id,
    })
}

/// Sums resource quantities per resource name. Quantities that cannot be parsed are skipped.
pub fn sum_allocatable<'a>(
    maps: impl Iterator<Item = &'a BTreeMap<String, Quantity>>,
) -> BTreeMap<String, Quantity> {
    let mut sums: BTreeMap<String, (i128, bool)> = BTreeMap::new();
    for map in maps {
        for (name, q) in map {
            if let Some((milli, binary)) = parse_quantity(&q.0) {
                let entry = sums.entry(name.clone()).or_insert((0, binary));
                entry.0 = entry.0.saturating_add(milli);
                entry.1 &= binary;
            }
        }
    }
    sums.into_iter()
        .map(|(name, (milli, binary))| (name, Quantity(format_quantity(milli, binary))))
        .collect()
}

pub use flotilla_api::quantity::{format_quantity, parse_quantity};

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
            .collect()
    }

    #[test]
    fn parses_quantities() {
        assert_eq!(parse_quantity("16"), Some((16_000, false)));
        assert_eq!(parse_quantity("500m"), Some((500, false)));
        assert_eq!(parse_quantity("64Gi"), Some((64 * (1 << 30) * 1000, true)));
        assert_eq!(parse_quantity("1.5"), Some((1500, false)));
        assert_eq!(parse_quantity("12 parsecs"), None);
    }

    #[test]
    fn sums_node_allocatable() {
        let a = q(&[("cpu", "16"), ("memory", "64Gi"), ("pods", "250")]);
        let b = q(&[("cpu", "500m"), ("memory", "64Gi"), ("pods", "250")]);
        let sum = sum_allocatable([&a, &b].into_iter());
        assert_eq!(sum["cpu"].0, "16500m");
        assert_eq!(sum["memory"].0, "128Gi");
        assert_eq!(sum["pods"].0, "500");
    }
}
