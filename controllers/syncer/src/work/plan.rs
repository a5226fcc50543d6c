//! What one pass over a Work decides, with no I/O: which manifests to apply and which objects to
//! remove ([`plan`]), then — from what the member answered — the Work's conditions, which of
//! them are announced, and when the Work is looked at again ([`judge`]).

use std::time::Duration;

use flotilla_api::{ManifestIdentity, Work, WorkStatus, conditions, reasons};
use flotilla_interpreter::HealthRule;

use crate::apply::Outcome;
use crate::manifest::{Prepared, prepare, removed};
use crate::status::{Verdict, work_conditions};
use crate::targets::Unavailable;

#[cfg(test)]
mod tests;

/// How soon a Work is looked at again while objects it no longer names are being deleted.
pub const PRUNE_RECHECK: Duration = Duration::from_secs(2);

/// How soon a Work whose member could not be written to is looked at again.
pub const UNAVAILABLE_RECHECK: Duration = Duration::from_secs(10);

/// The longest a Work that is not wholly applied waits before it is tried again: a conflicting
/// object may have gone, a member may have come back.
pub const NOT_APPLIED_RECHECK: Duration = Duration::from_secs(10);

/// What a pass over a Work does.
pub enum Plan {
    /// Nothing: a newer generation of the Work is on its way (its own pass follows), or the
    /// Work is gone.
    Nothing,
    /// The member cannot be written to: the Work says so, and nothing changes anywhere else.
    Unavailable {
        /// The `Applied` condition (`Unknown`, `ClusterUnavailable`).
        applied: Verdict,
        /// Whether it is news (a Warning Event), or was said already.
        announce: bool,
    },
    Apply(Applying),
}

/// The manifests of a Work to apply into a member that answers.
pub struct Applying {
    /// Those that can be applied, in order.
    pub ready: Vec<Prepared>,
    /// Why each of the others cannot, with its index in `spec.manifests` (none for a Work that
    /// is not whole).
    pub invalid: Vec<(Option<usize>, String)>,
    /// The objects the Work applied before, or is still removing, that it names no more.
    pub to_remove: Vec<ManifestIdentity>,
    /// The Work's health rule (a custom kind's, from its WorkloadProfile).
    pub rule: Option<HealthRule>,
    /// Why the Work's health rule does not compile, if it does not: the generic rules apply.
    pub invalid_rule: Option<String>,
}

/// Decides a pass over `work`, whose member answers (`Ok`) or cannot be written to.
pub fn plan(work: &Work, member: Result<(), &Unavailable>) -> Plan {
    let status = work.status.clone().unwrap_or_default();
    if let Err(why) = member {
        let applied = Verdict::new(
            conditions::APPLIED,
            "Unknown",
            reasons::CLUSTER_UNAVAILABLE,
            format!("{why}; the objects in the member are left as they are"),
        );
        let said = status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::APPLIED)
            .is_some_and(|c| c.reason == reasons::CLUSTER_UNAVAILABLE);
        return Plan::Unavailable {
            applied,
            announce: !said,
        };
    }
    let prepared = prepare(work);
    let to_remove = removed(&status, &prepared);
    let (mut ready, mut invalid) = (Vec::new(), Vec::new());
    for p in prepared {
        match p {
            Ok(p) => ready.push(p),
            Err(e) => invalid.push((e.ordinal(), e.to_string())),
        }
    }
    let (rule, invalid_rule) = match work.spec.health.as_deref().map(HealthRule::compile) {
        None => (None, None),
        Some(Ok(rule)) => (Some(rule), None),
        Some(Err(e)) => (None, Some(e.to_string())),
    };
    Plan::Apply(Applying {
        ready,
        invalid,
        to_remove,
        rule,
        invalid_rule,
    })
}

/// The Work's conditions after its manifests were applied, and what follows from them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// `Applied`, `Available` and `Degraded`.
    pub verdicts: [Verdict; 3],
    /// The verdicts that are news and announced as Warning Events, with the Event's action.
    pub announce: Vec<(Verdict, &'static str)>,
    /// Whether every manifest was applied.
    pub applied: bool,
}

/// Judges what the member answered for each manifest (`outcomes`), against the Work's status
/// `before`: a condition is announced only when its status or reason changes to a failure.
pub fn judge(
    before: &WorkStatus,
    outcomes: &[(ManifestIdentity, Outcome)],
    rule: Option<&HealthRule>,
) -> Judgement {
    let verdicts = work_conditions(outcomes, rule);
    let announce = verdicts
        .iter()
        .filter(|v| {
            !before
                .conditions
                .iter()
                .find(|c| c.type_ == v.type_)
                .is_some_and(|c| c.status == v.status && c.reason == v.reason)
        })
        .filter_map(|v| {
            if v.type_ == conditions::APPLIED && v.status == "False" {
                Some((v.clone(), "Apply"))
            } else if v.type_ == conditions::DEGRADED && v.status == "True" {
                Some((v.clone(), "Observe"))
            } else {
                None
            }
        })
        .collect();
    let applied = verdicts
        .iter()
        .any(|v| v.type_ == conditions::APPLIED && v.status == "True");
    Judgement {
        verdicts,
        announce,
        applied,
    }
}

/// Whether an outcome says the member did not answer: then nothing is decided about it.
pub fn unreachable(outcomes: &[(ManifestIdentity, Outcome)]) -> bool {
    outcomes.iter().any(|(_, o)| {
        matches!(o, Outcome::Failed { reason, .. } if *reason == reasons::CLUSTER_UNAVAILABLE)
    })
}

/// When the Work is looked at again. Changes in the member arrive through its watches and the
/// resync re-applies in any case; objects being removed are looked at again in moments, and what
/// could not be applied sooner than the resync.
pub fn recheck(pruning: bool, applied: bool, resync: Duration) -> Duration {
    if pruning {
        PRUNE_RECHECK
    } else if applied {
        resync
    } else {
        resync.min(NOT_APPLIED_RECHECK)
    }
}
