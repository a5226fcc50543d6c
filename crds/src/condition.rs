//! Working with standard Kubernetes conditions
//! ([`Condition`]: type, status, reason, message, lastTransitionTime, observedGeneration).
//!
//! Every Flotilla status keeps its conditions in a list keyed by `type`
//! (`x-kubernetes-list-type: map`), so a controller can server-side apply the conditions it owns
//! without touching the others.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The status of a condition: `True` (it holds), `False` (it does not) or `Unknown`.
// The variants have no doc comments on purpose: with them, schemars describes the enum with a
// `oneOf`, and a field of type `Option<ConditionStatus>` would lose its own description in the CRD.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    #[default]
    Unknown,
}

impl ConditionStatus {
    /// The spelling Kubernetes uses in `Condition.status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    /// Parses `Condition.status`; anything but `True` or `False` is `Unknown`.
    pub fn parse(s: &str) -> Self {
        match s {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }
}

impl From<bool> for ConditionStatus {
    fn from(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

impl fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Builds a condition that transitioned at `now`.
pub fn new_condition(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.as_str().to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The status of the condition of type `type_`; `Unknown` when absent.
pub fn condition_status(conditions: &[Condition], type_: &str) -> ConditionStatus {
    find_condition(conditions, type_)
        .map(|c| ConditionStatus::parse(&c.status))
        .unwrap_or_default()
}

/// Whether the condition of type `type_` is present and `True`.
pub fn is_condition_true(conditions: &[Condition], type_: &str) -> bool {
    condition_status(conditions, type_) == ConditionStatus::True
}

/// Sets `condition` in `conditions`, replacing the one of the same type.
///
/// When the status does not change, the existing `lastTransitionTime` is kept (only reason,
/// message and observedGeneration are updated), so the time says when the status last changed,
/// not when a controller last looked. Returns whether anything changed, so callers can skip a
/// status write that would change nothing.
pub fn set_condition(conditions: &mut Vec<Condition>, mut condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            conditions.push(condition);
            true
        }
        Some(existing) => {
            if existing.status == condition.status {
                condition.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == condition {
                false
            } else {
                *existing = condition;
                true
            }
        }
    }
}

/// A condition as a controller decides it: type, status, reason and message, without times.
/// [`Verdict::into_condition`] adds them; [`set_condition`] then keeps `lastTransitionTime` while
/// the status is unchanged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Verdict {
    pub fn new(
        type_: &'static str,
        status: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }

    /// The condition at `now`, for an object of `generation`.
    pub fn into_condition(&self, now: jiff::Timestamp, generation: Option<i64>) -> Condition {
        Condition {
            type_: self.type_.to_string(),
            status: self.status.to_string(),
            reason: self.reason.to_string(),
            message: self.message.clone(),
            last_transition_time: Time(now),
            observed_generation: generation,
        }
    }
}

/// Removes the condition of type `type_`; returns whether it was present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::{conditions, reasons};

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).expect("valid timestamp"))
    }

    fn ready(status: ConditionStatus, reason: &str, now: i64) -> Condition {
        new_condition(conditions::READY, status, reason, "probe", Some(1), at(now))
    }

    #[test]
    fn adds_a_missing_condition() {
        let mut list = vec![];
        assert!(set_condition(
            &mut list,
            ready(ConditionStatus::True, reasons::REACHABLE, 10)
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].last_transition_time, at(10));
    }

    #[test]
    fn keeps_transition_time_when_status_is_unchanged() {
        let mut list = vec![ready(ConditionStatus::True, reasons::REACHABLE, 10)];
        let mut newer = ready(ConditionStatus::True, reasons::REACHABLE, 20);
        newer.message = "probe answered in 3ms".into();
        newer.observed_generation = Some(2);
        assert!(set_condition(&mut list, newer));
        assert_eq!(list[0].last_transition_time, at(10));
        assert_eq!(list[0].message, "probe answered in 3ms");
        assert_eq!(list[0].observed_generation, Some(2));
    }

    #[test]
    fn reports_no_change_for_the_same_condition_seen_later() {
        let mut list = vec![ready(ConditionStatus::True, reasons::REACHABLE, 10)];
        assert!(!set_condition(
            &mut list,
            ready(ConditionStatus::True, reasons::REACHABLE, 99)
        ));
        assert_eq!(list[0].last_transition_time, at(10));
    }

    #[test]
    fn moves_transition_time_when_status_changes() {
        let mut list = vec![ready(ConditionStatus::True, reasons::REACHABLE, 10)];
        assert!(set_condition(
            &mut list,
            ready(ConditionStatus::Unknown, reasons::HEARTBEAT_EXPIRED, 50)
        ));
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].status, "Unknown");
        assert_eq!(list[0].reason, reasons::HEARTBEAT_EXPIRED);
        assert_eq!(list[0].last_transition_time, at(50));
    }

    #[test]
    fn leaves_other_conditions_alone() {
        let joined = new_condition(
            conditions::JOINED,
            ConditionStatus::True,
            reasons::JOINED,
            "",
            None,
            at(1),
        );
        let mut list = vec![joined.clone()];
        set_condition(
            &mut list,
            ready(ConditionStatus::False, reasons::UNAUTHORIZED, 5),
        );
        assert_eq!(list[0], joined);
        assert_eq!(
            condition_status(&list, conditions::READY),
            ConditionStatus::False
        );
        assert!(is_condition_true(&list, conditions::JOINED));
        assert!(!is_condition_true(&list, conditions::READY));
        assert_eq!(
            condition_status(&list, conditions::ACCEPTED),
            ConditionStatus::Unknown
        );
        assert!(remove_condition(&mut list, conditions::READY));
        assert!(!remove_condition(&mut list, conditions::READY));
        assert_eq!(list, vec![joined]);
    }

    #[test]
    fn parses_condition_status() {
        for s in [
            ConditionStatus::True,
            ConditionStatus::False,
            ConditionStatus::Unknown,
        ] {
            assert_eq!(ConditionStatus::parse(s.as_str()), s);
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(ConditionStatus::parse("true"), ConditionStatus::Unknown);
        assert_eq!(ConditionStatus::from(true), ConditionStatus::True);
    }
}
