//! Pure: whether a placed Service may keep its `spec.externalIPs` (issue class CVE-2020-8554).
//!
//! A Service with external IPs makes every node of its cluster send the traffic of those
//! addresses to its pods, whoever the addresses belong to. The hub has no nodes: there it takes
//! nobody's traffic, so a tenant may be allowed to write one there. Placed, it would take those
//! addresses' traffic from every pod and node of every member. So such a Service is placed only
//! where the hub admin annotated the namespace [`ALLOW_EXTERNAL_IPS`]; otherwise it is held back
//! like a binding that grants too much: placed nowhere, its copies left as they are.

use serde_json::Value;

use crate::pod_security::Verdict;

/// On a hub Namespace, set by an admin: `"true"` lets its Placements place Services with
/// `spec.externalIPs`.
pub const ALLOW_EXTERNAL_IPS: &str = flotilla_api::annotations::ALLOW_EXTERNAL_IPS;

/// Whether `service` may be placed, `allowed` saying whether its namespace carries
/// [`ALLOW_EXTERNAL_IPS`].
pub fn judge(service: &Value, allowed: bool) -> Verdict {
    let ips: Vec<&str> = service["spec"]["externalIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if ips.is_empty() || allowed {
        return Verdict::Allowed;
    }
    Verdict::Violates(format!(
        "its spec.externalIPs ({}) would take those addresses' traffic in every member; an admin \
         may allow it by annotating the hub namespace {ALLOW_EXTERNAL_IPS}: \"true\"",
        ips.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(external: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"ports": [{"port": 80}], "externalIPs": external}})
    }

    #[test]
    fn a_service_with_external_ips_is_held_back_unless_an_admin_allows_it() {
        let held = service(json!(["10.0.0.1", "203.0.113.7"]));
        let Verdict::Violates(why) = judge(&held, false) else {
            panic!("held back")
        };
        assert!(
            why.contains("spec.externalIPs (10.0.0.1, 203.0.113.7)"),
            "{why}"
        );
        assert!(why.contains(ALLOW_EXTERNAL_IPS), "{why}");
        assert_eq!(judge(&held, true), Verdict::Allowed);
    }

    #[test]
    fn a_service_without_external_ips_is_placed() {
        assert_eq!(judge(&service(json!([])), false), Verdict::Allowed);
        assert_eq!(judge(&service(Value::Null), false), Verdict::Allowed);
    }
}
