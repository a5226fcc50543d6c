//! Execution: the plan's writes and deletions, and nothing else. Only Works that differ from the
//! hub's are written (the plan compared them with the cache), several at a time; a Work the hub
//! refuses is reported and the others go on; deletions carry the `uid` and `resourceVersion` the
//! plan decided on, so a Work changed or re-created since is left for the next pass. The hub
//! Secret with the data of a Work's Secrets is written before the Work (which then never names
//! data that is not there), and given to the Work once a new Work exists.

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use flotilla_api::{Work, annotations, field_managers};

use crate::keys::WorkId;
use crate::plan::{Deletion, Plan};
use crate::recent::RecentWrites;
use crate::render::DataSecret;
use crate::report::{Outcome, named};
use crate::state::Error;

/// How many Works one pass writes or deletes at the same time.
pub const PARALLEL_WRITES: usize = 16;

/// Writes and deletes what `plan` says, and remembers in `recent` what the hub returned (and
/// forgets what was deleted) until the cache has it.
pub async fn execute(
    client: &kube::Client,
    plan: &Plan,
    recent: &RecentWrites,
) -> Result<Outcome, Error> {
    // Owned keys: a stream of borrowed items would not be `Send` for every lifetime. Each Work
    // is cloned only while it is written, and what comes back is kept lean. The Works to write,
    // and those whose hub Secret alone is.
    let keys: BTreeSet<WorkId> = plan
        .writes
        .iter()
        .chain(plan.data.keys())
        .cloned()
        .collect();
    let results: Vec<_> = stream::iter(keys)
        .map(|key| {
            let work = plan
                .writes
                .contains(&key)
                .then(|| plan.wanted.get(&key).cloned())
                .flatten();
            let data = plan.data.get(&key).cloned();
            let written = write(client.clone(), key, work, data);
            async move {
                let (key, result) = written.await?;
                // As soon as the hub answers: the watch's echo of this write is then known
                // for what it is (see `crate::watches`), and starts no pass of its own.
                if let Ok(Some(work)) = &result {
                    recent.record(work.clone());
                }
                Ok::<_, Error>((key, result))
            }
        })
        .buffer_unordered(PARALLEL_WRITES)
        .try_collect()
        .await?;
    let mut outcome = Outcome::default();
    for (key, result) in results {
        match result {
            Ok(Some(written)) => {
                outcome.written.insert(key, written);
            }
            Ok(None) => {}
            // One Work that cannot be written (too large, refused by an admission policy) must
            // not stall the tenant's other objects: it is reported, the rest goes on.
            Err(refusal) => outcome.failed_writes.push(refusal),
        }
    }
    outcome.failed_writes.sort();

    let deleted: Vec<(WorkId, Option<Work>)> = stream::iter(plan.deletes.clone())
        .map(|d| delete(client.clone(), d))
        .buffer_unordered(PARALLEL_WRITES)
        .try_collect()
        .await?;
    for (id, answer) in deleted {
        match answer {
            // Being deleted (the syncer's finalizer holds it): so the next pass sees it, not
            // the Work as the cache still has it, which it would delete again.
            Some(deleting) => recent.record(deleting),
            None => recent.forget(&id),
        }
    }
    Ok(outcome)
}

/// `Kind a, b, c, d, e and 3 more on member (Work name): why` of a Work the hub refused.
fn refused(work: &Work, e: &kube::Error) -> String {
    let kind = work
        .annotations()
        .get(annotations::SOURCE_KIND)
        .cloned()
        .unwrap_or_default();
    let objects: Vec<String> = work
        .spec
        .manifests
        .iter()
        .filter_map(|m| m.metadata.name.clone())
        .collect();
    format!(
        "{kind} {} on {} (Work {}): {}",
        named(&objects, ", "),
        work.cluster_name().unwrap_or_default(),
        work.name_any(),
        match e {
            kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
            other => other.to_string(),
        }
    )
}

/// `Secrets a, b on member (hub Secret namespace/name): why` of the data of a Work's Secrets
/// that the hub refused to store.
fn data_refused(data: &DataSecret, e: &kube::Error) -> String {
    let secrets: Vec<String> = data.data.keys().cloned().collect();
    format!(
        "the data of Secrets {} on {} (hub Secret {}/{}): {}",
        named(&secrets, ", "),
        flotilla_api::names::cluster_from_namespace(&data.work.0).unwrap_or_default(),
        data.work.0,
        data.name(),
        match e {
            kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
            other => other.to_string(),
        }
    )
}

/// Writes the hub Secret with the data of a Work's Secrets (server-side apply).
async fn store(client: &kube::Client, data: &DataSecret) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &data.work.0);
    let params = PatchParams::apply(field_managers::SPLITTER).force();
    api.patch(&data.name(), &params, &Patch::Apply(&data.secret()))
        .await?;
    Ok(())
}

/// Writes one Work (server-side apply), after the hub Secret with the data of its Secrets
/// (`data`), if it has any to write; or that Secret alone (`work`: none). The hub's answer,
/// whatever it is, goes to the outcome: the Work as written, lean like the cache's (see
/// [`crate::digest::lean`]), or why it was refused.
async fn write(
    client: kube::Client,
    key: WorkId,
    work: Option<Work>,
    data: Option<DataSecret>,
) -> Result<(WorkId, Result<Option<Work>, String>), Error> {
    if let Some(data) = &data
        && let Err(e) = store(&client, data).await
    {
        // Not the Work either: it would name data that is not stored (or not this data).
        return Ok((key, Err(data_refused(data, &e))));
    }
    let Some(work) = work else {
        return Ok((key, Ok(None)));
    };
    let api: Api<Work> = Api::namespaced(client.clone(), &work.namespace().unwrap_or_default());
    let mut value = serde_json::to_value(&work)?;
    value["apiVersion"] = json!(Work::api_version(&()));
    value["kind"] = json!(Work::kind(&()));
    let params = PatchParams::apply(field_managers::SPLITTER).force();
    let result = match api
        .patch(&work.name_any(), &params, &Patch::Apply(&value))
        .await
    {
        Ok(mut written) => {
            written.metadata.managed_fields = None;
            crate::digest::lean(&mut written);
            Ok(written)
        }
        Err(e) => Err(refused(&work, &e)),
    };
    // A new Work's hub Secret is the Work's from now on: it goes with it. (Should this write
    // fail, the next pass finds the Secret without its owner and writes it again.)
    if let (Some(data), Ok(written)) = (data, &result)
        && let Some(uid) = written.uid()
        && data.owner.as_ref() != Some(&uid)
    {
        let owned = DataSecret {
            owner: Some(uid),
            ..data
        };
        if let Err(e) = store(&client, &owned).await {
            tracing::warn!(namespace = %owned.work.0, name = %owned.name(), error = %e,
                "could not give the hub Secret with the data of its Secrets to the Work");
        }
    }
    Ok((key, result.map(Some)))
}

/// Deletes one Work, if it is still the one the plan decided on. The Work as the hub answered
/// (lean), when it is still there being deleted.
async fn delete(client: kube::Client, d: Deletion) -> Result<(WorkId, Option<Work>), Error> {
    let id = (d.namespace.clone(), d.name.clone());
    let api: Api<Work> = Api::namespaced(client, &d.namespace);
    // Only the Work this decision was made on: changed since (409), the next pass decides.
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: d.uid.clone(),
            resource_version: d.resource_version.clone(),
        }),
        ..DeleteParams::background()
    };
    tracing::debug!(namespace = %d.namespace, name = %d.name, why = ?d.why, "deleting Work");
    match api.delete(&d.name, &params).await {
        Ok(answer) => Ok((
            id,
            answer.left().map(|mut deleting| {
                deleting.metadata.managed_fields = None;
                crate::digest::lean(&mut deleting);
                deleting
            }),
        )),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok((id, None)),
        Err(e) => Err(e.into()),
    }
}
