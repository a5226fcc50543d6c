//! Stage 2, follow references: what the placed workloads refer to (their ConfigMaps, Secrets,
//! ServiceAccounts, claims) goes to the members they run on, unless a Placement selects it
//! (then that Placement places it).

use flotilla_api::placement::{ClusterDecision, ObjectDecision};
use flotilla_interpreter::hub_made::made_by_the_hub;
use kube::ResourceExt;

use super::Plan;
use super::entry::Entry;
use super::place::Placing;
use crate::keys::{CopyKey, ObjectKey, resource, typed};
use crate::observation::Observation;
use crate::render::{Share, member_manifest};
use crate::specificity::{Selectable, winner};

/// Adds a copy of every object the placed workloads refer to on each member they run on.
pub(super) fn follow<'o>(
    obs: &'o Observation,
    placed: &mut Placing<'o>,
    out: &mut Plan,
) -> Result<(), serde_json::Error> {
    let neighbours = obs.neighbours_here();
    for (reference, on) in std::mem::take(&mut placed.followed) {
        let (g, v, k, p) = reference.kind.resource();
        let ar = resource(g, v, k, p);
        let object = match obs.referenced.get(&reference) {
            Some(Some(object)) => object,
            Some(None) => {
                out.findings.missing.push(format!("{k} {}", reference.name));
                continue;
            }
            // Could not be read now (reported as unreadable): nothing is decided about it.
            None => continue,
        };
        let selectable = Selectable {
            api_version: &ar.api_version,
            kind: &ar.kind,
            name: &reference.name,
            labels: object.labels(),
        };
        // A member has its own (its root CA bundle, a token of its own); never the hub's.
        if object.metadata.deletion_timestamp.is_some()
            || made_by_the_hub(&ar.api_version, &ar.kind, object)
            || winner(&neighbours, &selectable).is_some()
        {
            continue;
        }
        let key = ObjectKey::new(&ar.api_version, &ar.kind, &reference.name);
        placed.seen.insert(key.clone(), object);
        let object = typed(object.clone(), &ar);
        // It follows a workload this Placement places: its copies stay while the workload's do.
        placed.placing.insert(key.clone());
        let mut decision = ObjectDecision {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            name: reference.name.clone(),
            ..Default::default()
        };
        let kind = obs.kinds.of(&ar.api_version, &ar.kind);
        for cluster in on {
            placed.wanted.insert(
                CopyKey::new(key.clone(), &cluster),
                Entry::new(member_manifest(kind, &object, Share::default()))?,
            );
            decision.clusters.push(ClusterDecision {
                cluster,
                ..Default::default()
            });
        }
        out.decisions.push((key, decision));
    }
    Ok(())
}
