//! The load of `hack/bench.sh syncer`: writes N ConfigMaps into every member, once straight into
//! the members (the baseline) and once as Works on the hub for the syncer to apply, with the same
//! client and the same concurrency, and prints how long each took until every object existed in
//! every member.
//!
//! `hub-only` writes the same Works into namespaces of no member (`flotilla-cluster-<member>-idle`)
//! and does not wait: the cost of the Work envelopes alone.
//!
//! `envelopes-<B>` writes the same objects into namespaces of no member
//! (`flotilla-cluster-<member>-b<B>`) as Works of B manifests each, then one status per Work as
//! the syncer writes it (conditions and one entry per manifest), then both again with every
//! object changed: what the hub pays per object when Works carry one object or many. Each
//! manifest and status entry is a JSON string, as the controllers write them;
//! `envelopes-typed-status-<B>` writes the status entries as objects (what the syncer wrote
//! before), into `flotilla-cluster-<member>-t<B>`; `envelopes-objects-<B>` writes manifests and
//! entries as objects (what both controllers wrote before that), into
//! `flotilla-cluster-<member>-o<B>`; `envelopes-bare-<B>` writes statuses of conditions alone,
//! without an entry per manifest (what the entries cost at all), into
//! `flotilla-cluster-<member>-s<B>`; `envelopes-merge-<B>` writes what `envelopes-<B>` does,
//! creating each Work and then sending its spec and status as JSON merge patches instead of
//! server-side apply patches, into `flotilla-cluster-<member>-m<B>`; `envelopes-update-<B>`
//! creates each Work and then replaces its spec and its status whole (PUT, with the
//! resourceVersion of the last write), into `flotilla-cluster-<member>-u<B>`.
//! `envelopes-shared-<B>` stands in for a shared envelope: each bundle's manifests written once,
//! as a Work in `flotilla-cluster-envelopes-e<B>`, and per member a Work of one small manifest
//! (the reference) that names it and its version (rewritten when it changes) with the member's
//! status of every manifest, into `flotilla-cluster-<member>-e<B>`; `envelopes-shared-unpinned-<B>` writes the
//! members' Works once (a change rewrites the envelope and the statuses), into `-f<B>`.
//!
//! Usage: bench_load <direct|works|hub-only|envelopes-[typed-status-|objects-|bare-|merge-|update-|shared-|shared-unpinned-]B> <namespace> <count> <concurrency>
//!        <hub-kubeconfig> <member>=<kubeconfig>[,<member>=<kubeconfig>...]
//! For `works`, member names are the Cluster names (Works go to `flotilla-cluster-<member>`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

async fn client(path: &str) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading {path}"))?;
    let mut config =
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(Client::try_from(config)?)
}

fn configmap(namespace: &str, i: usize) -> serde_json::Value {
    versioned_configmap(namespace, i, 0)
}

fn versioned_configmap(namespace: &str, i: usize, version: usize) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("bench-{i}"), "namespace": namespace},
           "data": {"index": i.to_string(), "version": version.to_string(),
                    "payload": "x".repeat(256)}})
}

/// How `envelopes` writes its Works.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// Manifests and status entries (one per manifest) as JSON strings: what the controllers
    /// write.
    Strings,
    /// Manifests as JSON strings, status entries as objects (what the syncer wrote before).
    TypedStatus,
    /// Manifests and status entries as objects (what both controllers wrote before that).
    Objects,
    /// As `Strings`, with statuses of conditions alone.
    Bare,
    /// As `Strings`, written as the hub's own JSON: a new Work created, then its spec and its
    /// status sent as JSON merge patches instead of server-side apply patches (which the
    /// apiserver reads as YAML and tracks field by field).
    Merge,
    /// As `Merge`, with the spec and the status replaced whole (PUT, with the resourceVersion
    /// of the Work's last write) instead of merge patches: no patch to read or merge.
    Update,
    /// A stand-in for a shared envelope: the manifests of a bundle written once, as a Work of
    /// a namespace of its own, and per member a Work of one small manifest (standing in for the
    /// reference) that names it and the version it holds (in an annotation: rewritten whenever
    /// the envelope changes), with the member's status of every manifest as `Strings` writes it.
    Shared,
    /// As `Shared`, with the members' Works written once: a change rewrites the envelope and
    /// the statuses only.
    SharedUnpinned,
}

/// `envelopes-<B>`: every member's `count` objects as Works of `bundle` manifests in a namespace
/// of no member, each Work written and given a status, twice (the second time every object
/// changed), in `form`. Returns the number of hub requests made.
async fn envelopes(
    hub: &Client,
    members: &[(String, Client)],
    namespace: &str,
    count: usize,
    (bundle, form): (usize, Form),
    concurrency: usize,
) -> Result<usize> {
    let params = PatchParams::apply("flotilla-bench").force();
    let mut works = Vec::new();
    let prefix = match form {
        Form::Strings => "b",
        Form::TypedStatus => "t",
        Form::Objects => "o",
        Form::Bare => "s",
        Form::Merge => "m",
        Form::Update => "u",
        Form::Shared => "e",
        Form::SharedUnpinned => "f",
    };
    let shared = matches!(form, Form::Shared | Form::SharedUnpinned);
    // The shared envelopes, one per bundle, in a namespace of their own.
    let envelope_ns =
        flotilla_api::names::cluster_namespace(&format!("envelopes-{prefix}{bundle}"));
    let envelope_ns = envelope_ns.as_str();
    let mut envelopes = Vec::new();
    if shared {
        ensure_namespace(hub, envelope_ns).await?;
        for first in (0..count).step_by(bundle) {
            envelopes.push((first, (first + bundle).min(count)));
        }
    }
    // For `Update`: each Work as its last write returned it, by namespace and name.
    let last: Mutex<HashMap<(String, String), flotilla_api::Work>> = Default::default();
    let last = &last;
    for (member, _) in members {
        let ns = flotilla_api::names::cluster_namespace(&format!("{member}-{prefix}{bundle}"));
        ensure_namespace(hub, &ns).await?;
        for first in (0..count).step_by(bundle) {
            works.push((ns.clone(), first, (first + bundle).min(count)));
        }
    }
    let mut requests = 0;
    for version in 0..2 {
        if shared {
            // The envelopes first, as a splitter would write them before the Works naming them.
            let api: Api<flotilla_api::Work> = Api::namespaced(hub.clone(), envelope_ns);
            stream::iter(envelopes.iter().copied())
                .map(|(first, end)| {
                    let (api, params) = (api.clone(), params.clone());
                    async move {
                        let manifests: Vec<serde_json::Value> = (first..end)
                            .map(|i| {
                                versioned_configmap(namespace, i, version)
                                    .to_string()
                                    .into()
                            })
                            .collect();
                        let envelope = json!({
                            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
                            "metadata": {"name": format!("bench-{first}")},
                            "spec": {"manifests": manifests},
                        });
                        api.patch(&format!("bench-{first}"), &params, &Patch::Apply(envelope))
                            .await
                    }
                })
                .buffer_unordered(concurrency)
                .try_collect::<Vec<_>>()
                .await?;
            requests += envelopes.len();
        }
        for status in [false, true] {
            if !status && form == Form::SharedUnpinned && version > 0 {
                // The members' Works name the envelope only: nothing of theirs changed.
                continue;
            }
            stream::iter(works.iter().cloned())
                .map(|(ns, first, end)| {
                    let (hub, params) = (hub.clone(), params.clone());
                    async move {
                        let api: Api<flotilla_api::Work> = Api::namespaced(hub, &ns);
                        let name = format!("bench-{first}");
                        if status {
                            // As the syncer reports an applied, available ConfigMap.
                            let entries: Vec<_> = (first..end)
                                .filter(|_| form != Form::Bare)
                                .map(|i| json!({
                                    "ordinal": i - first,
                                    "identity": {"version": "v1", "kind": "ConfigMap",
                                                 "resource": "configmaps",
                                                 "namespace": namespace, "name": format!("bench-{i}")},
                                    "resourceVersion": (1000 + i + version).to_string(),
                                    "applied": "True",
                                    "available": "True",
                                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                                }))
                                .map(|e| match form {
                                    Form::Strings
                                    | Form::Merge
                                    | Form::Update
                                    | Form::Shared
                                    | Form::SharedUnpinned => e.to_string().into(),
                                    _ => e,
                                })
                                .collect::<Vec<serde_json::Value>>();
                            let condition = |type_: &str, status: &str, reason: &str| json!({
                                "type": type_, "status": status, "reason": reason,
                                "message": format!("{} manifests", end - first),
                                "lastTransitionTime": "2026-12-01T00:00:00Z",
                                "observedGeneration": version + 1,
                            });
                            let status = json!({
                                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
                                "status": {
                                    "conditions": [condition("Applied", "True", "Applied"),
                                                   condition("Available", "True", "Available"),
                                                   condition("Degraded", "False", "Healthy")],
                                    "manifests": entries,
                                },
                            });
                            if form == Form::Update {
                                let key = (ns.clone(), name.clone());
                                let mut work = lock(last).get(&key).cloned().context("no Work written")?;
                                work.status = Some(serde_json::from_value(status["status"].clone())?);
                                let written = api
                                    .replace_status(&name, &PostParams::default(), &work)
                                    .await?;
                                lock(last).insert(key, written.clone());
                                Ok(written)
                            } else if form == Form::Merge {
                                let merge = PatchParams::default();
                                Ok(api.patch_status(&name, &merge, &Patch::Merge(status)).await?)
                            } else {
                                Ok(api.patch_status(&name, &params, &Patch::Apply(status)).await?)
                            }
                        } else {
                            // As the splitter writes them: each manifest as its JSON (or,
                            // shared, none: the envelope and its version named).
                            let manifests: Vec<_> = (first..end)
                                .filter(|_| !shared)
                                .map(|i| versioned_configmap(namespace, i, version))
                                .map(|m| if form == Form::Objects { m } else { m.to_string().into() })
                                .collect();
                            let mut work = json!({
                                "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
                                "metadata": {"name": name},
                                "spec": {"manifests": manifests},
                            });
                            if shared {
                                // A Work holds at least one manifest: a small one stands in
                                // for the reference a shared Work would hold.
                                work["spec"]["manifests"] = json!([json!({
                                    "apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": "envelope", "namespace": namespace},
                                }).to_string()]);
                                work["metadata"]["annotations"] = json!({
                                    "flotilla.dev/envelope":
                                        format!("{envelope_ns}/bench-{first}@{version}"),
                                });
                            }
                            let key = (ns.clone(), name.clone());
                            let written = match (form, version) {
                                (Form::Merge | Form::Update, 0) => {
                                    let work = serde_json::from_value(work)
                                        .map_err(kube::Error::SerdeError)?;
                                    api.create(&PostParams::default(), &work).await?
                                }
                                (Form::Merge, _) => {
                                    let merge = PatchParams::default();
                                    api.patch(&name, &merge, &Patch::Merge(work)).await?
                                }
                                (Form::Update, _) => {
                                    let mut now = lock(last).get(&key).cloned().context("no Work written")?;
                                    let new: flotilla_api::Work = serde_json::from_value(work)?;
                                    now.spec = new.spec;
                                    api.replace(&name, &PostParams::default(), &now).await?
                                }
                                _ => api.patch(&name, &params, &Patch::Apply(work)).await?,
                            };
                            if form == Form::Update {
                                lock(last).insert(key, written.clone());
                            }
                            anyhow::Ok(written)
                        }
                    }
                })
                .buffer_unordered(concurrency)
                .try_collect::<Vec<_>>()
                .await?;
            requests += works.len();
        }
    }
    Ok(requests)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn ensure_namespace(client: &Client, name: &str) -> Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until every member has `count` ConfigMaps named bench-* in `namespace`.
async fn wait_all(members: &[(String, Client)], namespace: &str, count: usize) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let mut done = true;
        for (_, c) in members {
            let api: Api<ConfigMap> = Api::namespaced(c.clone(), namespace);
            let n = api
                .list_metadata(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|o| {
                    o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("bench-"))
                })
                .count();
            done &= n >= count;
        }
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("not every object arrived within 10 minutes");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, namespace, count, concurrency, hub, members] = args.as_slice() else {
        bail!(
            "usage: bench_load <direct|works> <namespace> <count> <concurrency> <hub-kubeconfig> <member>=<kubeconfig>,..."
        );
    };
    let count: usize = count.parse()?;
    let concurrency: usize = concurrency.parse()?;
    let hub = client(hub).await?;
    let mut member_clients = Vec::new();
    for pair in members.split(',') {
        let (name, path) = pair.split_once('=').context("member=kubeconfig")?;
        member_clients.push((name.to_string(), client(path).await?));
    }
    let params = PatchParams::apply("flotilla-bench").force();
    let started = Instant::now();
    match mode.as_str() {
        "direct" => {
            for (_, c) in &member_clients {
                ensure_namespace(c, namespace).await?;
            }
            let writes = member_clients
                .iter()
                .flat_map(|(_, c)| (0..count).map(move |i| (c.clone(), i)));
            stream::iter(writes)
                .map(|(c, i)| {
                    let params = params.clone();
                    async move {
                        let api: Api<ConfigMap> = Api::namespaced(c, namespace);
                        api.patch(
                            &format!("bench-{i}"),
                            &params,
                            &Patch::Apply(configmap(namespace, i)),
                        )
                        .await
                    }
                })
                .buffer_unordered(concurrency)
                .try_collect::<Vec<_>>()
                .await?;
        }
        "works" | "hub-only" => {
            let suffix = if mode == "hub-only" { "-idle" } else { "" };
            if mode == "hub-only" {
                for (name, _) in &member_clients {
                    let ns = flotilla_api::names::cluster_namespace(&format!("{name}{suffix}"));
                    ensure_namespace(&hub, &ns).await?;
                }
            }
            let writes = member_clients
                .iter()
                .flat_map(|(name, _)| (0..count).map(move |i| (format!("{name}{suffix}"), i)));
            stream::iter(writes)
                .map(|(member, i)| {
                    let params = params.clone();
                    let hub = hub.clone();
                    async move {
                        let works: Api<flotilla_api::Work> =
                            Api::namespaced(hub, &flotilla_api::names::cluster_namespace(&member));
                        // As the splitter writes them: with the syncer's finalizer already set.
                        let work = json!({
                            "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
                            "metadata": {
                                "name": format!("bench-{i}"),
                                "finalizers": [flotilla_api::finalizers::SYNCER],
                            },
                            "spec": {"manifests": [configmap(namespace, i).to_string()]},
                        });
                        works
                            .patch(&format!("bench-{i}"), &params, &Patch::Apply(work))
                            .await
                    }
                })
                .buffer_unordered(concurrency)
                .try_collect::<Vec<_>>()
                .await?;
        }
        envelope if envelope.starts_with("envelopes-") => {
            let size = &envelope["envelopes-".len()..];
            let (size, form) = if let Some(size) = size.strip_prefix("typed-status-") {
                (size, Form::TypedStatus)
            } else if let Some(size) = size.strip_prefix("objects-") {
                (size, Form::Objects)
            } else if let Some(size) = size.strip_prefix("bare-") {
                (size, Form::Bare)
            } else if let Some(size) = size.strip_prefix("merge-") {
                (size, Form::Merge)
            } else if let Some(size) = size.strip_prefix("update-") {
                (size, Form::Update)
            } else if let Some(size) = size.strip_prefix("shared-unpinned-") {
                (size, Form::SharedUnpinned)
            } else if let Some(size) = size.strip_prefix("shared-") {
                (size, Form::Shared)
            } else {
                (size, Form::Strings)
            };
            let bundle: usize = size.parse()?;
            let requests = envelopes(
                &hub,
                &member_clients,
                namespace,
                count,
                (bundle.max(1), form),
                concurrency,
            )
            .await?;
            println!("{mode} {requests} {:.2}", started.elapsed().as_secs_f64());
            return Ok(());
        }
        other => bail!(
            "unknown mode {other}: direct, works, hub-only, envelopes-<B>, \
             envelopes-typed-status-<B>, envelopes-objects-<B>, envelopes-bare-<B>, \
             envelopes-merge-<B>, envelopes-update-<B>, envelopes-shared-<B> or \
             envelopes-shared-unpinned-<B>"
        ),
    }
    let written = started.elapsed();
    if mode != "hub-only" {
        wait_all(&member_clients, namespace, count).await?;
    }
    let all = started.elapsed();
    println!(
        "{mode} {} {:.2} {:.2}",
        count * member_clients.len(),
        written.as_secs_f64(),
        all.as_secs_f64()
    );
    Ok(())
}
