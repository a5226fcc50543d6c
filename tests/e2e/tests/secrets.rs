//! Placed Secrets: their data never sits in a Work. The splitter keeps it in a hub Secret of the
//! member's namespace that belongs to the Work (`flotilla.dev/data-secret` names it in the
//! manifest); the syncer puts it back into the object it applies. What etcd stores of the Works
//! holds none of it; a change of the data still reaches the members; a missing hub Secret is
//! reported and leaves the member's copy alone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use base64::Engine as _;
use flotilla_api::{Work, annotations, labels, names, reasons, work_data};
use flotilla_e2e::fleet::{Fleet, Second};
use flotilla_e2e::{RUN_DIR, Seen, api, holds_for, random_suffix, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

/// How long each step may take.
const WAIT: Duration = Duration::from_secs(60);

/// The label of the Secrets the tests place (their namespaces may hold others, which stay where
/// they are).
const PLACED: &str = "e2e.flotilla.dev/placed";

/// The etcd `hack/clusters.sh` runs every cluster on: `FLOTILLA_ETCD_URL`, or the client port it
/// uses (its port base, from the run directory's `env.conf`, + 7347).
fn etcd_url() -> Result<String> {
    if let Ok(url) = std::env::var("FLOTILLA_ETCD_URL") {
        return Ok(url);
    }
    let run_dir = std::env::var_os(RUN_DIR).ok_or_else(|| anyhow!("{RUN_DIR} is not set"))?;
    let conf = PathBuf::from(run_dir).join("env.conf");
    let text =
        std::fs::read_to_string(&conf).with_context(|| format!("reading {}", conf.display()))?;
    let base: u16 = text
        .lines()
        .find_map(|l| l.strip_prefix("PORT_BASE="))
        .ok_or_else(|| anyhow!("no PORT_BASE in {}", conf.display()))?
        .trim()
        .parse()?;
    Ok(format!("http://127.0.0.1:{}", base + 7347))
}

/// What etcd stores under `key` (the bytes the hub's apiserver wrote), read through etcd's v3
/// JSON gateway (`POST /v3/kv/range`): no etcdctl needed.
async fn etcd_value(key: &str) -> Result<Option<Vec<u8>>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let body = json!({"key": b64.encode(key)}).to_string();
    let url = format!("{}/v3/kv/range", etcd_url()?);
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--fail",
            "-X",
            "POST",
            url.as_str(),
            "-d",
            body.as_str(),
        ])
        .output()
        .await
        .context("running curl")?;
    if !out.status.success() {
        bail!(
            "POST {url} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let answer: Value = serde_json::from_slice(&out.stdout)?;
    match answer["kvs"][0]["value"].as_str() {
        Some(v) => Ok(Some(b64.decode(v)?)),
        None => Ok(None),
    }
}

/// The etcd key of a Work of the hub (whose apiserver stores under `/hub/registry`).
fn work_key(namespace: &str, name: &str) -> String {
    format!("/hub/registry/flotilla.dev/works/{namespace}/{name}")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Secret `name` of `ns` in every member: its data (as text), by Cluster name (`None` where
/// there is none).
async fn member_copies(
    members: &[(String, Client)],
    ns: &str,
    name: &str,
) -> Result<BTreeMap<String, Option<BTreeMap<String, String>>>> {
    let mut out = BTreeMap::new();
    for (cluster, client) in members {
        let secret = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt(name)
            .await?;
        let data = secret.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect()
        });
        out.insert(cluster.clone(), data);
    }
    Ok(out)
}

/// Waits until every member's Secret `name` of `ns` has exactly `data`.
async fn copies_have(
    fleet: &Fleet,
    ns: &str,
    name: &str,
    data: &BTreeMap<String, String>,
) -> Result<()> {
    wait_for(
        &format!("Secret {ns}/{name} in every member to have {data:?}"),
        WAIT,
        || async {
            let copies = member_copies(&fleet.members, ns, name).await?;
            Ok(if copies.values().all(|c| c.as_ref() == Some(data)) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{copies:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

/// Checks the Works that place hub namespace `ns`'s Secrets on every member: as etcd stores them,
/// they name Secret `name` and hold none of `values` (nor their base64); each manifest names its
/// Work's hub Secret, which belongs to the Work and holds the data of exactly the Work's
/// Secrets. Returns the namespaces and names of those Works.
async fn works_hold_no_data(
    fleet: &Fleet,
    ns: &str,
    name: &str,
    values: &[&String],
) -> Result<Vec<(String, String)>> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut checked = Vec::new();
    for (cluster, _) in &fleet.members {
        let works = api::works_from(&fleet.hub, cluster, ns).await?;
        ensure!(
            !works.is_empty(),
            "no Work places {ns}'s Secrets on {cluster}"
        );
        let namespace = names::cluster_namespace(cluster);
        for work in works {
            let work_name = work.name_any();
            let stored = etcd_value(&work_key(&namespace, &work_name))
                .await?
                .ok_or_else(|| anyhow!("etcd has no Work {namespace}/{work_name}"))?;
            ensure!(
                contains(&stored, name.as_bytes()),
                "the Work {namespace}/{work_name} in etcd does not name Secret {name}: is this the right key?"
            );
            for value in values {
                for form in [value.as_bytes().to_vec(), b64.encode(value).into_bytes()] {
                    ensure!(
                        !contains(&stored, &form),
                        "the Work {namespace}/{work_name} as etcd stores it holds the Secret's data ({}):\n{}",
                        String::from_utf8_lossy(&form),
                        String::from_utf8_lossy(&stored)
                    );
                }
            }
            // Each manifest names the hub Secret with its data: the Work's own.
            let secrets: Api<Secret> = Api::namespaced(fleet.hub.clone(), &namespace);
            for m in &work.spec.manifests {
                ensure!(
                    m.data.get("data").is_none() && m.data.get("stringData").is_none(),
                    "a manifest of Work {work_name} has data: {m:?}"
                );
                let reference = m
                    .annotations()
                    .get(annotations::DATA_SECRET)
                    .ok_or_else(|| {
                        anyhow!("manifest without {}: {m:?}", annotations::DATA_SECRET)
                    })?;
                let held = secrets.get(reference).await.with_context(|| {
                    format!("the hub Secret {namespace}/{reference} of Work {work_name}")
                })?;
                ensure!(
                    held.type_.as_deref() == Some(work_data::SECRET_TYPE),
                    "hub Secret {reference} is of type {:?}",
                    held.type_
                );
                ensure!(
                    held.owner_references()
                        .iter()
                        .any(|o| o.kind == "Work" && Some(&o.uid) == work.metadata.uid.as_ref()),
                    "hub Secret {reference} does not belong to Work {work_name}: {:?}",
                    held.owner_references()
                );
                ensure!(
                    held.labels().get(labels::WORK_DATA).map(String::as_str) == Some("true")
                        && held.labels().get(labels::CLUSTER) == Some(cluster),
                    "hub Secret {reference} is not labelled as Flotilla's: {:?}",
                    held.labels()
                );
                let keys: Vec<&String> = held.data.iter().flat_map(|d| d.keys()).collect();
                let names: Vec<&String> = work
                    .spec
                    .manifests
                    .iter()
                    .filter_map(|m| m.metadata.name.as_ref())
                    .collect();
                ensure!(
                    keys == names,
                    "hub Secret {reference} holds the data of {keys:?}, its Work places {names:?}"
                );
            }
            checked.push((namespace.clone(), work_name));
        }
    }
    Ok(checked)
}

/// Waits until the Works `works` and their hub Secrets are gone.
async fn gone(fleet: &Fleet, works: &[(String, String)]) -> Result<()> {
    wait_for("the Works and their hub Secrets to go", WAIT, || async {
        let mut left = Vec::new();
        for (namespace, name) in works {
            if Api::<Work>::namespaced(fleet.hub.clone(), namespace)
                .get_opt(name)
                .await?
                .is_some()
            {
                left.push(format!("Work {namespace}/{name}"));
            }
            if Api::<Secret>::namespaced(fleet.hub.clone(), namespace)
                .get_opt(name)
                .await?
                .is_some()
            {
                left.push(format!("Secret {namespace}/{name}"));
            }
        }
        Ok(Seen::unless(&left, ()))
    })
    .await
}

fn random_value(team: &str, key: &str) -> String {
    format!("{team}-{key}-{}{}", random_suffix(), random_suffix())
}

#[tokio::test]
async fn placed_secrets_reach_the_members_and_no_work_in_etcd_holds_their_data() -> Result<()> {
    let fleet = Fleet::builder("secrets")
        .second_namespace(Second::Everywhere)
        .start()
        .await?;
    let hub = &fleet.hub;
    let a = fleet.ns.name().to_string();
    let b = fleet
        .other
        .as_ref()
        .map(|o| o.name().to_string())
        .ok_or_else(|| anyhow!("no second namespace"))?;
    // Secret `creds` in both namespaces, each team with data of its own: one key as data, one
    // as stringData.
    let mut wanted: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (ns, team) in [(&a, "a"), (&b, "b")] {
        let data: BTreeMap<String, String> = ["password", "token"]
            .into_iter()
            .map(|k| (k.to_string(), random_value(team, k)))
            .collect();
        api::apply(
            hub,
            &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                    "metadata": {"name": "secrets", "namespace": ns},
                    "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Secret",
                                                    "labelSelector": {"matchLabels": {PLACED: "true"}}}]}}),
            false,
        )
        .await??;
        let b64 = base64::engine::general_purpose::STANDARD;
        api::apply(
            hub,
            &json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "creds", "namespace": ns, "labels": {PLACED: "true"}},
                    "data": {"password": b64.encode(&data["password"])},
                    "stringData": {"token": data["token"]}}),
            false,
        )
        .await??;
        wanted.insert(ns.clone(), data);
    }
    // Team a has a second Secret, in the same Works.
    let other: BTreeMap<String, String> = [("key".to_string(), random_value("a", "other"))].into();
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "other", "namespace": a, "labels": {PLACED: "true"}},
                "stringData": other}),
        false,
    )
    .await??;
    copies_have(&fleet, &a, "other", &other).await?;
    for ns in [&a, &b] {
        copies_have(&fleet, ns, "creds", &wanted[ns]).await?;
    }
    let values = |ns: &String| wanted[ns].values().collect::<Vec<_>>();
    let mut all: Vec<&String> = wanted.values().flat_map(|d| d.values()).collect();
    all.extend(other.values());
    let works_a = works_hold_no_data(&fleet, &a, "creds", &all).await?;
    let works_b = works_hold_no_data(&fleet, &b, "creds", &all).await?;
    let uids_b = member_uids(&fleet, &b).await?;

    // A change of team a's data reaches its copies (not team b's), and no Work holds it either.
    let old_a = values(&a).into_iter().cloned().collect::<Vec<_>>();
    let new_password = random_value("a2", "password");
    Api::<Secret>::namespaced(hub.clone(), &a)
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": new_password}})),
        )
        .await?;
    if let Some(data) = wanted.get_mut(&a) {
        data.insert("password".into(), new_password.clone());
    }
    copies_have(&fleet, &a, "creds", &wanted[&a]).await?;
    copies_have(&fleet, &b, "creds", &wanted[&b]).await?;
    let mut all: Vec<&String> = wanted.values().flat_map(|d| d.values()).collect();
    all.extend(old_a.iter());
    all.extend(other.values());
    works_hold_no_data(&fleet, &a, "creds", &all).await?;

    // Deleting team a's hub Secret removes its copies (its data leaves the Works' hub Secrets);
    // team b's stay as they are.
    Api::<Secret>::namespaced(hub.clone(), &a)
        .delete("creds", &DeleteParams::default())
        .await?;
    wait_for("team a's copies to go", WAIT, || async {
        let copies = member_copies(&fleet.members, &a, "creds").await?;
        Ok(if copies.values().all(Option::is_none) {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{copies:?}"))
        })
    })
    .await?;
    wait_for("creds to leave team a's Works", WAIT, || async {
        let mut holding = Vec::new();
        for (cluster, _) in &fleet.members {
            for w in api::works_from(hub, cluster, &a).await? {
                if w.spec
                    .manifests
                    .iter()
                    .any(|m| m.metadata.name.as_deref() == Some("creds"))
                {
                    holding.push(w.name_any());
                }
            }
        }
        Ok(Seen::unless(&holding, ()))
    })
    .await?;
    works_hold_no_data(&fleet, &a, "other", &all).await?;
    copies_have(&fleet, &a, "other", &other).await?;
    ensure!(
        member_uids(&fleet, &b).await? == uids_b,
        "team b's copies changed when team a deleted its Secret"
    );
    copies_have(&fleet, &b, "creds", &wanted[&b]).await?;
    // Its last Secret gone, team a's Works go, and their hub Secrets with them.
    Api::<Secret>::namespaced(hub.clone(), &a)
        .delete("other", &DeleteParams::default())
        .await?;
    gone(&fleet, &works_a).await?;

    // Deleting team b's Placement leaves its Works and copies as they are (as for every kind);
    // deleting those Works removes the copies, and the Works' hub Secrets go with them.
    Api::<flotilla_api::Placement>::namespaced(hub.clone(), &b)
        .delete("secrets", &DeleteParams::default())
        .await?;
    holds_for(
        "team b's copies, Works and hub Secrets to stay",
        Duration::from_secs(5),
        || async {
            if member_uids(&fleet, &b).await? != uids_b {
                return Ok(Err("team b's copies changed".to_string()));
            }
            for (namespace, name) in &works_b {
                let work = Api::<Work>::namespaced(hub.clone(), namespace)
                    .get_opt(name)
                    .await?;
                let data = Api::<Secret>::namespaced(hub.clone(), namespace)
                    .get_opt(name)
                    .await?;
                if work.is_none() || data.is_none() {
                    return Ok(Err(format!(
                        "Work {namespace}/{name} or its hub Secret went"
                    )));
                }
            }
            Ok(Ok(()))
        },
    )
    .await?;
    for (namespace, name) in &works_b {
        Api::<Work>::namespaced(hub.clone(), namespace)
            .delete(name, &DeleteParams::default())
            .await?;
    }
    wait_for("team b's copies to go", WAIT, || async {
        let copies = member_copies(&fleet.members, &b, "creds").await?;
        Ok(if copies.values().all(Option::is_none) {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{copies:?}"))
        })
    })
    .await?;
    gone(&fleet, &works_b).await?;
    Ok(())
}

/// The UID of Secret `creds` of `ns` in every member.
async fn member_uids(fleet: &Fleet, ns: &str) -> Result<BTreeMap<String, Option<String>>> {
    let mut out = BTreeMap::new();
    for (cluster, client) in &fleet.members {
        let uid = Api::<Secret>::namespaced(client.clone(), ns)
            .get_opt("creds")
            .await?
            .and_then(|s| s.metadata.uid);
        out.insert(cluster.clone(), uid);
    }
    Ok(out)
}

/// A hub Secret holding the data of Secret `creds`: `password` = `value`.
fn data_secret(name: &str, value: &str) -> Secret {
    let data: BTreeMap<String, ByteString> = [(
        "password".to_string(),
        ByteString(value.as_bytes().to_vec()),
    )]
    .into();
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        type_: Some(work_data::SECRET_TYPE.to_string()),
        data: Some([("creds".to_string(), work_data::encode(&data))].into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_missing_hub_secret_is_reported_and_leaves_the_member_copy_alone() -> Result<()> {
    let s = Fleet::syncer_only("secret-data").start().await?;
    let namespace = names::cluster_namespace(s.member(0).cluster);
    let hub_secrets: Api<Secret> = Api::namespaced(s.hub.clone(), &namespace);
    hub_secrets
        .create(&PostParams::default(), &data_secret("creds", "one"))
        .await?;
    let manifest = |version: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "creds", "namespace": s.ns.name(),
                            "annotations": {annotations::DATA_SECRET: "creds",
                                            annotations::DATA_VERSION: version}}})
    };
    s.create_work("creds", json!({"manifests": [manifest("1")]}))
        .await?;
    let member: Api<Secret> = Api::namespaced(s.member(0).client.clone(), s.ns.name());
    let password = || async {
        let secret = member.get_opt("creds").await?;
        Ok::<_, anyhow::Error>(secret.map(|s| {
            let data = s.data.unwrap_or_default();
            let annotated = s.metadata.annotations.unwrap_or_default();
            (
                data.get("password")
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned()),
                annotated.contains_key(annotations::DATA_SECRET)
                    || annotated.contains_key(annotations::DATA_VERSION),
            )
        }))
    };
    wait_for("the member Secret to have its data", WAIT, || async {
        Ok(match password().await? {
            Some((Some(p), false)) if p == "one" => Seen::Done(()),
            other => Seen::not_yet(format!("{other:?}")),
        })
    })
    .await
    .map_err(|e| e.context(s.syncer_log()))?;
    s.work_condition("creds", "Applied", "True", None, WAIT)
        .await?;

    // The hub Secret goes and the Work changes: reported, and the member keeps its copy.
    hub_secrets
        .delete("creds", &DeleteParams::default())
        .await?;
    s.works()
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": [manifest("2")]}})),
        )
        .await?;
    let work = s
        .work_condition(
            "creds",
            "Applied",
            "False",
            Some(reasons::SECRET_DATA_MISSING),
            WAIT,
        )
        .await
        .map_err(|e| e.context(s.syncer_log()))?;
    let message = work
        .status
        .iter()
        .flat_map(|st| st.conditions.iter())
        .find(|c| c.type_ == "Applied")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    ensure!(
        message.contains(&format!("{namespace}/creds")),
        "the condition names the hub Secret: {message}"
    );
    wait_for("an Event about the missing data", WAIT, || async {
        let events = Api::<Event>::namespaced(s.hub.clone(), &namespace)
            .list(&ListParams::default())
            .await?;
        Ok(
            if events.items.iter().any(|e| {
                e.reason.as_deref() == Some(reasons::SECRET_DATA_MISSING)
                    && e.involved_object.name.as_deref() == Some("creds")
            }) {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{} events", events.items.len()))
            },
        )
    })
    .await?;
    holds_for(
        "the member Secret to keep its data",
        Duration::from_secs(5),
        || async {
            Ok(match password().await? {
                Some((Some(p), _)) if p == "one" => Ok(()),
                other => Err(format!("{other:?}")),
            })
        },
    )
    .await?;

    // Back with new data: applied again.
    hub_secrets
        .create(&PostParams::default(), &data_secret("creds", "two"))
        .await?;
    wait_for("the member Secret to have the new data", WAIT, || async {
        Ok(match password().await? {
            Some((Some(p), false)) if p == "two" => Seen::Done(()),
            other => Seen::not_yet(format!("{other:?}")),
        })
    })
    .await
    .map_err(|e| e.context(s.syncer_log()))?;
    s.work_condition("creds", "Applied", "True", None, WAIT)
        .await?;
    Ok(())
}
