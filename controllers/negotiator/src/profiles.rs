//! WorkloadProfiles: each checked against the negotiated schema of its kind, with the verdict in
//! its `Accepted` condition (and a Warning event naming the field when it is refused). The
//! splitter and the syncer use only accepted profiles.
//!
//! A profile is checked again when it changes and when a NegotiatedAPIResource changes (the kind
//! gets negotiated, or its schema narrows so that a path is gone).

use std::sync::Arc;
use std::time::Duration;

use flotilla_api::condition::{ConditionStatus, new_condition, set_condition};
use flotilla_api::{NegotiatedApiResource, WorkloadProfile, conditions, field_managers, reasons};
use flotilla_interpreter::profile::{Rejection, check};
use flotilla_runtime::Context;
use flotilla_runtime::reconcile::{Reconciler, Retry, drive};
use flotilla_runtime::shared::SharedCache;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

/// When an object is tried again after a failed reconciliation.
const RETRY: Retry = Retry {
    transient: Duration::from_secs(5),
    permanent: Some(Duration::from_secs(5)),
};

/// An accepted profile: the NegotiatedAPIResources it was checked against, and the fields of its
/// `Ready` condition that every one of them declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub negotiated: String,
    pub ready_condition_fields: Vec<String>,
}

/// The verdict on `profile`, given every profile and every NegotiatedAPIResource: accepted, or
/// why it cannot be used.
pub fn verdict(
    profile: &WorkloadProfile,
    profiles: &[Arc<WorkloadProfile>],
    negotiated: &[Arc<NegotiatedApiResource>],
) -> Result<Accepted, Rejection> {
    let spec = &profile.spec;
    let age = |p: &WorkloadProfile| (p.metadata.creation_timestamp.clone(), p.name_any());
    if let Some(older) = profiles
        .iter()
        .find(|p| p.spec.group == spec.group && p.spec.kind == spec.kind && age(p) < age(profile))
    {
        return Err(Rejection {
            reason: reasons::DUPLICATE,
            message: format!(
                "WorkloadProfile {} (older) already describes {} {}",
                older.name_any(),
                spec.group,
                spec.kind
            ),
        });
    }
    let mut of_kind: Vec<&NegotiatedApiResource> = negotiated
        .iter()
        .map(|n| &**n)
        .filter(|n| {
            let r = &n.spec.resource;
            r.group_version.group == spec.group && r.names.kind == spec.kind
        })
        .collect();
    of_kind.sort_by_key(|n| n.name_any());
    if of_kind.is_empty() {
        return Err(Rejection {
            reason: reasons::NO_NEGOTIATED_SCHEMA,
            message: format!(
                "no NegotiatedAPIResource of {} {} yet: a Placement must select the kind (or the \
                 negotiator's --extra-type name it) for the members' schemas to be imported",
                spec.group, spec.kind
            ),
        });
    }
    let mut ready_condition_fields: Option<Vec<String>> = None;
    for n in &of_kind {
        let r = &n.spec.resource;
        let api_version = format!("{}/{}", r.group_version.group, r.group_version.version);
        if flotilla_interpreter::builtin(&api_version, &spec.kind).is_some() {
            return Err(Rejection {
                reason: reasons::BUILT_IN,
                message: format!(
                    "Flotilla has built-in rules for {api_version} {}; a profile cannot replace them",
                    spec.kind
                ),
            });
        }
        let status = r.subresources.as_ref().is_some_and(|s| s.status.is_some());
        let checked = check(spec, &r.open_api_v3_schema, status).map_err(|mut why| {
            why.message = format!("{} (NegotiatedAPIResource {})", why.message, n.name_any());
            why
        })?;
        // What every version declares.
        ready_condition_fields = Some(match ready_condition_fields {
            None => checked.ready_condition_fields,
            Some(before) => before
                .into_iter()
                .filter(|f| checked.ready_condition_fields.contains(f))
                .collect(),
        });
    }
    Ok(Accepted {
        negotiated: of_kind
            .iter()
            .map(|n| n.name_any())
            .collect::<Vec<_>>()
            .join(","),
        ready_condition_fields: ready_condition_fields.unwrap_or_default(),
    })
}

struct State {
    ctx: Context,
    profiles: Store<WorkloadProfile>,
    negotiated: Store<NegotiatedApiResource>,
}

/// Runs the profile check until `ctx.shutdown`, reading the negotiations of `negotiated`.
pub async fn run(
    ctx: Context,
    negotiated: SharedCache<NegotiatedApiResource>,
) -> anyhow::Result<()> {
    let controller = flotilla_runtime::guard::controller(
        Api::<DeserializeGuard<WorkloadProfile>>::all(ctx.client.clone()),
        watcher::Config::default(),
    );
    let profiles = controller.store();
    let every = profiles.clone();
    let state = Arc::new(State {
        ctx: ctx.clone(),
        profiles,
        negotiated: negotiated.store(),
    });
    flotilla_runtime::cache::wait_until_synced(&negotiated).await;
    let controller = controller
        .with_config(controller::Config::default().debounce(Duration::from_millis(500)))
        // A kind negotiated, or its schema changed: every profile is checked again.
        .watches_stream(negotiated.touched(), move |_| {
            every
                .state()
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        });
    drive(controller, state).await;
    Ok(())
}

/// What a pass over a profile read: every profile and every NegotiatedAPIResource.
struct Observed {
    now: Timestamp,
    profiles: Vec<Arc<WorkloadProfile>>,
    negotiated: Vec<Arc<NegotiatedApiResource>>,
}

/// What a pass over a profile writes.
#[derive(Debug, Default)]
struct Plan {
    /// The profile's new status, when it changes.
    status: Option<Value>,
    /// The Event of a changed verdict: whether it is a Warning, its reason and note.
    announce: Option<(bool, &'static str, String)>,
}

/// The status and Event of `profile` after its verdict.
fn plan(profile: &WorkloadProfile, observed: &Observed) -> Plan {
    if profile.metadata.deletion_timestamp.is_some() {
        return Plan::default();
    }
    let verdict = verdict(profile, &observed.profiles, &observed.negotiated);
    let generation = profile.metadata.generation;
    let now = Time(observed.now);
    let (condition, negotiated, ready_condition_fields) = match &verdict {
        Ok(Accepted {
            negotiated: names,
            ready_condition_fields,
        }) => (
            new_condition(
                conditions::ACCEPTED,
                ConditionStatus::True,
                reasons::PROFILE_ACCEPTED,
                format!("every path is in the negotiated schema ({names})"),
                generation,
                now,
            ),
            Some(names.clone()),
            ready_condition_fields.clone(),
        ),
        Err(why) => (
            new_condition(
                conditions::ACCEPTED,
                ConditionStatus::False,
                why.reason,
                why.message.clone(),
                generation,
                now,
            ),
            None,
            Vec::new(),
        ),
    };
    let old = profile.status.clone().unwrap_or_default();
    let mut all = old.conditions.clone();
    let changed = set_condition(&mut all, condition.clone())
        || old.observed_generation != generation
        || old.negotiated != negotiated
        || old.ready_condition_fields != ready_condition_fields;
    if !changed {
        return Plan::default();
    }
    let was = old
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::ACCEPTED);
    let news = was.is_none_or(|c| c.status != condition.status || c.reason != condition.reason);
    let announce = news.then(|| match &verdict {
        Err(why) => (true, why.reason, why.message.clone()),
        Ok(_) => (false, reasons::PROFILE_ACCEPTED, condition.message.clone()),
    });
    Plan {
        status: Some(json!({
            "conditions": all,
            "observedGeneration": generation,
            "negotiated": negotiated,
            "readyConditionFields": ready_condition_fields,
        })),
        announce,
    }
}

impl Reconciler for State {
    type Object = WorkloadProfile;
    type Observed = Observed;
    type Plan = Plan;
    type Outcome = ();
    type Error = kube::Error;

    const NAME: &'static str = "workloadprofile";
    const RETRY: Retry = RETRY;

    fn context(&self) -> &Context {
        &self.ctx
    }

    fn api(&self, _: &WorkloadProfile) -> Api<WorkloadProfile> {
        Api::all(self.ctx.client.clone())
    }

    async fn observe(&self, _: &WorkloadProfile) -> Result<Observed, kube::Error> {
        Ok(Observed {
            now: Timestamp::now(),
            profiles: self.profiles.state(),
            negotiated: self.negotiated.state(),
        })
    }

    fn plan(&self, profile: &WorkloadProfile, observed: &Observed) -> Result<Plan, kube::Error> {
        Ok(plan(profile, observed))
    }

    async fn execute(
        &self,
        profile: &WorkloadProfile,
        _: &Observed,
        plan: &Plan,
    ) -> Result<(), kube::Error> {
        let Some(status) = &plan.status else {
            return Ok(());
        };
        Api::<WorkloadProfile>::all(self.ctx.client.clone())
            .patch_status(
                &profile.name_any(),
                &PatchParams::apply(field_managers::NEGOTIATOR).force(),
                &Patch::Apply(json!({
                    "apiVersion": WorkloadProfile::api_version(&()),
                    "kind": WorkloadProfile::kind(&()),
                    "status": status,
                })),
            )
            .await?;
        Ok(())
    }

    async fn report(
        &self,
        profile: &WorkloadProfile,
        _: &Observed,
        plan: &Plan,
        (): (),
    ) -> Result<Action, kube::Error> {
        let events = &self.ctx.events;
        match &plan.announce {
            Some((true, reason, note)) => events.warning(profile, reason, "Check", note).await,
            Some((false, reason, note)) => events.normal(profile, reason, "Check", note).await,
            None => {}
        }
        Ok(Action::await_change())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(name: &str, created: &str, spec: Value) -> Arc<WorkloadProfile> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "WorkloadProfile",
                "metadata": {"name": name, "creationTimestamp": created, "generation": 1},
                "spec": spec,
            }))
            .expect("profile"),
        )
    }

    fn negotiated(
        group: &str,
        version: &str,
        kind: &str,
        status: bool,
    ) -> Arc<NegotiatedApiResource> {
        let plural = format!("{}s", kind.to_lowercase());
        let mut spec = json!({
            "groupVersion": {"group": group, "version": version},
            "names": {"plural": plural, "kind": kind},
            "scope": "Namespaced",
            "openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                "status": {"type": "object", "properties": {"readyReplicas": {"type": "integer"}}}}},
        });
        if status {
            spec["subresources"] = json!({"status": {}});
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "flotilla.dev/v1alpha1", "kind": "NegotiatedAPIResource",
                "metadata": {"name": format!("{plural}.{version}.{group}")},
                "spec": spec,
            }))
            .expect("negotiated"),
        )
    }

    const ROLLOUT: &str = "2026-01-01T00:00:00Z";

    fn rollout_spec() -> Value {
        json!({"group": "argoproj.io", "kind": "Rollout", "replicas": ".spec.replicas",
               "statusSums": [".status.readyReplicas"]})
    }

    #[test]
    fn a_profile_is_accepted_against_every_negotiated_version_of_its_kind() {
        let p = profile("rollouts", ROLLOUT, rollout_spec());
        let nars = [
            negotiated("argoproj.io", "v1alpha1", "Rollout", true),
            negotiated("example.com", "v1", "Rollout", true),
        ];
        assert_eq!(
            verdict(&p, std::slice::from_ref(&p), &nars),
            Ok(Accepted {
                negotiated: "rollouts.v1alpha1.argoproj.io".to_string(),
                ready_condition_fields: Vec::new(),
            })
        );
    }

    #[test]
    fn a_profile_without_a_schema_an_older_twin_or_a_status_subresource_is_refused() {
        let p = profile("rollouts", ROLLOUT, rollout_spec());
        let why = verdict(&p, std::slice::from_ref(&p), &[]).expect_err("no schema");
        assert_eq!(why.reason, reasons::NO_NEGOTIATED_SCHEMA);

        let older = profile("rollouts-old", "2025-06-01T00:00:00Z", rollout_spec());
        let nars = [negotiated("argoproj.io", "v1alpha1", "Rollout", true)];
        let why = verdict(&p, &[older.clone(), p.clone()], &nars).expect_err("duplicate");
        assert_eq!(why.reason, reasons::DUPLICATE);
        assert!(why.message.contains("rollouts-old"), "{}", why.message);
        assert!(
            verdict(&older, &[older.clone(), p.clone()], &nars).is_ok(),
            "the oldest wins"
        );

        let no_status = [negotiated("argoproj.io", "v1alpha1", "Rollout", false)];
        let why = verdict(&p, std::slice::from_ref(&p), &no_status).expect_err("no status");
        assert_eq!(why.reason, reasons::NO_STATUS_SUBRESOURCE);
        assert!(
            why.message.contains("rollouts.v1alpha1.argoproj.io"),
            "{}",
            why.message
        );
    }

    #[test]
    fn a_built_in_kind_keeps_its_rules() {
        let p = profile(
            "deployments",
            ROLLOUT,
            json!({"group": "apps", "kind": "Deployment", "replicas": ".spec.replicas"}),
        );
        let nars = [negotiated("apps", "v1", "Deployment", true)];
        let why = verdict(&p, std::slice::from_ref(&p), &nars).expect_err("built in");
        assert_eq!(why.reason, reasons::BUILT_IN);
    }

    #[test]
    fn a_verdict_is_written_and_announced_once_and_a_refusal_is_a_warning() {
        let p = profile("rollouts", ROLLOUT, rollout_spec());
        let seen = |negotiated: Vec<Arc<NegotiatedApiResource>>| Observed {
            now: Timestamp::UNIX_EPOCH,
            profiles: vec![p.clone()],
            negotiated,
        };
        let refused = plan(&p, &seen(vec![]));
        let (warning, reason, _) = refused.announce.clone().expect("announced");
        assert!(warning);
        assert_eq!(reason, reasons::NO_NEGOTIATED_SCHEMA);

        let nars = vec![negotiated("argoproj.io", "v1alpha1", "Rollout", true)];
        let accepted = plan(&p, &seen(nars.clone()));
        let status = accepted.status.clone().expect("a status");
        assert_eq!(status["negotiated"], "rollouts.v1alpha1.argoproj.io");
        assert_eq!(
            accepted.announce.as_ref().map(|a| (a.0, a.1)),
            Some((false, reasons::PROFILE_ACCEPTED))
        );

        // The status as written: the next pass writes and announces nothing.
        let mut written = (*p).clone();
        written.status = Some(serde_json::from_value(status).expect("a status"));
        let again = plan(&written, &seen(nars));
        assert!(
            again.status.is_none() && again.announce.is_none(),
            "{again:?}"
        );
    }
}
