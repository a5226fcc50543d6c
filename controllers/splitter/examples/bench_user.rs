//! The load of `hack/bench.sh user`: the user's path. N ConfigMaps are created, edited and
//! deleted, once straight in every member (the baseline: the same client, the same concurrency,
//! all members in parallel) and once on the hub under a Placement that places them on every
//! member. Each phase is timed until every member agrees (followed with one watch per member),
//! and on the hub also until the
//! Placement reports every copy applied (or, after deletion, none placed). Then single edits of
//! one object on the hub, each timed from the write until the last member has it.
//!
//! Usage: bench_user <direct|direct-linked|hub-create|hub-edit|hub-delete|hub-single> <namespace>
//!        <count> <concurrency> <hub-kubeconfig> <member>=<kubeconfig>[,<member>=<kubeconfig>...]
//! `direct` runs create, edit and delete straight in the members; `direct-linked` the same with
//! the labels and annotations the syncer adds to each object it applies; each `hub-*` runs one phase on
//! the hub (so that the caller can read memory and API metrics between phases), where the
//! namespace must exist with Placement `user` selecting ConfigMaps labelled `bench=user`.
//! Prints `phase <name> <seconds until the members agree> <seconds until the Placement agrees>`
//! per phase, and for `hub-single` `single <p50> <p99> <max> <p50> <p99> <max> <p50> <p99>`
//! (seconds; the objects must exist): 50 single edits each on a settled fleet, then 50 each
//! 200 ms after the previous one reached every member; last, of the settled edits, the time
//! until the hub had the edit in every member's Work (the splitter's share, seen by a watch of
//! the Works, as the syncers see them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use flotilla_api::{Placement, Work, labels};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Config, ResourceExt};
use serde_json::json;

async fn client(path: &str) -> Result<Client> {
    let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading {path}"))?;
    let mut config =
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(Client::try_from(config)?)
}

fn configmap(namespace: &str, i: usize, version: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("bench-{i}"), "namespace": namespace,
                        "labels": {"bench": "user"}},
           "data": {"version": version, "payload": payload(i, version)}})
}

/// 256 characters of data that differ per object and version, as a real ConfigMap's do: hex
/// digits of a pseudo-random sequence (splitmix64), which no compressor shrinks below half, where
/// the same character repeated would shrink to nothing and flatter a controller that compresses
/// what it keeps.
fn payload(i: usize, version: &str) -> String {
    let mut state = version
        .bytes()
        .fold(i as u64, |h, b| h.rotate_left(8) ^ u64::from(b));
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..16).map(|_| format!("{:016x}", next())).collect()
}

/// The ConfigMap as the syncer applies it in a member: with the labels and annotations that
/// link it to its Work (what mode `direct-linked` measures the members' cost of).
fn linked_configmap(namespace: &str, i: usize, version: &str) -> serde_json::Value {
    let mut object = configmap(namespace, i, version);
    let metadata = &mut object["metadata"];
    metadata["labels"]["flotilla.dev/managed"] = json!("true");
    metadata["labels"]["flotilla.dev/cluster"] = json!("member1");
    metadata["annotations"] = json!({
        "flotilla.dev/work": format!("flotilla-cluster-member1/configmap-{namespace}-0123456789-{}", i / 50),
        "flotilla.dev/manifest-hash": format!("{:016x}", i),
        "flotilla.dev/source-api-version": "v1",
        "flotilla.dev/source-kind": "ConfigMap",
        "flotilla.dev/source-namespace": namespace,
    });
    object
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

/// What a watch of one cluster's bench ConfigMaps has seen: each object's `version`. Watched,
/// not listed again and again: polling 1,000 objects in every member would cost the machine more
/// the longer a phase takes, and so weigh on the slower path.
#[derive(Clone, Default)]
struct Seen {
    versions: Arc<Mutex<HashMap<String, String>>>,
    synced: Arc<AtomicBool>,
}

impl Seen {
    /// Whether the cluster has exactly `n` objects, all at `version` (n = 0: none).
    fn agrees(&self, n: usize, version: &str) -> bool {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        self.synced.load(Ordering::SeqCst)
            && versions.len() == n
            && versions.values().all(|v| v == version)
    }

    /// Whether the cluster's object `name` is at `version`.
    fn has(&self, name: &str, version: &str) -> bool {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions.get(name).is_some_and(|v| v == version)
    }
}

/// Waits until every watch of `members` has listed its cluster.
async fn watches_listed(members: &[Seen]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !members.iter().all(|m| m.synced.load(Ordering::SeqCst)) {
        if Instant::now() > deadline {
            bail!("the members' watches did not list within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Starts watching the bench ConfigMaps of `namespace` in one cluster.
fn track(client: &Client, namespace: &str) -> Seen {
    let seen = Seen::default();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let events = watcher(api, watcher::Config::default().labels("bench=user")).default_backoff();
    let into = seen.clone();
    tokio::spawn(async move {
        let version = |c: &ConfigMap| {
            c.data
                .as_ref()
                .and_then(|d| d.get("version"))
                .cloned()
                .unwrap_or_default()
        };
        let mut events = std::pin::pin!(events);
        let mut listed: HashMap<String, String> = HashMap::new();
        while let Some(event) = events.next().await {
            let mut versions = into.versions.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                Ok(watcher::Event::Init) => listed.clear(),
                Ok(watcher::Event::InitApply(c)) => {
                    listed.insert(c.name_any(), version(&c));
                }
                Ok(watcher::Event::InitDone) => {
                    *versions = std::mem::take(&mut listed);
                    into.synced.store(true, Ordering::SeqCst);
                }
                Ok(watcher::Event::Apply(c)) => {
                    versions.insert(c.name_any(), version(&c));
                }
                Ok(watcher::Event::Delete(c)) => {
                    versions.remove(&c.name_any());
                }
                Err(e) => eprintln!("watch of the bench ConfigMaps failed: {e}"),
            }
        }
    });
    seen
}

/// What a watch of the hub's Works of Placement `user` has seen: by Work namespace (one per
/// member), the `version` of bench-0 in the Work that carries it.
#[derive(Clone, Default)]
struct WorksSeen {
    versions: Arc<Mutex<HashMap<String, String>>>,
}

impl WorksSeen {
    /// Whether `members` Works carry bench-0 at `version`.
    fn all_have(&self, members: usize, version: &str) -> bool {
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        versions.values().filter(|v| *v == version).count() >= members
    }
}

/// Starts watching the Works of Placement `user` in every namespace of the hub. Read as generic
/// objects, whose manifests stay the JSON strings the hub serves: only bench-0's is decoded (a
/// typed Work decodes all 50 of every Work, ten Works an edit at 10 members, on the cores the
/// edit itself needs).
fn track_works(hub: &Client) -> WorksSeen {
    let seen = WorksSeen::default();
    let api: Api<DynamicObject> = Api::all_with(hub.clone(), &ApiResource::erase::<Work>(&()));
    let config = watcher::Config::default().labels(&format!("{}=user", labels::PLACEMENT));
    let events = watcher(api, config).default_backoff();
    let into = seen.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            let work = match event {
                Ok(watcher::Event::Apply(w) | watcher::Event::InitApply(w)) => w,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("watch of the Works failed: {e}");
                    continue;
                }
            };
            let version = work.data["spec"]["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m.as_str())
                .filter(|m| m.contains("\"bench-0\""))
                .filter_map(|m| serde_json::from_str::<serde_json::Value>(m).ok())
                .find(|m| m["metadata"]["name"] == "bench-0")
                .and_then(|m| m["data"]["version"].as_str().map(str::to_string));
            if let (Some(version), Some(ns)) = (version, work.namespace()) {
                let mut versions = into.versions.lock().unwrap_or_else(|e| e.into_inner());
                versions.insert(ns, version);
            }
        }
    });
    seen
}

/// Waits until every member has exactly `n` objects, all at `version` (n = 0: none).
async fn members_agree(members: &[Seen], n: usize, version: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    while !members.iter().all(|m| m.agrees(n, version)) {
        if Instant::now() > deadline {
            bail!("the members did not agree within 15 minutes");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Waits until Placement `user` reports `placed` copies, every one applied, for its latest
/// observation of the objects.
async fn placement_agrees(hub: &Client, namespace: &str, placed: i32) -> Result<()> {
    let api: Api<Placement> = Api::namespaced(hub.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        let status = api.get("user").await?.status.unwrap_or_default();
        let copies = status.copies.unwrap_or_default();
        let applied = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Applied" && c.status == "True");
        if copies.placed == placed && copies.applied == placed && copies.removing == 0 && applied {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the Placement did not report {placed} applied copies within 15 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Applies (or deletes) bench-0 … bench-(n-1) in every cluster of `targets`.
async fn write_all(
    targets: &[Client],
    namespace: &str,
    n: usize,
    concurrency: usize,
    version: Option<&str>,
    linked: bool,
) -> Result<()> {
    let params = PatchParams::apply("flotilla-bench").force();
    let render = if linked { linked_configmap } else { configmap };
    let writes = targets
        .iter()
        .flat_map(|c| (0..n).map(move |i| (c.clone(), i)));
    stream::iter(writes)
        .map(|(c, i)| {
            let params = params.clone();
            async move {
                let api: Api<ConfigMap> = Api::namespaced(c, namespace);
                let name = format!("bench-{i}");
                match version {
                    Some(v) => api
                        .patch(&name, &params, &Patch::Apply(render(namespace, i, v)))
                        .await
                        .map(|_| ()),
                    None => match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) => Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                        Err(e) => Err(e),
                    },
                }
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, namespace, n, concurrency, hub, members] = args.as_slice() else {
        bail!(
            "usage: bench_user <direct|direct-linked|hub-create|hub-edit|hub-delete|hub-single> <namespace> <count> <concurrency> <hub-kubeconfig> <member>=<kubeconfig>,..."
        );
    };
    let n: usize = n.parse()?;
    let concurrency: usize = concurrency.parse()?;
    let hub = client(hub).await?;
    let mut member_clients = Vec::new();
    for pair in members.split(',') {
        let (name, path) = pair.split_once('=').context("member=kubeconfig")?;
        member_clients.push((name.to_string(), client(path).await?));
    }
    let copies = i32::try_from(n * member_clients.len())?;
    let phases: Vec<(&str, Option<&str>, usize, i32)> = match mode.as_str() {
        "direct" | "direct-linked" | "hub-create" => vec![("create", Some("v1"), n, copies)],
        "hub-edit" => vec![("edit", Some("v2"), n, copies)],
        "hub-delete" => vec![("delete", None, 0, 0)],
        "hub-single" => vec![],
        other => bail!("unknown mode {other}"),
    };
    let linked = mode == "direct-linked";
    let on_hub = !mode.starts_with("direct");
    let phases = if on_hub {
        phases
    } else {
        vec![
            ("create", Some("v1"), n, copies),
            ("edit", Some("v2"), n, copies),
            ("delete", None, 0, 0),
        ]
    };
    let targets: Vec<Client> = if on_hub {
        vec![hub.clone()]
    } else {
        for (_, c) in &member_clients {
            ensure_namespace(c, namespace).await?;
        }
        member_clients.iter().map(|(_, c)| c.clone()).collect()
    };
    let seen: Vec<Seen> = member_clients
        .iter()
        .map(|(_, c)| track(c, namespace))
        .collect();
    while !seen.iter().all(|s| s.synced.load(Ordering::SeqCst)) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for (phase, version, expected, placed) in phases {
        let started = Instant::now();
        write_all(&targets, namespace, n, concurrency, version, linked).await?;
        members_agree(&seen, expected, version.unwrap_or("-")).await?;
        let members_done = started.elapsed().as_secs_f64();
        let placement_done = if on_hub {
            placement_agrees(&hub, namespace, placed).await?;
            format!("{:.2}", started.elapsed().as_secs_f64())
        } else {
            "-".into()
        };
        println!("phase {phase} {members_done:.2} {placement_done}");
    }
    if mode != "hub-single" {
        return Ok(());
    }

    // Single edits of one object among the n that exist (and are settled), first each on a
    // settled fleet, then 200 ms after the previous one reached every member (when the passes
    // reporting the previous edit's status are still running).
    let watched: Vec<Seen> = member_clients
        .iter()
        .map(|(_, c)| track(c, namespace))
        .collect();
    watches_listed(&watched).await?;
    let works = track_works(&hub);
    let (settled, on_hub) = single_edits(&hub, namespace, &watched, &works, "s", SETTLE).await?;
    let (streamed, _) = single_edits(
        &hub,
        namespace,
        &watched,
        &works,
        "t",
        Duration::from_millis(200),
    )
    .await?;
    println!("single {settled} {streamed} {on_hub}");
    Ok(())
}

/// How long the fleet is left between two settled single edits: the passes that report an edit
/// take well under this.
const SETTLE: Duration = Duration::from_secs(1);

/// The `q` quantile of `sorted` (not empty).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

/// 50 edits of bench-0, each timed from the hub write until every member's watch has it, `gap`
/// after the previous one reached every member: `<p50> <p99> <max>` in seconds; and `<p50>
/// <p99>` of the time until every member's Work on the hub had it (`works`).
async fn single_edits(
    hub: &Client,
    namespace: &str,
    watched: &[Seen],
    works: &WorksSeen,
    tag: &str,
    gap: Duration,
) -> Result<(String, String)> {
    let api: Api<ConfigMap> = Api::namespaced(hub.clone(), namespace);
    let params = PatchParams::apply("flotilla-bench").force();
    let mut times = Vec::new();
    let mut on_hub = Vec::new();
    for edit in 1..=50 {
        let version = format!("{tag}{edit}");
        let started = Instant::now();
        api.patch(
            "bench-0",
            &params,
            &Patch::Apply(configmap(namespace, 0, &version)),
        )
        .await?;
        // Followed with each member's watch (polling the members one after the other would add
        // a round of GETs to every measurement, more the more members there are).
        let mut works_done = None;
        while !watched.iter().all(|m| m.has("bench-0", &version)) {
            if started.elapsed() > Duration::from_secs(120) {
                bail!("single edit {edit} did not reach every member within 120 s");
            }
            if works_done.is_none() && works.all_have(watched.len(), &version) {
                works_done = Some(started.elapsed().as_secs_f64());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        times.push(started.elapsed().as_secs_f64());
        // Seen in the members before the watch of the Works had them all: not later than that.
        on_hub.push(works_done.unwrap_or(started.elapsed().as_secs_f64()));
        tokio::time::sleep(gap).await;
    }
    on_hub.sort_by(f64::total_cmp);
    let on_hub = format!(
        "{:.3} {:.3}",
        quantile(&on_hub, 0.5),
        quantile(&on_hub, 0.99)
    );
    times.sort_by(f64::total_cmp);
    let members = format!(
        "{:.3} {:.3} {:.3}",
        quantile(&times, 0.5),
        quantile(&times, 0.99),
        times[times.len() - 1]
    );
    Ok((members, on_hub))
}
