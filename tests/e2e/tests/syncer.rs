//! The syncer against real members: Works reach the member and their status comes back, drift
//! is reverted, objects Flotilla did not create are reported as conflicts and left alone (or
//! adopted when asked), and deletion follows deletePolicy.
//!
//! Each test runs its own registration controller and syncer, scoped to its own Cluster with
//! `--cluster-selector`.

use std::time::Duration;

use anyhow::{Result, ensure};
use flotilla_api::condition::ConditionStatus;
use flotilla_api::labels;
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::{Seen, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// How long each step may take.
const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn works_reach_the_member_status_flows_up_and_drift_is_reverted() -> Result<()> {
    let s = Fleet::syncer_only("sync-flow").start().await?;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": s.ns.name()},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}
    });
    s.create_work(
        "web",
        json!({"manifests": [s.configmap("settings", json!({"color": "blue"})), deployment.clone()]}),
    )
    .await?;

    let work = s
        .work_condition("web", "Available", "True", None, WAIT)
        .await?;
    s.work_condition("web", "Applied", "True", Some("Applied"), WAIT)
        .await?;
    // As the hub stores it: each status entry a JSON string, whose fields the hub does not
    // check on every write of the Work (docs/benchmarks.md, "What a Work costs the hub").
    let stored: Api<DynamicObject> = Api::namespaced_with(
        s.hub.clone(),
        &flotilla_api::names::cluster_namespace(s.member(0).cluster),
        &ApiResource::erase::<flotilla_api::Work>(&()),
    );
    let stored = stored.get("web").await?.data["status"]["manifests"].clone();
    ensure!(
        stored
            .as_array()
            .is_some_and(|e| e.len() == 2 && e.iter().all(Value::is_string)),
        "the hub stores each status entry as a JSON string: {stored}"
    );
    let status = work.status.unwrap_or_default();
    let d = status
        .manifests
        .iter()
        .find(|m| m.identity.kind == "Deployment")
        .ok_or_else(|| anyhow::anyhow!("no Deployment in Work status: {:?}", status.manifests))?;
    ensure!(
        d.status
            .as_ref()
            .and_then(|s| s.get("availableReplicas"))
            .and_then(Value::as_i64)
            == Some(2),
        "the member's Deployment status is copied into the Work: {:?}",
        d.status
    );
    let cm = s.member_configmaps().get("settings").await?;
    let cm_labels = cm.metadata.labels.unwrap_or_default();
    ensure!(
        cm_labels.get(labels::MANAGED).map(String::as_str) == Some("true"),
        "managed label: {cm_labels:?}"
    );
    let member_deploy: Api<Deployment> = Api::namespaced(s.member(0).client.clone(), s.ns.name());
    ensure!(
        member_deploy.get_opt("web").await?.is_some(),
        "the Deployment is in the member"
    );

    // An update of the Work reaches the member.
    let works = s.works();
    let manifests = json!([
        s.configmap("settings", json!({"color": "green"})),
        deployment
    ]);
    works
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": manifests}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("green"), WAIT)
        .await?;

    // A hand edit in the member is reverted.
    s.member_configmaps()
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    s.wait_member_data("settings", "color", Some("green"), WAIT)
        .await?;

    // Deleting the Work deletes its objects from the member (deletePolicy Delete by default).
    works.delete("web", &DeleteParams::default()).await?;
    wait_for(
        "the Work's objects to leave the member",
        Duration::from_secs(60),
        || async {
            let cm = s.member_configmaps().get_opt("settings").await?.is_some();
            let dep = member_deploy.get_opt("web").await?.is_some();
            let work = works.get_opt("web").await?.is_some();
            Ok(if !cm && !dep && !work {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("configmap={cm} deployment={dep} work={work}"))
            })
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn unmanaged_objects_are_conflicts_until_adopted_and_orphan_leaves_objects() -> Result<()> {
    let s = Fleet::syncer_only("sync-conflict").start().await?;
    let existing: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "precious", "namespace": s.ns.name()}, "data": {"owner": "someone else"}
    }))?;
    s.member_configmaps()
        .create(&PostParams::default(), &existing)
        .await?;

    s.create_work(
        "take",
        json!({"manifests": [s.configmap("precious", json!({"owner": "flotilla"}))]}),
    )
    .await?;
    let w = s
        .work_condition("take", "Applied", "False", Some("Conflict"), WAIT)
        .await?;
    let message = w
        .status
        .and_then(|st| st.conditions.into_iter().find(|c| c.type_ == "Applied"))
        .map(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains(&format!("{}/precious", s.ns.name())),
        "the conflict names the object: {message}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    s.wait_member_data("precious", "owner", Some("someone else"), WAIT)
        .await?;

    // Adopt takes it over.
    s.works()
        .patch(
            "take",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"conflictPolicy": "Adopt", "deletePolicy": "Orphan"}})),
        )
        .await?;
    s.wait_member_data("precious", "owner", Some("flotilla"), WAIT)
        .await?;
    s.work_condition("take", "Applied", "True", None, WAIT)
        .await?;

    // Orphan: deleting the Work leaves the object in the member.
    s.works().delete("take", &DeleteParams::default()).await?;
    let works = s.works();
    wait_for(
        "the Work to be deleted",
        Duration::from_secs(30),
        || async {
            Ok(if works.get_opt("take").await?.is_none() {
                Seen::Done(())
            } else {
                Seen::not_yet("still there")
            })
        },
    )
    .await?;
    ensure!(
        s.member_data("precious").await?.is_some(),
        "deletePolicy Orphan must leave the object in the member"
    );
    Ok(())
}

/// A stolen registration token reaches no member: it cannot rewrite a Work (it could patch any
/// Work's manifests), and deleting a member's hub namespace — which it may, to remove a Cluster —
/// deletes the Works in it but nothing in the member (the syncer deleted every object of every
/// Work there). Nor does an admin who deletes that namespace by mistake.
#[tokio::test]
async fn a_members_hub_namespace_deleted_by_a_stolen_registration_token_deletes_nothing_in_the_member()
-> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;

    let s = Fleet::syncer_only("sync-nsdel").start().await?;
    s.create_work(
        "web",
        json!({"manifests": [s.configmap("settings", json!({"color": "blue"}))]}),
    )
    .await?;
    s.wait_member_data("settings", "color", Some("blue"), WAIT)
        .await?;
    let registration = s.identities.client("registration").await?;
    let namespace = flotilla_api::names::cluster_namespace(s.member(0).cluster);
    let stolen: Api<flotilla_api::Work> = Api::namespaced(registration.clone(), &namespace);
    let rewrite = stolen
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"manifests": [s.configmap("settings", json!({"color": "evil"}))]}}),
            ),
        )
        .await;
    ensure!(
        matches!(&rewrite, Err(kube::Error::Api(e)) if e.code == 403),
        "registration must not rewrite a Work: {:?}",
        rewrite.map(|_| ())
    );
    Api::<Namespace>::all(registration)
        .delete(&namespace, &DeleteParams::default())
        .await?;
    let works = s.works();
    wait_for("the Work to go with its namespace", WAIT, || async {
        Ok(match works.get_opt("web").await? {
            None => Seen::Done(()),
            Some(w) => Seen::not_yet(format!("finalizers {:?}", w.metadata.finalizers)),
        })
    })
    .await?;
    // Whatever the syncer did, it did before letting go of the Work; a moment more for a
    // deletion already sent.
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(
        s.member_data("settings").await?.is_some(),
        "a Work deleted with its hub namespace must leave its objects in the member"
    );
    Ok(())
}

/// Kind Gadget of a group of its own (with a status subresource), served by the test's member
/// only, with `scope`; its CRD goes when this is dropped.
struct MemberGadgets {
    group: String,
    resource: kube::api::ApiResource,
    _cleanup: flotilla_e2e::api::ClusterScopedObjects,
}

async fn member_gadgets(s: &Fleet, scope: &str) -> Result<MemberGadgets> {
    use flotilla_e2e::{api, random_suffix};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, ListParams};

    let group = format!("e2e-{}.example.com", random_suffix());
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": scope,
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}});
    let mut cleanup = api::ClusterScopedObjects::new(s.member(0).info);
    cleanup.add(
        ApiResource::erase::<CustomResourceDefinition>(&()),
        format!("gadgets.{group}"),
    );
    api::apply(s.member(0).client, &crd, false)
        .await?
        .map_err(|e| anyhow::anyhow!("the member's CRD: {e}"))?;
    let resource = ApiResource {
        group: group.clone(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let all: Api<DynamicObject> = Api::all_with(s.member(0).client.clone(), &resource);
    wait_for("the member to serve Gadgets", WAIT, || async {
        Ok(match all.list(&ListParams::default()).await {
            Ok(_) => Seen::Done(()),
            Err(e) => Seen::not_yet(e),
        })
    })
    .await?;
    Ok(MemberGadgets {
        group,
        resource,
        _cleanup: cleanup,
    })
}

/// A kind that is namespaced on the hub but cluster-scoped in the member (a CRD of another
/// version of a project): a tenant's namespaced object of it is not applied there — it would be
/// cluster-wide, outside the tenant's namespace — and the Work says why (`ScopeDiffers`).
#[tokio::test]
async fn an_object_whose_kind_is_cluster_scoped_in_the_member_is_not_applied_there() -> Result<()> {
    let s = Fleet::syncer_only("sync-scope").start().await?;
    let gadgets = member_gadgets(&s, "Cluster").await?;
    let group = &gadgets.group;
    let in_member: Api<DynamicObject> =
        Api::all_with(s.member(0).client.clone(), &gadgets.resource);
    s.create_work(
        "gadget",
        json!({"manifests": [{"apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "metadata": {"name": "tenants", "namespace": s.ns.name()}, "spec": {"size": 1}}]}),
    )
    .await?;
    let work = s
        .work_condition("gadget", "Applied", "False", Some("ScopeDiffers"), WAIT)
        .await?;
    let message = work
        .status
        .and_then(|st| st.conditions.into_iter().find(|c| c.type_ == "Applied"))
        .map(|c| c.message)
        .unwrap_or_default();
    ensure!(
        message.contains("cluster-scoped in the member"),
        "the Work says why: {message}"
    );
    ensure!(
        in_member.get_opt("tenants").await?.is_none(),
        "a tenant's namespaced object must not become cluster-wide in the member"
    );
    drop(gadgets);
    Ok(())
}

/// A member that answers with a huge status (a misbehaving controller or apiserver there) does not
/// make the hub store it: the Work keeps at most 16 KiB of each object's status — its numbers and
/// conditions, and the size it had.
#[tokio::test]
async fn a_members_huge_status_is_cut_before_the_hub_stores_it() -> Result<()> {
    let s = Fleet::syncer_only("sync-bigstatus").start().await?;
    let gadgets = member_gadgets(&s, "Namespaced").await?;
    let group = &gadgets.group;
    let in_member: Api<DynamicObject> =
        Api::namespaced_with(s.member(0).client.clone(), s.ns.name(), &gadgets.resource);
    s.create_work(
        "gadget",
        json!({"manifests": [{"apiVersion": format!("{group}/v1"), "kind": "Gadget",
            "metadata": {"name": "g", "namespace": s.ns.name()}, "spec": {"size": 1}}]}),
    )
    .await?;
    s.work_condition("gadget", "Applied", "True", None, WAIT)
        .await?;
    // The member's "controller" writes 400 KB of status.
    let lines: Vec<String> = (0..4000).map(|i| format!("{i:0>96}")).collect();
    in_member
        .patch_status(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": 1, "log": lines,
                "conditions": [{"type": "Ready", "status": "True", "reason": "Fine",
                                "message": "x".repeat(5000)}]}})),
        )
        .await?;
    let works = s.works();
    let status = wait_for("the Work to report the member's status", WAIT, || async {
        let w = works.get("gadget").await?;
        let status = w
            .status
            .and_then(|st| st.manifests.into_iter().next())
            .and_then(|m| m.status);
        Ok(match status {
            Some(st) if st.get("ready").is_some() => Seen::Done(st),
            other => Seen::not_yet(format!("{:?}", other.map(|o| o.to_string().len()))),
        })
    })
    .await?;
    let bytes = serde_json::to_vec(&status)?.len();
    ensure!(
        bytes <= 16 * 1024,
        "the Work keeps {bytes} bytes of the member's status"
    );
    ensure!(
        status["truncatedFrom"]
            .as_u64()
            .is_some_and(|n| n > 400_000)
            && status["conditions"][0]["type"] == "Ready"
            && status["ready"] == 1,
        "what the hub reads is kept, and the size it had: {status}"
    );
    drop(gadgets);
    Ok(())
}

/// The UID of ConfigMap `name` in the member, if it is there.
async fn member_uid(s: &Fleet, name: &str) -> Result<Option<String>> {
    Ok(s.member_configmaps()
        .get_opt(name)
        .await?
        .and_then(|c| c.metadata.uid))
}

#[tokio::test]
async fn a_manifest_removed_from_a_work_leaves_the_member_unless_another_work_takes_it_over()
-> Result<()> {
    let s = Fleet::syncer_only("sync-prune").start().await?;
    let works = s.works();
    let manifests = |names: &[&str]| -> Value {
        names
            .iter()
            .map(|n| s.configmap(n, json!({"from": "a"})))
            .collect()
    };
    s.create_work(
        "a",
        json!({"manifests": manifests(&["one", "two", "three"])}),
    )
    .await?;
    s.work_condition("a", "Applied", "True", None, WAIT).await?;
    let two = member_uid(&s, "two").await?.expect("two is in the member");

    // Work b names `two` too: a conflict while Work a holds it.
    s.create_work("b", json!({"manifests": manifests(&["two"])}))
        .await?;
    let b = s
        .work_condition("b", "Applied", "False", Some("Conflict"), WAIT)
        .await?;
    // Each manifest says whether it is applied, and why not.
    let entry = b.status.unwrap_or_default().manifests;
    ensure!(
        entry
            .first()
            .is_some_and(|m| m.applied == ConditionStatus::False
                && m.available.is_none()
                && m.reason.as_deref() == Some("Conflict")
                && m.message
                    .as_deref()
                    .is_some_and(|m| m.contains("managed by Work"))),
        "the manifest of Work b says it conflicts: {entry:?}"
    );
    let a = works.get("a").await?.status.unwrap_or_default();
    ensure!(
        a.observed_generation.is_some()
            && a.manifests.len() == 3
            && a.manifests.iter().all(|m| {
                m.applied == ConditionStatus::True
                    && m.available == Some(ConditionStatus::True)
                    && m.reason.is_none()
            }),
        "every manifest of Work a is applied and available: {a:?}"
    );

    // Work a lets go of `two` (Work b takes it over as it is) and of `three` (no Work names it:
    // deleted from the member).
    works
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": manifests(&["one"])}})),
        )
        .await?;
    s.work_condition("b", "Applied", "True", None, WAIT).await?;
    wait_for("three to leave the member", WAIT, || async {
        Ok(match member_uid(&s, "three").await? {
            None => Seen::Done(()),
            Some(uid) => Seen::not_yet(format!("still there ({uid})")),
        })
    })
    .await?;
    ensure!(
        member_uid(&s, "two").await?.as_deref() == Some(two.as_str()),
        "two was taken over by Work b, not deleted and created again"
    );
    let owner = s
        .member_configmaps()
        .get("two")
        .await?
        .metadata
        .annotations
        .unwrap_or_default()
        .get(flotilla_api::annotations::WORK)
        .cloned();
    ensure!(
        owner.as_deref().is_some_and(|o| o.ends_with("/b")),
        "two belongs to Work b now: {owner:?}"
    );
    ensure!(
        member_uid(&s, "one").await?.is_some(),
        "one, still named, stays"
    );
    wait_for("Work a to have removed all it had to", WAIT, || async {
        let status = works.get("a").await?.status.unwrap_or_default();
        Ok(
            if status.removing.is_empty() && status.manifests.len() == 1 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!(
                    "removing {:?}, manifests {}",
                    status.removing,
                    status.manifests.len()
                ))
            },
        )
    })
    .await?;

    // Work b goes: `two` goes with it, and Work a's `one` stays.
    works.delete("b", &DeleteParams::default()).await?;
    wait_for("two to leave the member", WAIT, || async {
        Ok(match member_uid(&s, "two").await? {
            None => Seen::Done(()),
            Some(_) => Seen::not_yet("still there"),
        })
    })
    .await?;
    ensure!(member_uid(&s, "one").await?.is_some(), "one stays");

    // With deletePolicy Orphan, a manifest removed from the Work leaves its object in place.
    s.create_work(
        "c",
        json!({"deletePolicy": "Orphan", "manifests": manifests(&["four", "five"])}),
    )
    .await?;
    s.work_condition("c", "Applied", "True", None, WAIT).await?;
    works
        .patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": manifests(&["four"])}})),
        )
        .await?;
    wait_for("Work c to report one manifest", WAIT, || async {
        let status = works.get("c").await?.status.unwrap_or_default();
        Ok(if status.manifests.len() == 1 {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{} manifests", status.manifests.len()))
        })
    })
    .await?;
    flotilla_e2e::holds_for(
        "five to stay in the member",
        Duration::from_secs(5),
        || async {
            Ok(match member_uid(&s, "five").await? {
                Some(_) => Ok(()),
                None => Err("five was deleted".to_string()),
            })
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn an_object_as_it_was_applied_is_not_sent_again_and_drift_is_still_reverted() -> Result<()> {
    // Resync every 3 s: each one looks at every manifest again.
    let s = Fleet::syncer_only("sync-unchanged").start().await?;
    let manifests: Vec<Value> = ["one", "two", "three"]
        .iter()
        .map(|n| s.configmap(n, json!({"color": "blue"})))
        .collect();
    s.create_work("steady", json!({"manifests": manifests}))
        .await?;
    s.work_condition("steady", "Available", "True", None, WAIT)
        .await?;
    // The status that names the applied resourceVersions is written after the applies.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let applied = s.applies("applied").await?;
    let unchanged = s.applies("unchanged").await?;
    wait_for("two resyncs that send nothing", WAIT, || async {
        let more = s.applies("unchanged").await? - unchanged;
        Ok(if more >= 6.0 {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{more} unchanged manifests so far"))
        })
    })
    .await?;
    ensure!(
        s.applies("applied").await? == applied,
        "nothing was applied again while nothing changed"
    );

    // A hand edit in the member changes the object's resourceVersion: it is applied again.
    s.member_configmaps()
        .patch(
            "two",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "red"}})),
        )
        .await?;
    s.wait_member_data("two", "color", Some("blue"), WAIT)
        .await?;
    // So is a change of the Work.
    let manifests: Vec<Value> = ["one", "two", "three"]
        .iter()
        .map(|n| {
            s.configmap(
                n,
                json!({"color": if *n == "three" { "green" } else { "blue" }}),
            )
        })
        .collect();
    s.works()
        .patch(
            "steady",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": manifests}})),
        )
        .await?;
    s.wait_member_data("three", "color", Some("green"), WAIT)
        .await?;
    Ok(())
}

/// A copy the member does not have yet costs one request: no read before the create. A create
/// that finds an object there after all (one the member's own users made) reads it then, and
/// leaves it alone as ever.
#[tokio::test]
async fn a_new_copy_is_written_with_one_member_request_and_an_unmanaged_one_still_left_alone()
-> Result<()> {
    const COPIES: usize = 20;
    let s = Fleet::syncer_only("sync-requests").start().await?;
    let m = s.member(0);
    // The first Work of a type starts the member's watch of it; its list comes before its watch
    // request, so once the syncer sent a watch request the watch knows what the member has.
    m.create_work(
        "first",
        json!({"manifests": [s.configmap("first", json!({"k": "v"}))]}),
    )
    .await?;
    m.work_condition("first", "Applied", "True", None, WAIT)
        .await?;
    wait_for(
        "the syncer's watch of the member's ConfigMaps",
        WAIT,
        || async {
            let watches = m.requests("watch").await?;
            Ok(if watches >= 1.0 {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{watches} watch requests"))
            })
        },
    )
    .await?;

    let before = (m.requests("get").await?, m.requests("patch").await?);
    let manifests: Vec<Value> = (0..COPIES)
        .map(|i| s.configmap(&format!("c-{i}"), json!({"i": i.to_string()})))
        .collect();
    m.create_work("many", json!({"manifests": manifests}))
        .await?;
    m.work_condition("many", "Applied", "True", None, WAIT)
        .await?;
    let after = (m.requests("get").await?, m.requests("patch").await?);
    let (gets, patches) = (after.0 - before.0, after.1 - before.1);
    // 20 copies: 20 writes, and no read of any of them (a namespace or discovery read may come).
    ensure!(
        gets <= 2.0 && patches >= COPIES as f64 && gets + patches <= COPIES as f64 + 2.0,
        "{COPIES} new copies took {gets} reads and {patches} writes of the member"
    );

    // An object the member's users made, after the watch listed: the create finds it.
    let theirs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "theirs", "namespace": s.ns.name()}, "data": {"owner": "them"}
    }))?;
    m.configmaps()
        .create(&PostParams::default(), &theirs)
        .await?;
    m.create_work(
        "take",
        json!({"manifests": [s.configmap("theirs", json!({"owner": "flotilla"}))]}),
    )
    .await?;
    m.work_condition("take", "Applied", "False", Some("Conflict"), WAIT)
        .await?;
    let kept = m.configmaps().get("theirs").await?;
    ensure!(
        kept.data == theirs.data
            && kept
                .metadata
                .labels
                .as_ref()
                .is_none_or(|l| !l.contains_key(labels::MANAGED)),
        "the member's own ConfigMap was written: {:?}",
        kept.metadata
    );
    Ok(())
}

/// A Work written by hand may give each manifest as an object or as its JSON string (what the
/// splitter writes): both are applied. A manifest that is no object with a type and a name is
/// reported by its index, `Applied=False, reason=InvalidManifest`, and the others are applied.
#[tokio::test]
async fn manifests_as_objects_or_json_strings_are_applied_and_an_unreadable_one_is_named()
-> Result<()> {
    let s = Fleet::syncer_only("sync-forms").start().await?;
    let works: Api<DynamicObject> = Api::namespaced_with(
        s.works().into_client(),
        &flotilla_api::names::cluster_namespace(s.member(0).cluster),
        &kube::api::ApiResource::erase::<flotilla_api::Work>(&()),
    );
    let as_string = s
        .configmap("as-string", json!({"form": "string"}))
        .to_string();
    let work: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Work",
        "metadata": {"name": "forms", "labels": {labels::CLUSTER: s.member(0).cluster}},
        "spec": {"manifests": [
            s.configmap("as-object", json!({"form": "object"})),
            as_string,
            "{\"apiVersion\": \"v1\", \"kind\": ",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": s.ns.name()}},
        ]},
    }))?;
    works.create(&PostParams::default(), &work).await?;

    let w = s
        .work_condition("forms", "Applied", "False", Some("InvalidManifest"), WAIT)
        .await?;
    let applied = w
        .status
        .as_ref()
        .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Applied"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    ensure!(
        applied.contains("spec.manifests[2] is not an object")
            && applied.contains("spec.manifests[3] has no metadata.name"),
        "Applied names both unreadable manifests: {applied}"
    );
    let entries = w.status.map(|st| st.manifests).unwrap_or_default();
    let reasons: Vec<(i32, Option<&str>)> = entries
        .iter()
        .map(|m| (m.ordinal, m.reason.as_deref()))
        .collect();
    ensure!(
        reasons
            == [
                (0, None),
                (1, None),
                (2, Some("InvalidManifest")),
                (3, Some("InvalidManifest"))
            ],
        "one status entry per manifest, in order: {reasons:?}"
    );
    s.wait_member_data("as-object", "form", Some("object"), WAIT)
        .await?;
    s.wait_member_data("as-string", "form", Some("string"), WAIT)
        .await?;
    // The hub keeps each manifest in the form it was written.
    let stored = works.get("forms").await?;
    ensure!(
        stored.data["spec"]["manifests"][0].is_object()
            && stored.data["spec"]["manifests"][1].is_string(),
        "stored as written: {}",
        stored.data["spec"]["manifests"]
    );

    // Without the unreadable manifests the Work is applied.
    s.works()
        .patch(
            "forms",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"manifests": [
                s.configmap("as-object", json!({"form": "object"})),
                s.configmap("as-string", json!({"form": "string"})).to_string(),
            ]}})),
        )
        .await?;
    let fixed = s
        .work_condition("forms", "Applied", "True", Some("Applied"), WAIT)
        .await?
        .status
        .unwrap_or_default();
    // The entries of the unreadable manifests named no object: nothing to remove.
    ensure!(
        fixed.manifests.len() == 2 && fixed.removing.is_empty(),
        "two entries and nothing being removed: {:?} / {:?}",
        fixed.manifests,
        fixed.removing
    );
    Ok(())
}
