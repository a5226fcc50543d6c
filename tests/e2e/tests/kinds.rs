//! The table of kinds on the product path: a Placement without `resourceSelectors` places every
//! namespaced kind of the interpreter's table, in two teams' namespaces with the same names, and
//! holds back a RoleBinding that would grant more in a member than on the hub, and a Service
//! whose `externalIPs` would take those addresses' traffic in every member, until an admin
//! allows them.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use flotilla_api::{Placement, reasons};
use flotilla_e2e::fleet::{Fleet, Second};
use flotilla_e2e::{Environment, Seen, api, wait_for};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// How long placing may take.
const WAIT: Duration = Duration::from_secs(90);
/// How long a report of a change the splitter watches may take (its report passes start within
/// about a second; its resync, every 60 s, must not be what finds it).
const REPORT_WAIT: Duration = Duration::from_secs(20);

/// What one team applies to its namespace: the same names in every namespace.
fn objects(ns: &str) -> Vec<Value> {
    let meta = |name: &str| json!({"name": name, "namespace": ns});
    let view = |role_kind: &str, role: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role});
    vec![
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement", "metadata": meta("all"),
               "spec": {}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta("app")}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta("reader"),
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": meta("app-reader"), "roleRef": view("Role", "reader"),
               "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": ns}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": meta("app-view"), "roleRef": view("ClusterRole", "view"),
               "subjects": [{"kind": "ServiceAccount", "name": "app"}]}),
        // A group's name means whoever a member's authenticators say: held back.
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": meta("ops"), "roleRef": view("ClusterRole", "view"),
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}]}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("agent"),
               "spec": {"selector": {"matchLabels": {"app": "agent"}},
                        "template": {"metadata": {"labels": {"app": "agent"}},
                                     "spec": {"serviceAccountName": "app",
                                              "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}]}}}}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta("deny-ingress"),
               "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": meta("defaults"),
               "spec": {"limits": [{"type": "Container", "default": {"memory": "128Mi"}}]}}),
        // Harmless on the hub (no nodes), it would take these addresses' traffic from every
        // node and pod of a member (CVE-2020-8554): held back.
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta("dns-trap"),
               "spec": {"selector": {"app": "agent"}, "ports": [{"port": 53, "protocol": "UDP"}],
                        "externalIPs": ["192.0.2.53"]}}),
    ]
}

/// The placed objects each member must have (the Placement and the held-back binding aside).
const PLACED: [(&str, &str, &str); 7] = [
    ("v1", "ServiceAccount", "app"),
    ("rbac.authorization.k8s.io/v1", "Role", "reader"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "app-reader"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "app-view"),
    ("apps/v1", "DaemonSet", "agent"),
    ("networking.k8s.io/v1", "NetworkPolicy", "deny-ingress"),
    ("v1", "LimitRange", "defaults"),
];

/// Whether `member` has `api_version`/`kind` `name` in `ns`.
async fn has(
    member: &Client,
    ns: &str,
    (api_version, kind, name): (&str, &str, &str),
) -> Result<bool> {
    let probe = json!({"apiVersion": api_version, "kind": kind,
                       "metadata": {"name": name, "namespace": ns}});
    Ok(api::api_for(member, &probe)
        .await?
        .get_opt(name)
        .await?
        .is_some())
}

/// Waits until every member has every object of `want` in `ns` and none of `absent`.
async fn in_every_member(
    fleet: &Fleet,
    ns: &str,
    want: &[(&str, &str, &str)],
    absent: &[(&str, &str, &str)],
) -> Result<()> {
    wait_for(
        &format!("every member to have the placed kinds in {ns}"),
        WAIT,
        || async {
            let mut missing = Vec::new();
            for (cluster, member) in &fleet.members {
                for o in want {
                    if !has(member, ns, *o).await? {
                        missing.push(format!("{cluster}: no {} {}", o.1, o.2));
                    }
                }
                for o in absent {
                    if has(member, ns, *o).await? {
                        missing.push(format!("{cluster}: {} {} is there", o.1, o.2));
                    }
                }
            }
            Ok(if missing.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(missing.join(", "))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

/// The Placement's `Scheduled` condition: reason and message.
async fn scheduled(hub: &Client, ns: &str) -> Result<(String, String)> {
    let p = Api::<Placement>::namespaced(hub.clone(), ns)
        .get("all")
        .await?;
    let c = p
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == "Scheduled")
        .context("no Scheduled condition")?;
    Ok((c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn an_empty_selector_places_every_kind_of_the_table_and_holds_back_foreign_bindings()
-> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("kinds")
        .second_namespace(Second::Everywhere)
        .start()
        .await?;
    let hub = &fleet.hub;
    let other = fleet
        .other
        .as_ref()
        .context("the second team's namespace")?;
    let teams = [fleet.ns.name(), other.name()];
    for ns in teams {
        for object in objects(ns) {
            api::apply(hub, &object, false)
                .await?
                .with_context(|| format!("applying {} to the hub", object["kind"]))?;
        }
    }
    let ops = ("rbac.authorization.k8s.io/v1", "RoleBinding", "ops");
    let trap = ("v1", "Service", "dns-trap");
    for ns in teams {
        in_every_member(&fleet, ns, &PLACED, &[ops, trap]).await?;
        // The splitter writes the Placement's status after the Works, so a syncer may have
        // applied the copies before the status says why the rest is held back.
        wait_for(
            "the Placement to say what is held back and why",
            WAIT,
            || async {
                let (reason, message) = scheduled(hub, ns).await?;
                let (status, all_reason, all_message) = all_placed(hub, ns, "all").await?;
                Ok(
                    if reason == reasons::BINDING_HELD_BACK
                        && message.contains("RoleBinding ops")
                        && message.contains("Group ops")
                        && message.contains("Service dns-trap: its spec.externalIPs (192.0.2.53)")
                        && status == "False"
                        && all_reason == reasons::NOT_PLACED
                        && all_message.contains("RoleBinding ops")
                    {
                        Seen::Done(())
                    } else {
                        Seen::not_yet(format!(
                            "Scheduled {reason}: {message}; AllPlaced {status} {all_reason}: \
                             {all_message}"
                        ))
                    },
                )
            },
        )
        .await?;
    }
    // The hub DaemonSet shows its copies' pods, as GitOps tools read it.
    crate::api::kstatus_current(&env, teams[0], "daemonset", "agent").await?;

    // An admin lets the second team bind any subject and use external IPs: its binding and
    // Service follow, the first team's stay held back.
    Api::<Namespace>::all(hub.clone())
        .patch(
            teams[1],
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                flotilla_api::annotations::ALLOW_ANY_BINDING_SUBJECT: "true",
                flotilla_api::annotations::ALLOW_EXTERNAL_IPS: "true"}}})),
        )
        .await?;
    in_every_member(&fleet, teams[1], &[ops, trap], &[]).await?;
    in_every_member(&fleet, teams[0], &PLACED, &[ops, trap]).await?;
    wait_for(
        "the second team's Placement to be Scheduled",
        WAIT,
        || async {
            let (reason, message) = scheduled(hub, teams[1]).await?;
            Ok(if reason == "Scheduled" {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{reason}: {message}"))
            })
        },
    )
    .await?;
    Ok(())
}

/// The Placement's `AllPlaced` condition: status, reason and message.
async fn all_placed(hub: &Client, ns: &str, name: &str) -> Result<(String, String, String)> {
    let p = Api::<Placement>::namespaced(hub.clone(), ns)
        .get(name)
        .await?;
    let c = p
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == flotilla_api::conditions::ALL_PLACED)
        .context("no AllPlaced condition")?;
    Ok((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test]
async fn an_object_no_placement_places_is_reported_on_the_placement_and_on_the_object() -> Result<()>
{
    let fleet = Fleet::builder("leftout").start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    for object in [
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "deployments", "namespace": ns},
               "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "forgotten", "namespace": ns},
               "data": {"a": "b"}}),
    ] {
        api::apply(hub, &object, false).await??;
    }
    wait_for(
        "the Placement to say the ConfigMap is placed nowhere",
        WAIT,
        || async {
            let p = Api::<Placement>::namespaced(hub.clone(), ns)
                .get("deployments")
                .await?;
            let listed = p
                .status
                .as_ref()
                .map(|s| s.not_placed.clone())
                .unwrap_or_default();
            let (status, reason, message) = all_placed(hub, ns, "deployments").await?;
            Ok(
                if status == "False"
                    && reason == reasons::NOT_PLACED
                    && message.contains("ConfigMap forgotten")
                    && listed.iter().any(|n| {
                        n.kind == "ConfigMap"
                            && n.name == "forgotten"
                            && n.reason == reasons::NOT_SELECTED
                    })
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{status} {reason}: {message}; {listed:?}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    // kubectl describe configmap forgotten shows why.
    wait_for(
        "an Event on the ConfigMap saying it is not placed",
        WAIT,
        || async {
            let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(hub.clone(), ns)
                .list(
                    &kube::api::ListParams::default()
                        .fields("involvedObject.kind=ConfigMap,involvedObject.name=forgotten"),
                )
                .await?;
            Ok(
                match events
                    .items
                    .iter()
                    .find(|e| e.reason.as_deref() == Some(reasons::NOT_PLACED))
                {
                    Some(e) => Seen::Done(e.message.clone().unwrap_or_default()),
                    None => Seen::not_yet(format!("{} other events", events.items.len())),
                },
            )
        },
    )
    .await?;

    // A second Placement takes the ConfigMap: nothing is left out any more.
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "settings", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}]}}),
        false,
    )
    .await??;
    // A Deployment makes the first Placement look again now.
    api::apply(
        hub,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nudge", "namespace": ns}}),
        false,
    )
    .await??;
    wait_for("both Placements to say AllPlaced", WAIT, || async {
        let a = all_placed(hub, ns, "deployments").await?;
        let b = all_placed(hub, ns, "settings").await?;
        Ok(if a.0 == "True" && b.0 == "True" {
            Seen::Done(())
        } else {
            Seen::not_yet(format!("{a:?} / {b:?}"))
        })
    })
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;

    // An object of a kind no Placement selects is reported without any other change to start
    // a pass: the splitter watches every kind of the table for the report, and a change there
    // starts a report pass within about a second.
    api::apply(
        hub,
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "reader", "namespace": ns},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]}),
        false,
    )
    .await??;
    // Well within the splitter's resync (60 s), which would find it anyway.
    wait_for(
        "the Role to be reported placed nowhere",
        REPORT_WAIT,
        || async {
            let (status, reason, message) = all_placed(hub, ns, "settings").await?;
            Ok(
                if status == "False"
                    && reason == reasons::NOT_PLACED
                    && message.contains("Role reader")
                {
                    Seen::Done(())
                } else {
                    Seen::not_yet(format!("{status} {reason}: {message}"))
                },
            )
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    Ok(())
}

/// The image of `kind`/`name` in `ns` of `client` (the first container's).
async fn image_of(client: &Client, ns: &str, kind: &str, name: &str) -> Result<Option<String>> {
    let probe = json!({"apiVersion": "apps/v1", "kind": kind,
                       "metadata": {"name": name, "namespace": ns}});
    Ok(api::api_for(client, &probe)
        .await?
        .get_opt(name)
        .await?
        .and_then(|o| {
            o.data["spec"]["template"]["spec"]["containers"][0]["image"]
                .as_str()
                .map(String::from)
        }))
}

/// Waits until every member's copy of `kind`/`name` runs `image`.
async fn members_run(fleet: &Fleet, kind: &str, name: &str, image: &str) -> Result<()> {
    let ns = fleet.ns.name();
    wait_for(
        &format!("every member's {kind} {name} to run {image}"),
        WAIT,
        || async {
            let mut seen = Vec::new();
            for (cluster, member) in &fleet.members {
                let got = image_of(member, ns, kind, name).await?;
                if got.as_deref() != Some(image) {
                    seen.push(format!("{cluster}: {got:?}"));
                }
            }
            Ok(if seen.is_empty() {
                Seen::Done(())
            } else {
                Seen::not_yet(seen.join(", "))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))
}

#[tokio::test]
async fn rollout_history_and_undo_of_statefulsets_and_daemonsets_work_through_the_hub() -> Result<()>
{
    let env = Environment::get();
    let fleet = Fleet::builder("history").start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    let workload = |kind: &str, image: &str| {
        let mut spec = json!({"selector": {"matchLabels": {"app": "db"}},
                              "template": {"metadata": {"labels": {"app": "db"}},
                                           "spec": {"containers": [{"name": "db", "image": image}]}}});
        if kind == "StatefulSet" {
            spec["replicas"] = json!(3);
            spec["serviceName"] = json!("db");
        }
        json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "db", "namespace": ns},
               "spec": spec})
    };
    api::apply(
        hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "workloads", "namespace": ns},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "StatefulSet"},
                                               {"apiVersion": "apps/v1", "kind": "DaemonSet"}]}}),
        false,
    )
    .await??;
    let (one, two) = ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause:3.10");
    for kind in ["StatefulSet", "DaemonSet"] {
        api::apply(hub, &workload(kind, one), false).await??;
        members_run(&fleet, kind, "db", one).await?;
        api::apply(hub, &workload(kind, two), false).await??;
        members_run(&fleet, kind, "db", two).await?;
        let resource = kind.to_lowercase();
        let target = format!("{resource}/db");
        let history = wait_for(
            &format!("kubectl rollout history {target} to list two revisions"),
            WAIT,
            || async {
                let out =
                    crate::api::kubectl(&env, &["-n", ns, "rollout", "history", &target]).await?;
                let revisions: Vec<&str> = out
                    .lines()
                    .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
                    .collect();
                Ok(if revisions.len() == 2 {
                    Seen::Done(out.clone())
                } else {
                    Seen::not_yet(out.clone())
                })
            },
        )
        .await?;
        let first = crate::api::kubectl(
            &env,
            &["-n", ns, "rollout", "history", &target, "--revision", "1"],
        )
        .await?;
        ensure!(
            first.contains(one),
            "revision 1 of {target} is the first template:\n{first}\n{history}"
        );
        // Undo: the hub object takes the first template back, and the members follow.
        crate::api::kubectl(&env, &["-n", ns, "rollout", "undo", &target]).await?;
        ensure!(
            image_of(hub, ns, kind, "db").await?.as_deref() == Some(one),
            "kubectl rollout undo {target} put the first template back on the hub"
        );
        members_run(&fleet, kind, "db", one).await?;
        wait_for(
            &format!("the undone template of {target} to be revision 3"),
            WAIT,
            || async {
                let out =
                    crate::api::kubectl(&env, &["-n", ns, "rollout", "history", &target]).await?;
                Ok(
                    if out.lines().any(|l| l.trim_start().starts_with('3'))
                        && !out.lines().any(|l| l.trim_start().starts_with('1'))
                    {
                        Seen::Done(())
                    } else {
                        Seen::not_yet(out)
                    },
                )
            },
        )
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_service_goes_everywhere_and_its_decision_says_where_it_has_no_endpoints() -> Result<()> {
    let fleet = Fleet::builder("services").start().await?;
    let (hub, ns) = (&fleet.hub, fleet.ns.name());
    for object in [
        json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
               "metadata": {"name": "web", "namespace": ns},
               "spec": {"replicaScheduling": {"type": "Divided", "division": "Even"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": ns},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}]}}}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": ns},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
    ] {
        api::apply(hub, &object, false).await??;
    }
    let service = ("v1", "Service", "web");
    in_every_member(&fleet, ns, &[service], &[]).await?;
    let notes = wait_for(
        "the Service's decision to note the two members without its pods",
        WAIT,
        || async {
            let p = Api::<Placement>::namespaced(hub.clone(), ns)
                .get("web")
                .await?;
            let decisions = p.status.map(|s| s.decisions).unwrap_or_default();
            let replicas: Vec<(String, Option<i32>)> = decisions
                .iter()
                .filter(|d| d.kind == "Deployment")
                .flat_map(|d| d.clusters.iter().map(|c| (c.cluster.clone(), c.replicas)))
                .collect();
            let notes: Vec<(String, String)> = decisions
                .iter()
                .filter(|d| d.kind == "Service")
                .flat_map(|d| d.clusters.iter())
                .filter_map(|c| Some((c.cluster.clone(), c.note.clone()?)))
                .collect();
            Ok(if notes.len() == 2 {
                Seen::Done((notes, replicas))
            } else {
                Seen::not_yet(format!("notes {notes:?}, replicas {replicas:?}"))
            })
        },
    )
    .await
    .map_err(|e| e.context(fleet.splitter.log()))?;
    let (notes, replicas) = notes;
    for (cluster, note) in &notes {
        ensure!(
            !replicas
                .iter()
                .any(|(c, r)| c == cluster && r.unwrap_or(0) > 0)
                && note.contains("no endpoints here")
                && note.contains("Deployment web"),
            "the note is on a member without replicas ({replicas:?}): {cluster}: {note}"
        );
    }
    Ok(())
}
