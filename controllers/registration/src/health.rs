//! Pure condition logic: what a Cluster's `Accepted`, `Joined`, `Ready` and `Schedulable`
//! conditions say, given what the controller observed. No I/O, so every rule is unit-tested.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_api::{ClusterSpec, SyncMode, TaintEffect, conditions, reasons};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

/// What a probe of a push-mode member found.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeOutcome {
    /// `/readyz` answered ok.
    Healthy(MemberFacts),
    /// The member answered, but `/readyz` did not say ok.
    NotReady(String),
    /// No answer: connection refused, timeout, TLS failure, 5xx. May be temporary.
    Unreachable(String),
    /// The member rejected the credentials (401 or 403). Definite.
    Unauthorized(String),
    /// The kubeconfig Secret is missing, lacks the key, or holds no usable kubeconfig. Definite.
    BadCredentials {
        reason: &'static str,
        message: String,
    },
}

/// What a healthy member told about itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberFacts {
    pub kubernetes_version: String,
    pub allocatable: BTreeMap<String, Quantity>,
    /// UID of the member's `kube-system` namespace: its identity.
    pub cluster_id: Option<String>,
}

pub use flotilla_api::condition::Verdict;

/// Whether a verdict is something a user should be warned about (a Warning Event).
pub fn is_bad(verdict: &Verdict) -> bool {
    match verdict.type_ {
        conditions::READY | conditions::JOINED | conditions::ACCEPTED => verdict.status != "True",
        _ => verdict.status == "False",
    }
}

/// Whether the hub accepts the Cluster. Push-mode Clusters are accepted by being created with a
/// kubeconfig; pull-mode ones by `hubAcceptsClient` (or the controller's auto-accept flag).
pub fn accepted(spec: &ClusterSpec, auto_accept: bool, previous: Option<&Condition>) -> Verdict {
    let yes = |msg: &str| Verdict::new(conditions::ACCEPTED, "True", reasons::ACCEPTED, msg);
    match spec.sync_mode {
        SyncMode::Push => {
            yes("push-mode Clusters are accepted by creating them with a kubeconfig Secret")
        }
        SyncMode::Pull if spec.hub_accepts_client => yes("spec.hubAcceptsClient is true"),
        SyncMode::Pull if auto_accept => yes("accepted automatically (--auto-accept)"),
        // Revoked stays revoked (until accepted again), so the reason keeps saying why.
        SyncMode::Pull
            if previous
                .is_some_and(|c| c.status == "True" || c.reason == reasons::ACCEPTANCE_REVOKED) =>
        {
            Verdict::new(
                conditions::ACCEPTED,
                "False",
                reasons::ACCEPTANCE_REVOKED,
                "spec.hubAcceptsClient was set to false: the agent's access to the hub is revoked",
            )
        }
        SyncMode::Pull => Verdict::new(
            conditions::ACCEPTED,
            "False",
            reasons::AWAITING_ACCEPTANCE,
            "waiting for a hub admin to set spec.hubAcceptsClient: true",
        ),
    }
}

/// Whether new work may be placed on the member.
pub fn schedulable(spec: &ClusterSpec) -> Verdict {
    if spec.unschedulable {
        return Verdict::new(
            conditions::SCHEDULABLE,
            "False",
            reasons::CORDONED,
            "spec.unschedulable is true: no new work is placed on this member",
        );
    }
    if spec.taints.is_empty() {
        return Verdict::new(
            conditions::SCHEDULABLE,
            "True",
            reasons::SCHEDULABLE,
            "no cordon, no taints",
        );
    }
    let taints: Vec<String> = spec
        .taints
        .iter()
        .map(|t| {
            let effect = match t.effect {
                TaintEffect::NoSchedule => "NoSchedule",
                TaintEffect::PreferNoSchedule => "PreferNoSchedule",
                TaintEffect::NoExecute => "NoExecute",
            };
            match &t.value {
                Some(v) => format!("{}={v}:{effect}", t.key),
                None => format!("{}:{effect}", t.key),
            }
        })
        .collect();
    Verdict::new(
        conditions::SCHEDULABLE,
        "True",
        reasons::TAINTED,
        format!(
            "only Placements that tolerate these taints place work here: {}",
            taints.join(", ")
        ),
    )
}

/// Inputs of the health verdicts that do not come from the probe.
#[derive(Clone, Debug)]
pub struct Timing {
    pub now: Timestamp,
    /// The last successful probe or heartbeat, if any.
    pub last_heartbeat: Option<Timestamp>,
    /// When the Cluster was created: the grace period of a member never reached counts from here.
    pub created: Option<Timestamp>,
    pub grace: Duration,
}

impl Timing {
    /// How long since the member was last seen healthy (or since creation), and whether that
    /// exceeds the grace period.
    fn silence(&self) -> (Duration, bool) {
        let since = self.last_heartbeat.or(self.created).unwrap_or(self.now);
        let silent = self.now.duration_since(since).unsigned_abs();
        (silent, silent >= self.grace)
    }
}

fn seconds(d: Duration) -> u64 {
    d.as_secs()
}

/// `Joined` and `Ready` of a push-mode member after a probe.
///
/// - healthy: Joined and Ready are True;
/// - definite errors (bad credentials, rejected credentials, not ready): Ready is False with the
///   precise reason; Joined stays True once it was, else False with that reason;
/// - unreachable: within the grace period since the last success Ready keeps its status, after
///   it Ready becomes Unknown — a member that merely failed a probe or two is not declared down.
pub fn push_health(
    outcome: &ProbeOutcome,
    previous_ready: Option<&Condition>,
    previously_joined: bool,
    timing: &Timing,
) -> (Verdict, Verdict) {
    let joined_true = Verdict::new(
        conditions::JOINED,
        "True",
        reasons::JOINED,
        "the hub reached the member",
    );
    let joined_or = |reason: &'static str, message: &str| {
        if previously_joined {
            joined_true.clone()
        } else {
            Verdict::new(conditions::JOINED, "False", reason, message)
        }
    };
    match outcome {
        ProbeOutcome::Healthy(facts) => (
            joined_true.clone(),
            Verdict::new(
                conditions::READY,
                "True",
                reasons::REACHABLE,
                format!(
                    "the member answered /readyz ok (Kubernetes {})",
                    facts.kubernetes_version
                ),
            ),
        ),
        ProbeOutcome::NotReady(msg) => (
            joined_true.clone(),
            Verdict::new(
                conditions::READY,
                "False",
                reasons::NOT_READY,
                format!("/readyz: {msg}"),
            ),
        ),
        ProbeOutcome::Unauthorized(msg) => {
            let m = format!("the member rejected the credentials of the kubeconfig Secret: {msg}");
            (
                joined_or(reasons::UNAUTHORIZED, &m),
                Verdict::new(conditions::READY, "False", reasons::UNAUTHORIZED, m),
            )
        }
        ProbeOutcome::BadCredentials { reason, message } => (
            joined_or(reason, message),
            Verdict::new(conditions::READY, "False", reason, message.clone()),
        ),
        ProbeOutcome::Unreachable(msg) => {
            let (silent, expired) = timing.silence();
            let joined = joined_or(
                reasons::UNREACHABLE,
                &format!("the member was never reached: {msg}"),
            );
            let ready = match previous_ready {
                Some(prev) if !expired && prev.status != "Unknown" => Verdict {
                    type_: conditions::READY,
                    status: if prev.status == "True" {
                        "True"
                    } else {
                        "False"
                    },
                    reason: static_reason(&prev.reason),
                    message: prev.message.clone(),
                },
                _ => Verdict::new(
                    conditions::READY,
                    "Unknown",
                    reasons::UNREACHABLE,
                    format!("no successful probe for {}s: {msg}", seconds(silent)),
                ),
            };
            (joined, ready)
        }
    }
}

/// `Joined` and `Ready` of a pull-mode member from its agent's heartbeat Lease.
/// `lease_renewed` is the Lease's renewTime, `None` when there is no Lease yet.
pub fn pull_health(
    accepted: bool,
    lease_renewed: Option<Timestamp>,
    timing: &Timing,
) -> (Verdict, Verdict) {
    if !accepted {
        return (
            Verdict::new(
                conditions::JOINED,
                "False",
                reasons::AWAITING_ACCEPTANCE,
                "the Cluster is not accepted",
            ),
            Verdict::new(
                conditions::READY,
                "Unknown",
                reasons::AWAITING_ACCEPTANCE,
                "the Cluster is not accepted",
            ),
        );
    }
    let Some(renewed) = lease_renewed else {
        let m = "waiting for the agent's first heartbeat";
        return (
            Verdict::new(conditions::JOINED, "False", reasons::AWAITING_AGENT, m),
            Verdict::new(conditions::READY, "Unknown", reasons::AWAITING_AGENT, m),
        );
    };
    let joined = Verdict::new(
        conditions::JOINED,
        "True",
        reasons::JOINED,
        "the agent renews its heartbeat Lease",
    );
    let age = timing.now.duration_since(renewed).unsigned_abs();
    let ready = if age >= timing.grace {
        Verdict::new(
            conditions::READY,
            "Unknown",
            reasons::HEARTBEAT_EXPIRED,
            format!("no heartbeat from the agent for {}s", seconds(age)),
        )
    } else {
        Verdict::new(
            conditions::READY,
            "True",
            reasons::REACHABLE,
            "the agent's heartbeat is current",
        )
    };
    (joined, ready)
}

/// Reasons come back from the API as strings; map known ones to their constants so a verdict
/// carried over keeps its reason.
fn static_reason(reason: &str) -> &'static str {
    [
        reasons::REACHABLE,
        reasons::UNREACHABLE,
        reasons::UNAUTHORIZED,
        reasons::INVALID_KUBECONFIG,
        reasons::SECRET_NOT_FOUND,
        reasons::SECRET_KEY_NOT_FOUND,
        reasons::NOT_READY,
        reasons::HEARTBEAT_EXPIRED,
        reasons::DUPLICATE_NAME,
    ]
    .into_iter()
    .find(|r| *r == reason)
    .unwrap_or(reasons::UNREACHABLE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::Taint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("timestamp")
    }

    fn timing(now: i64, last: Option<i64>) -> Timing {
        Timing {
            now: at(now),
            last_heartbeat: last.map(at),
            created: Some(at(0)),
            grace: Duration::from_secs(40),
        }
    }

    fn ready(status: &str, reason: &str) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: "previous".into(),
            last_transition_time: Time(at(0)),
            observed_generation: None,
        }
    }

    fn health_condition(v: &Verdict) -> Condition {
        v.into_condition(at(0), None)
    }

    fn healthy() -> ProbeOutcome {
        ProbeOutcome::Healthy(MemberFacts {
            kubernetes_version: "v1.37.2".into(),
            ..MemberFacts::default()
        })
    }

    #[test]
    fn a_healthy_probe_joins_and_readies() {
        let (j, r) = push_health(&healthy(), None, false, &timing(5, None));
        assert_eq!((j.status, j.reason), ("True", reasons::JOINED));
        assert_eq!((r.status, r.reason), ("True", reasons::REACHABLE));
        assert!(r.message.contains("v1.37.2"));
    }

    #[test]
    fn unreachable_within_grace_keeps_ready() {
        let prev = ready("True", reasons::REACHABLE);
        let (j, r) = push_health(
            &ProbeOutcome::Unreachable("refused".into()),
            Some(&prev),
            true,
            &timing(30, Some(0)),
        );
        assert_eq!(j.status, "True");
        assert_eq!((r.status, r.reason), ("True", reasons::REACHABLE));
    }

    #[test]
    fn unreachable_past_grace_is_unknown() {
        let prev = ready("True", reasons::REACHABLE);
        let (_, r) = push_health(
            &ProbeOutcome::Unreachable("refused".into()),
            Some(&prev),
            true,
            &timing(41, Some(0)),
        );
        assert_eq!((r.status, r.reason), ("Unknown", reasons::UNREACHABLE));
        assert!(
            r.message.contains("41s") && r.message.contains("refused"),
            "{}",
            r.message
        );
    }

    #[test]
    fn a_member_never_reached_is_unknown_after_grace_from_creation() {
        let (j, r) = push_health(
            &ProbeOutcome::Unreachable("timeout".into()),
            None,
            false,
            &timing(10, None),
        );
        assert_eq!((j.status, j.reason), ("False", reasons::UNREACHABLE));
        assert_eq!(r.status, "Unknown");
    }

    #[test]
    fn definite_errors_are_false_with_their_reason() {
        let bad = ProbeOutcome::BadCredentials {
            reason: reasons::SECRET_NOT_FOUND,
            message: "Secret flotilla-system/m1 not found".into(),
        };
        let (j, r) = push_health(&bad, None, false, &timing(1, None));
        assert_eq!((j.status, j.reason), ("False", reasons::SECRET_NOT_FOUND));
        assert_eq!((r.status, r.reason), ("False", reasons::SECRET_NOT_FOUND));
        let (j, r) = push_health(
            &ProbeOutcome::Unauthorized("401".into()),
            None,
            true,
            &timing(1, Some(0)),
        );
        assert_eq!(j.status, "True", "a member that joined once stays joined");
        assert_eq!((r.status, r.reason), ("False", reasons::UNAUTHORIZED));
        let (_, r) = push_health(
            &ProbeOutcome::NotReady("etcd failed".into()),
            None,
            true,
            &timing(1, Some(0)),
        );
        assert_eq!((r.status, r.reason), ("False", reasons::NOT_READY));
    }

    #[test]
    fn pull_health_follows_the_lease() {
        let (j, r) = pull_health(false, None, &timing(1, None));
        assert_eq!((j.status, r.status), ("False", "Unknown"));
        let (j, r) = pull_health(true, None, &timing(1, None));
        assert_eq!(
            (j.reason, r.reason),
            (reasons::AWAITING_AGENT, reasons::AWAITING_AGENT)
        );
        let (j, r) = pull_health(true, Some(at(100)), &timing(120, None));
        assert_eq!((j.status, r.status), ("True", "True"));
        let (_, r) = pull_health(true, Some(at(100)), &timing(140, None));
        assert_eq!(
            (r.status, r.reason),
            ("Unknown", reasons::HEARTBEAT_EXPIRED)
        );
    }

    fn spec(mode: SyncMode, accepts: bool) -> ClusterSpec {
        ClusterSpec {
            sync_mode: mode,
            kubeconfig_secret_ref: None,
            read_only_kubeconfig_secret_ref: None,
            hub_accepts_client: accepts,
            unschedulable: false,
            taints: vec![],
            weight: 1,
            allow_insecure_transport: false,
        }
    }

    #[test]
    fn acceptance() {
        assert_eq!(
            accepted(&spec(SyncMode::Push, false), false, None).status,
            "True"
        );
        assert_eq!(
            accepted(&spec(SyncMode::Pull, true), false, None).status,
            "True"
        );
        assert_eq!(
            accepted(&spec(SyncMode::Pull, false), true, None).status,
            "True"
        );
        let waiting = accepted(&spec(SyncMode::Pull, false), false, None);
        assert_eq!(
            (waiting.status, waiting.reason),
            ("False", reasons::AWAITING_ACCEPTANCE)
        );
        let mut was = ready("True", reasons::ACCEPTED);
        was.type_ = "Accepted".into();
        let revoked = accepted(&spec(SyncMode::Pull, false), false, Some(&was));
        assert_eq!(revoked.reason, reasons::ACCEPTANCE_REVOKED);
        let still = accepted(
            &spec(SyncMode::Pull, false),
            false,
            Some(&health_condition(&revoked)),
        );
        assert_eq!(
            still.reason,
            reasons::ACCEPTANCE_REVOKED,
            "revoked stays revoked"
        );
    }

    #[test]
    fn cordon_and_taints() {
        let mut s = spec(SyncMode::Push, false);
        assert_eq!(schedulable(&s).reason, reasons::SCHEDULABLE);
        s.taints = vec![Taint {
            key: "example.com/maintenance".into(),
            value: Some("true".into()),
            effect: TaintEffect::NoSchedule,
            time_added: None,
        }];
        let v = schedulable(&s);
        assert_eq!((v.status, v.reason), ("True", reasons::TAINTED));
        assert!(
            v.message
                .contains("example.com/maintenance=true:NoSchedule"),
            "{}",
            v.message
        );
        s.unschedulable = true;
        let v = schedulable(&s);
        assert_eq!((v.status, v.reason), ("False", reasons::CORDONED));
        assert!(is_bad(&v));
    }
}
