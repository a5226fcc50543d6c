//! What one pass over a NegotiatedAPIResource decides, with no I/O: the negotiated type, whether
//! and what to publish, each import's `Compatible` condition, and the status and Events that
//! follow from them and from the publication's outcome.

use std::collections::BTreeSet;
use std::sync::Arc;

use flotilla_api::condition::{Verdict, find_condition, set_condition};
use flotilla_api::{
    ApiResourceImport, ApiResourceSpec, ImportSummary, NegotiatedApiResource, SchemaDifference,
    conditions, reasons,
};
use flotilla_schema::Limits;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use super::{is_published_by_flotilla, same_versions};
use crate::publish::{self, NegotiatedVersion};
use crate::schemas;
use crate::verdict::{self, ImportInput, ImportVerdict, Negotiation, Reference};

#[cfg(test)]
pub(crate) mod tests;

/// What a pass read.
#[derive(Clone, Debug)]
pub struct Observed {
    pub now: Timestamp,
    /// The imports of the type by the selected Clusters, by cluster.
    pub imports: Vec<Arc<ApiResourceImport>>,
    /// What the hub says about the type.
    pub reference: Reference,
    /// The hub's CRD of the type, if it has one.
    pub hub_crd: Option<CustomResourceDefinition>,
    /// The type's NegotiatedAPIResources of other versions, most stable first.
    pub siblings: Vec<Arc<NegotiatedApiResource>>,
    /// The summaries of imports other negotiators serve (with `--cluster-selector`), which
    /// stay while their imports exist; `None` when this negotiator serves every Cluster.
    pub foreign: Option<Vec<ImportSummary>>,
}

/// What a pass does.
#[derive(Clone, Debug)]
pub struct Plan {
    pub now: Timestamp,
    /// The NegotiatedAPIResource's new `spec.resource`, when it changes.
    pub resource: Option<ApiResourceSpec>,
    pub publish: Publish,
    /// One step per import, in the order of [`Observed::imports`].
    pub imports: Vec<ImportStep>,
    /// The `Submitted` condition.
    pub submitted: Verdict,
    /// The `Enforced` condition.
    pub enforced: Verdict,
    /// The per-import summaries of the status.
    pub summaries: Vec<ImportSummary>,
}

/// Whether the hub's CRD of the type is published.
#[derive(Clone, Debug, PartialEq)]
pub enum Publish {
    /// Decided without a write: the `Published` condition.
    Decided(Verdict),
    /// Apply `crd` (server-side, after a dry run); `done` says what it then serves.
    Apply {
        crd_name: String,
        crd: Value,
        done: String,
    },
}

/// An import's `Compatible` condition and differences.
#[derive(Clone, Debug)]
pub struct ImportStep {
    pub import: Arc<ApiResourceImport>,
    /// The condition as it stands after the pass.
    pub condition: Condition,
    pub differences: Vec<SchemaDifference>,
    /// Whether the import's status changes (and is written).
    pub write: bool,
    /// The Event of a changed verdict, if any.
    pub announce: Option<Verdict>,
}

/// The status a pass writes once the publication's outcome is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    /// The negotiator's conditions (`Submitted`, `Published`, `Enforced`).
    pub conditions: Vec<Condition>,
    pub summaries: Vec<ImportSummary>,
    /// Whether any of it changes (and is written).
    pub write: bool,
    /// The conditions whose status or reason changed: an Event each.
    pub transitions: Vec<Verdict>,
}

/// Decides a pass over `negotiation` from what it read.
pub fn plan(negotiation: &NegotiatedApiResource, observed: &Observed, limits: &Limits) -> Plan {
    let mut resource = negotiated_type(negotiation, observed);
    let inputs: Vec<ImportInput<'_>> = observed
        .imports
        .iter()
        .map(|i| ImportInput {
            cluster: i.cluster_name().unwrap_or_default(),
            schema: &i.spec.resource.open_api_v3_schema,
            strategy: verdict::effective_strategy(
                i.spec.schema_update_strategy,
                negotiation.spec.allow_published_updates,
            ),
            scope: i.spec.resource.scope,
        })
        .collect();
    let Negotiation {
        schema,
        submitted,
        enforced,
        verdicts,
    } = verdict::negotiate_scoped(resource.scope, &observed.reference, &inputs, limits);
    resource.open_api_v3_schema = schema
        .clone()
        .unwrap_or_else(|| negotiation.spec.resource.open_api_v3_schema.clone());
    let clusters = observed
        .imports
        .iter()
        .filter_map(|i| i.cluster_name())
        .map(str::to_string)
        .collect();
    let publish = publication(
        negotiation,
        observed,
        &resource,
        schema.as_ref(),
        clusters,
        limits,
    );
    let imports: Vec<ImportStep> = observed
        .imports
        .iter()
        .zip(&verdicts)
        .map(|(import, verdict)| judge_import(import.clone(), verdict, observed.now))
        .collect();
    let mut summaries: Vec<ImportSummary> = observed
        .imports
        .iter()
        .zip(&imports)
        .map(|(import, step)| {
            verdict::summary(
                import.cluster_name().unwrap_or_default(),
                std::slice::from_ref(&step.condition),
            )
        })
        .collect();
    if let Some(foreign) = &observed.foreign {
        summaries.extend(foreign.iter().cloned());
        summaries.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    }
    Plan {
        now: observed.now,
        resource: (!schemas::same_spec(&negotiation.spec.resource, &resource)).then_some(resource),
        publish,
        imports,
        submitted,
        enforced,
        summaries,
    }
}

impl Plan {
    /// The status once the publication came to `published`: every condition merged into the
    /// current ones (a condition keeps its transition time while its status stays).
    pub fn status(&self, negotiation: &NegotiatedApiResource, published: &Verdict) -> Status {
        let current = negotiation.status.clone().unwrap_or_default();
        let mut all = current.conditions.clone();
        let mut transitions = Vec::new();
        for v in [&self.submitted, published, &self.enforced] {
            let before =
                find_condition(&all, v.type_).map(|c| (c.status.clone(), c.reason.clone()));
            set_condition(
                &mut all,
                v.into_condition(self.now, negotiation.metadata.generation),
            );
            if before.is_none_or(|(s, r)| s != v.status || r != v.reason) {
                transitions.push(v.clone());
            }
        }
        let write = all != current.conditions || self.summaries != current.imports;
        let owned = [
            conditions::SUBMITTED,
            conditions::PUBLISHED,
            conditions::ENFORCED,
        ];
        Status {
            conditions: all
                .into_iter()
                .filter(|c| owned.contains(&c.type_.as_str()))
                .collect(),
            summaries: self.summaries.clone(),
            write,
            transitions,
        }
    }
}

/// Whether a changed condition is announced as a Warning: a failure, not a mere "off".
pub fn is_warning(v: &Verdict) -> bool {
    v.status == "False" && v.reason != reasons::NOT_PUBLISHED && v.reason != reasons::NOT_ENFORCED
}

/// The type as the hub describes it (a hand-made CRD), or as the NegotiatedAPIResource does —
/// the hub admin's object, made from the first import unless the admin made it first — never as
/// whichever import comes first: a member does not decide the names, scope or subresources of
/// what the hub publishes.
fn negotiated_type(negotiation: &NegotiatedApiResource, observed: &Observed) -> ApiResourceSpec {
    match (&observed.reference, &observed.hub_crd) {
        (Reference::Enforced { .. }, Some(crd)) => {
            schemas::crd_spec(crd, &negotiation.spec.resource.group_version.version)
                .ok()
                .flatten()
        }
        _ => None,
    }
    .unwrap_or_else(|| negotiation.spec.resource.clone())
}

/// An import's `Compatible` condition after `verdict`, and whether it is written and announced.
fn judge_import(
    import: Arc<ApiResourceImport>,
    verdict: &ImportVerdict,
    now: Timestamp,
) -> ImportStep {
    let status = import.status.clone().unwrap_or_default();
    let mut all = status.conditions.clone();
    let before = find_condition(&all, conditions::COMPATIBLE).cloned();
    let changed = set_condition(
        &mut all,
        verdict
            .condition
            .into_condition(now, import.metadata.generation),
    );
    let write = changed || status.differences != verdict.differences;
    let v = &verdict.condition;
    let announce = (write
        && before
            .as_ref()
            .is_none_or(|b| b.status != v.status || b.reason != v.reason))
    .then(|| v.clone());
    let condition = find_condition(&all, conditions::COMPATIBLE)
        .cloned()
        .unwrap_or_else(|| v.into_condition(now, import.metadata.generation));
    ImportStep {
        import,
        condition,
        differences: verdict.differences.clone(),
        write,
        announce,
    }
}

/// Whether and what to publish as the hub's CRD of the type.
///
/// A type is published when the NegotiatedAPIResource of one of its versions says
/// `publish: true` (the most stable such version is the publisher): the CRD then serves every
/// version that the publisher's members all serve ([`crate::publish`]).
fn publication(
    negotiation: &NegotiatedApiResource,
    observed: &Observed,
    resource: &ApiResourceSpec,
    schema: Option<&Value>,
    clusters: BTreeSet<String>,
    limits: &Limits,
) -> Publish {
    let crd_name = format!("{}.{}", resource.names.plural, resource.group_version.group);
    let version = &resource.group_version.version;
    let published = |reason, message: String| {
        Publish::Decided(Verdict::new(conditions::PUBLISHED, "True", reason, message))
    };
    let not_published = |reason, message: String| {
        Publish::Decided(Verdict::new(
            conditions::PUBLISHED,
            "False",
            reason,
            message,
        ))
    };
    if let Reference::Enforced { reason, .. } = &observed.reference {
        return not_published(
            reasons::NOT_PUBLISHED,
            format!("the hub serves the type itself ({reason}): nothing to publish"),
        );
    }
    let hub_crd = observed.hub_crd.as_ref();
    let ours = hub_crd.filter(|c| is_published_by_flotilla(c));
    let siblings = &observed.siblings;
    let publisher = if negotiation.spec.publish {
        None
    } else {
        siblings.iter().find(|n| n.spec.publish)
    };
    if !negotiation.spec.publish && publisher.is_none() {
        return match ours {
            Some(c) if c.spec.versions.iter().any(|v| &v.name == version) => published(
                reasons::PUBLISHED,
                format!(
                    "CRD {crd_name} was published earlier and stays although spec.publish is \
                     false: deleting a CRD deletes its objects, so delete it by hand if that is \
                     what you want"
                ),
            ),
            _ => not_published(reasons::NOT_PUBLISHED, "spec.publish is false".into()),
        };
    }
    if resource.group_version.group.is_empty() {
        return not_published(
            reasons::PUBLISH_FAILED,
            "a type of the core group cannot be published as a CRD".into(),
        );
    }
    if hub_crd.is_some() && ours.is_none() {
        return not_published(
            reasons::PUBLISH_FAILED,
            format!(
                "CRD {crd_name} exists on the hub, was not created by Flotilla and does not serve \
                 version {version}: it is left alone"
            ),
        );
    }
    let Some(schema) = schema else {
        return not_published(
            reasons::PUBLISH_FAILED,
            "there is no negotiated schema to publish".into(),
        );
    };
    let mut mine = resource.clone();
    mine.open_api_v3_schema = schema.clone();
    let negotiated = |n: &NegotiatedApiResource| {
        find_condition(
            n.status
                .as_ref()
                .map(|s| s.conditions.as_slice())
                .unwrap_or_default(),
            conditions::SUBMITTED,
        )
        .is_some_and(|c| c.status == "True")
    };
    let clusters_of = |n: &NegotiatedApiResource| -> BTreeSet<String> {
        n.status
            .iter()
            .flat_map(|s| &s.imports)
            .map(|i| i.cluster.clone())
            .collect()
    };
    let me = NegotiatedVersion {
        resource: &mine,
        clusters,
    };
    let others: Vec<NegotiatedVersion<'_>> = siblings
        .iter()
        .filter(|n| negotiated(n))
        .map(|n| NegotiatedVersion {
            resource: &n.spec.resource,
            clusters: clusters_of(n),
        })
        .collect();
    let plan = match publisher {
        None => publish::plan(&me, &others, ours, limits),
        Some(p) => {
            let publisher = NegotiatedVersion {
                resource: &p.spec.resource,
                clusters: clusters_of(p),
            };
            let mut rest: Vec<NegotiatedVersion<'_>> = others
                .into_iter()
                .filter(|o| {
                    o.resource.group_version.version != p.spec.resource.group_version.version
                })
                .collect();
            rest.push(me);
            publish::plan(&publisher, &rest, ours, limits)
        }
    };
    if let Some(left) = plan.left_out.iter().find(|l| &l.version == version) {
        return not_published(
            reasons::VERSION_LEFT_OUT,
            format!(
                "the hub's CRD {crd_name} {}; this version is not published: {}",
                plan.served_and_storage(),
                left.why
            ),
        );
    }
    let done = format!(
        "the hub's CRD {crd_name}, made from the negotiated schemas, {}",
        plan.describe()
    );
    if ours.is_some_and(|c| same_versions(c, &plan.crd)) {
        return published(reasons::PUBLISHED, done);
    }
    Publish::Apply {
        crd_name,
        crd: plan.crd,
        done,
    }
}
