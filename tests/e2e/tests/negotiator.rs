//! The negotiator end to end, with real members: the same CRD in three shapes gives the right
//! imports, least common denominator, conditions and per-object verdicts; `publish: true` creates
//! the hub CRD, which a member's later incompatible change does not narrow (the member's import
//! flips instead, within an import interval); a hand-made hub CRD is enforced; built-in
//! Deployments are enforced against the hub's schema.
//!
//! The negotiator runs with the chart's ServiceAccount for it. The test's Clusters carry a label
//! only its own registration controller and negotiator select, and its CRDs a test-unique group,
//! since NegotiatedAPIResources are cluster-scoped on the shared hub.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use flotilla_api::{
    ApiResourceImport, Cluster, Compatibility, NegotiatedApiResource, conditions, labels, names,
    reasons,
};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::chart::ChartIdentities;
use flotilla_e2e::clusters::{ClusterCleanup, register_push};
use flotilla_e2e::process::ControllerProcess;
use flotilla_e2e::{ClusterInfo, Environment, Seen, TestNamespace, api, random_suffix, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde_json::{Value, json};

const SELECTOR_LABEL: &str = "e2e.flotilla.dev/negotiator";
const TIMEOUT: Duration = Duration::from_secs(90);

/// A CRD of `kind` in `group` whose `spec` has `properties`.
pub(crate) fn crd(group: &str, kind: &str, properties: Value) -> Value {
    let plural = format!("{}s", kind.to_lowercase());
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                      "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": properties}}}}}]},
    })
}

pub(crate) fn crd_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    )
}

pub(crate) fn nar_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("flotilla.dev", "v1alpha1", "NegotiatedAPIResource"),
        "negotiatedapiresources",
    )
}

/// Applies a CRD and waits until it is established.
pub(crate) async fn install_crd(client: &Client, crd: &Value) -> Result<()> {
    api::apply(client, crd, false).await??;
    let name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_for(
        &format!("CRD {name} to be established"),
        Duration::from_secs(30),
        || async {
            let c = crds.get(&name).await?;
            let established = c
                .status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(if established {
                Seen::Done(())
            } else {
                Seen::not_yet("not established")
            })
        },
    )
    .await
}

/// The spec properties of a schema, by name.
fn spec_properties(schema: &Value) -> Vec<String> {
    let mut names: Vec<String> = schema["properties"]["spec"]["properties"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

fn condition<'a>(
    conditions: &'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The message of an import's `Compatible` condition (empty without one).
fn compatible_message(import: &ApiResourceImport) -> String {
    import
        .status
        .as_ref()
        .and_then(|s| condition(&s.conditions, conditions::COMPATIBLE))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// One member of the test: its environment info and its Cluster name on the hub.
struct Member {
    info: ClusterInfo,
    client: Client,
    cluster: String,
}

impl Member {
    fn imports(&self, hub: &Client) -> Api<ApiResourceImport> {
        Api::namespaced(hub.clone(), &names::cluster_namespace(&self.cluster))
    }
}

/// Waits until import `name` of every member in `expected` has `Compatible` with the given
/// status and reason; returns the imports.
async fn wait_compatible(
    hub: &Client,
    name: &str,
    expected: &[(&Member, &str, &str)],
    log: &ControllerProcess,
) -> Result<Vec<ApiResourceImport>> {
    wait_for(
        &format!(
            "the imports {name} to be Compatible as {:?}",
            expected
                .iter()
                .map(|(m, s, r)| format!("{}={s}/{r}", m.info.name))
                .collect::<Vec<_>>()
        ),
        TIMEOUT,
        || async {
            let mut found = Vec::new();
            let mut seen = Vec::new();
            for (member, status, reason) in expected {
                let import = member.imports(hub).get_opt(name).await?;
                let c = import.as_ref().and_then(|i| {
                    condition(&i.status.as_ref()?.conditions, conditions::COMPATIBLE).cloned()
                });
                match (&import, &c) {
                    (Some(i), Some(c)) if c.status == *status && c.reason == *reason => {
                        found.push(i.clone())
                    }
                    _ => seen.push(format!(
                        "{}: {:?}",
                        member.info.name,
                        c.map(|c| (c.status, c.reason, c.message))
                    )),
                }
            }
            Ok(if seen.is_empty() {
                Seen::Done(found)
            } else {
                Seen::not_yet(format!(
                    "{seen:?}; negotiator log tail:\n{}",
                    tail(&log.log())
                ))
            })
        },
    )
    .await
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(10)..]
        .iter()
        .map(|l| l.chars().take(400).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until NegotiatedAPIResource `name` satisfies `check` (which says what it saw).
pub(crate) async fn wait_negotiation<F>(
    hub: &Client,
    name: &str,
    what: &str,
    check: F,
) -> Result<NegotiatedApiResource>
where
    F: Fn(&NegotiatedApiResource) -> std::result::Result<(), String>,
{
    let api: Api<NegotiatedApiResource> = Api::all(hub.clone());
    wait_for(
        &format!("NegotiatedAPIResource {name}: {what}"),
        TIMEOUT,
        || async {
            Ok(match api.get_opt(name).await? {
                None => Seen::not_yet("not created"),
                Some(n) => match check(&n) {
                    Ok(()) => Seen::Done(n),
                    Err(seen) => Seen::not_yet(seen),
                },
            })
        },
    )
    .await
}

pub(crate) fn has_condition(
    n: &NegotiatedApiResource,
    type_: &str,
    status: &str,
    reason: &str,
) -> std::result::Result<(), String> {
    let conditions = n
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    match condition(conditions, type_) {
        Some(c) if c.status == status && c.reason == reason => Ok(()),
        other => Err(format!("{type_}: {other:?}")),
    }
}

/// Waits until Cluster `cluster`'s `status.resources` says `expected` for the test's widgets.
async fn wait_summary(
    clusters: &Api<Cluster>,
    cluster: &str,
    group: &str,
    expected: Compatibility,
) -> Result<()> {
    wait_for(
        &format!("Cluster {cluster} to summarise widgets as {expected:?}"),
        TIMEOUT,
        || async {
            let c = clusters.get(cluster).await?;
            let entry = c
                .status
                .iter()
                .flat_map(|s| s.resources.iter())
                .find(|r| r.group == group && r.resource == "widgets")
                .cloned();
            Ok(match entry {
                Some(e) if e.compatibility == expected => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}")),
            })
        },
    )
    .await
}

/// The controllers of a negotiation test: registration and the negotiator with the chart's
/// identities (so that a missing right shows up), importing `extra_types` too, both serving the
/// Clusters labelled `id`; and `members` registered as push-mode Clusters.
struct Controllers {
    negotiator: ControllerProcess,
    _registration: ControllerProcess,
    /// Dropped last: the chart's RBAC outlives the processes.
    _identities: ChartIdentities,
}

impl Controllers {
    async fn start(
        ns: &TestNamespace,
        id: &str,
        extra_types: &[&str],
        members: &[Member],
    ) -> Result<Self> {
        let env = Environment::get();
        let hub = env.hub.client().await?;
        let identities = ChartIdentities::install(ns.name()).await?;
        let (reg_identity, neg_identity) = (
            identities.args("registration")?,
            identities.args("negotiator")?,
        );
        let selector = format!("{SELECTOR_LABEL}={id}");
        let common = [
            "--lease-namespace",
            ns.name(),
            "--cluster-selector",
            selector.as_str(),
            "--kubeconfig-secret-namespace",
            ns.name(),
        ];
        let mut reg: Vec<&str> = reg_identity.iter().map(String::as_str).collect();
        reg.extend(common);
        reg.extend(["--probe-interval", "2s"]);
        let mut neg: Vec<&str> = neg_identity.iter().map(String::as_str).collect();
        neg.extend(common);
        neg.extend(["--import-interval", "5s"]);
        for t in extra_types {
            neg.extend(["--extra-type", t]);
        }
        let registration = ControllerProcess::start("flotilla-registration", &reg)?;
        let negotiator = ControllerProcess::start("flotilla-negotiator", &neg)?;
        for m in members {
            register_push(&hub, ns.name(), &m.cluster, &m.info, (SELECTOR_LABEL, id)).await?;
        }
        Ok(Self {
            negotiator,
            _registration: registration,
            _identities: identities,
        })
    }
}

#[tokio::test]
async fn members_that_disagree_negotiate_one_schema() -> Result<()> {
    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let infos = env.require_members(3)?.to_vec();
    let ns = TestNamespace::create("negotiator", &[&env.hub]).await?;
    let id = random_suffix();
    let group = format!("neg-{id}.e2e.flotilla.dev");
    let selector = format!("{SELECTOR_LABEL}={id}");

    // Clean-up, dropped after the processes: the CRDs in the members and on the hub, and the
    // test's NegotiatedAPIResources (cluster-scoped).
    let mut member_crds: Vec<ClusterScopedObjects> =
        infos.iter().map(ClusterScopedObjects::new).collect();
    let mut hub_objects = ClusterScopedObjects::new(&env.hub);
    for kind in ["widgets", "gadgets"] {
        for objects in &mut member_crds {
            objects.add(crd_resource(), format!("{kind}.{group}"));
        }
        hub_objects.add(crd_resource(), format!("{kind}.{group}"));
        hub_objects.add(nar_resource(), format!("{kind}.v1.{group}"));
    }
    let _cleanup = ClusterCleanup::new(&env.hub, selector.clone());

    // The same Widget in three shapes: member 0 adds a field, member 1 lacks one, member 2
    // changes one's type.
    let base = json!({"name": {"type": "string"}, "size": {"type": "integer"}, "color": {"type": "string"}});
    let mut adds = base.clone();
    adds["shape"] = json!({"type": "string"});
    let mut lacks = base.clone();
    lacks.as_object_mut().map(|m| m.remove("color"));
    let mut retypes = base.clone();
    retypes["size"] = json!({"type": "string"});
    let mut members = Vec::new();
    for (info, shape) in infos.iter().zip([&adds, &lacks, &retypes]) {
        let client = info.client().await?;
        install_crd(&client, &crd(&group, "Widget", shape.clone())).await?;
        members.push(Member {
            info: info.clone(),
            client,
            cluster: format!("e2e-{}", random_suffix()),
        });
    }
    // Gadgets: the hub has a hand-made CRD; member 0 lacks a field of it, member 1 has more.
    let gadget = json!({"a": {"type": "string"}, "b": {"type": "integer"}});
    install_crd(&hub, &crd(&group, "Gadget", gadget)).await?;
    install_crd(
        &members[0].client,
        &crd(&group, "Gadget", json!({"a": {"type": "string"}})),
    )
    .await?;
    install_crd(
        &members[1].client,
        &crd(
            &group,
            "Gadget",
            json!({"a": {"type": "string"}, "b": {"type": "integer"}, "c": {"type": "string"}}),
        ),
    )
    .await?;

    let widget_type = format!("{group}/v1/Widget");
    let gadget_type = format!("{group}/v1/Gadget");
    let controllers = Controllers::start(&ns, &id, &[&widget_type, &gadget_type], &members).await?;
    let negotiator = &controllers.negotiator;
    let clusters: Api<Cluster> = Api::all(hub.clone());

    // Three imports, one negotiated schema: only what all accept (name), the conflict on size
    // named; every member accepts the negotiated schema and more.
    let widgets = format!("widgets.v1.{group}");
    let imports = wait_compatible(
        &hub,
        &widgets,
        &[
            (&members[0], "True", reasons::SUPERSET),
            (&members[1], "True", reasons::SUPERSET),
            (&members[2], "True", reasons::SUPERSET),
        ],
        negotiator,
    )
    .await?;
    ensure!(
        spec_properties(&imports[0].spec.resource.open_api_v3_schema)
            == ["color", "name", "shape", "size"],
        "member 0's import is its CRD: {:?}",
        spec_properties(&imports[0].spec.resource.open_api_v3_schema)
    );
    ensure!(
        imports[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::CLUSTER))
            == Some(&members[0].cluster),
        "imports carry their cluster label"
    );
    let nar = wait_negotiation(&hub, &widgets, "negotiated over the three imports", |n| {
        has_condition(n, conditions::SUBMITTED, "True", reasons::NEGOTIATED)?;
        has_condition(n, conditions::ENFORCED, "False", reasons::NOT_ENFORCED)?;
        has_condition(n, conditions::PUBLISHED, "False", reasons::NOT_PUBLISHED)?;
        let summaries = n
            .status
            .as_ref()
            .map(|s| s.imports.len())
            .unwrap_or_default();
        if summaries != 3 {
            return Err(format!("{summaries} import summaries"));
        }
        Ok(())
    })
    .await?;
    ensure!(
        spec_properties(&nar.spec.resource.open_api_v3_schema) == ["name"],
        "the LCD keeps only what all accept: {}",
        nar.spec.resource.open_api_v3_schema
    );
    // Per object: a Widget setting color cannot go to member 1, one setting size (an integer)
    // not to member 2; one that sets only name fits everywhere.
    let object = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"name": "w", "size": 3, "color": "red"}});
    let plain = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"name": "w"}});
    let mut problems = Vec::new();
    for import in &imports {
        let schema = &import.spec.resource.open_api_v3_schema;
        ensure!(flotilla_schema::check_object(&plain, schema)?.is_empty());
        problems.push(
            flotilla_schema::check_object(&object, schema)?
                .into_iter()
                .map(|p| p.path)
                .collect::<Vec<_>>(),
        );
    }
    ensure!(
        problems
            == [
                vec![],
                vec![".spec.color".to_string()],
                vec![".spec.size".to_string()]
            ],
        "per-object verdicts: {problems:?}"
    );
    // Each Cluster's summary says Compatible for widgets.
    for m in &members {
        wait_summary(&clusters, &m.cluster, &group, Compatibility::Compatible).await?;
    }

    // publish: true creates the hub CRD from the negotiated schema; the user's field survives.
    let nars: Api<NegotiatedApiResource> = Api::all(hub.clone());
    nars.patch(
        &widgets,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"publish": true}})),
    )
    .await?;
    wait_negotiation(&hub, &widgets, "published", |n| {
        has_condition(n, conditions::PUBLISHED, "True", reasons::PUBLISHED)
    })
    .await?;
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    let published = crds.get(&format!("widgets.{group}")).await?;
    ensure!(
        published
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::PUBLISHED))
            .map(String::as_str)
            == Some(labels::PUBLISHED_VALUE),
        "the published CRD is marked as Flotilla's"
    );
    let published_schema = |c: &CustomResourceDefinition| -> Result<Value> {
        let v = c
            .spec
            .versions
            .first()
            .ok_or_else(|| anyhow!("no version"))?;
        Ok(serde_json::to_value(
            v.schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref()),
        )?)
    };
    ensure!(spec_properties(&published_schema(&published)?) == ["name"]);
    ensure!(
        nars.get(&widgets).await?.spec.publish,
        "spec.publish survives the negotiator"
    );

    // Member 2 changes name's type: its import flips within an import interval, and the
    // published schema is not narrowed.
    let mut incompatible = retypes.clone();
    incompatible["name"] = json!({"type": "integer"});
    install_crd(&members[2].client, &crd(&group, "Widget", incompatible)).await?;
    let flipped = wait_compatible(
        &hub,
        &widgets,
        &[(&members[2], "False", reasons::INCOMPATIBLE)],
        negotiator,
    )
    .await?;
    let message = compatible_message(&flipped[0]);
    ensure!(
        message.contains(".spec.name"),
        "the message names the path: {message}"
    );
    ensure!(
        flipped[0]
            .status
            .as_ref()
            .is_some_and(|s| s.differences.iter().any(|d| d.path == ".spec.name")),
        "the differences name the path"
    );
    ensure!(
        spec_properties(&published_schema(
            &crds.get(&format!("widgets.{group}")).await?
        )?) == ["name"]
    );
    wait_summary(
        &clusters,
        &members[2].cluster,
        &group,
        Compatibility::Incompatible,
    )
    .await?;

    // A hand-made hub CRD is enforced: member 0 lacks a field of it, member 1 has more.
    let gadgets = format!("gadgets.v1.{group}");
    wait_compatible(
        &hub,
        &gadgets,
        &[
            (&members[0], "False", reasons::MISSING_FIELDS),
            (&members[1], "True", reasons::SUPERSET),
        ],
        negotiator,
    )
    .await?;
    wait_negotiation(&hub, &gadgets, "enforced by the hub CRD", |n| {
        has_condition(n, conditions::ENFORCED, "True", reasons::HUB_CRD)
    })
    .await?;
    // Member 2 serves Gadgets cluster-scoped: whatever its schema, none can go there.
    let mut cluster_scoped = crd(&group, "Gadget", json!({"a": {"type": "string"}}));
    cluster_scoped["spec"]["scope"] = json!("Cluster");
    install_crd(&members[2].client, &cluster_scoped).await?;
    let differs = wait_compatible(
        &hub,
        &gadgets,
        &[(&members[2], "False", reasons::SCOPE_DIFFERS)],
        negotiator,
    )
    .await?;
    let message = compatible_message(&differs[0]);
    ensure!(
        message.contains("Cluster-scoped"),
        "the message says why: {message}"
    );

    // Built-in Deployments from every member are enforced against the hub's schema: identical
    // where the member runs the hub's Kubernetes version; a member on an older minor lacks the
    // fields added since, and its import says which (hack/clusters.sh runs member2 older).
    let hub_version = env.hub.version().await?;
    let mut expected = Vec::new();
    let mut older = Vec::new();
    for m in &members {
        if m.info.version().await? == hub_version {
            expected.push((m, "True", reasons::IDENTICAL));
        } else {
            expected.push((m, "False", reasons::MISSING_FIELDS));
            older.push(m);
        }
    }
    ensure!(
        !older.is_empty(),
        "the environment has no member older than the hub ({hub_version})"
    );
    let deployments = wait_compatible(&hub, "deployments.v1.apps", &expected, negotiator).await?;
    for (import, (m, _, _)) in deployments.iter().zip(&expected) {
        let differences = import
            .status
            .as_ref()
            .map(|s| s.differences.clone())
            .unwrap_or_default();
        if !older.iter().any(|o| o.cluster == m.cluster) {
            ensure!(
                differences.is_empty(),
                "{} runs the hub's version, yet its import differs: {differences:?}",
                m.info.name
            );
            continue;
        }
        // Narrower, never incompatible: the pod template fields added since are missing.
        ensure!(
            differences.iter().all(|d| matches!(
                d.verdict,
                flotilla_api::DifferenceVerdict::Narrowing | flotilla_api::DifferenceVerdict::Safe
            )) && differences
                .iter()
                .any(|d| d.path.starts_with(".spec.template.spec.")),
            "the older {}'s Deployment import must list the pod template fields it lacks, none Breaking: {differences:?}",
            m.info.name
        );
        let compatible = compatible_message(import);
        ensure!(
            compatible.contains(&differences[0].path),
            "the Compatible message of the older {} names the paths: {compatible:?}",
            m.info.name
        );
        eprintln!(
            "{} ({}) lacks, in deployments.v1.apps: {}",
            m.info.name,
            m.info.version().await?,
            differences
                .iter()
                .map(|d| d.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    wait_negotiation(&hub, "deployments.v1.apps", "enforced as built in", |n| {
        has_condition(n, conditions::ENFORCED, "True", reasons::BUILT_IN)
    })
    .await?;

    // A member cannot widen what is published on its own. A pull member's agent writes its
    // imports, strategy included (here the test writes it, in that member's hub namespace, as
    // the agent may): UpdatePublished with a wider Widget leaves the published CRD as it is,
    // until the hub admin allows published updates on the NegotiatedAPIResource.
    let pull = format!("e2e-{}", random_suffix());
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "Cluster",
        "metadata": {"name": pull, "labels": {SELECTOR_LABEL: id}},
        "spec": {"syncMode": "Pull", "hubAcceptsClient": true}}))?;
    clusters
        .create(&kube::api::PostParams::default(), &cluster)
        .await?;
    let pull_ns = names::cluster_namespace(&pull);
    let wide_import = json!({
        "apiVersion": "flotilla.dev/v1alpha1", "kind": "APIResourceImport",
        "metadata": {"name": widgets, "namespace": pull_ns},
        "spec": {"groupVersion": {"group": group, "version": "v1"},
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget",
                           "listKind": "WidgetList"},
                 "scope": "Namespaced",
                 "schemaUpdateStrategy": "UpdatePublished",
                 "openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                     "properties": {"name": {"type": "string"}, "wide": {"type": "string"}}}}}}});
    wait_for(
        "the pull member's namespace, to write its import there",
        TIMEOUT,
        || async {
            Ok(match api::apply(&hub, &wide_import, false).await? {
                Ok(_) => Seen::Done(()),
                Err(e) => Seen::not_yet(e),
            })
        },
    )
    .await?;
    let pull_imports: Api<ApiResourceImport> = Api::namespaced(hub.clone(), &pull_ns);
    wait_for(
        "the negotiator to judge the wider import",
        TIMEOUT,
        || async {
            let judged = pull_imports.get(&widgets).await?.status.is_some_and(|s| {
                condition(&s.conditions, conditions::COMPATIBLE).is_some_and(|c| c.status == "True")
            });
            Ok(if judged {
                Seen::Done(())
            } else {
                Seen::not_yet("no Compatible=True yet")
            })
        },
    )
    .await
    .with_context(|| tail(&negotiator.log()))?;
    flotilla_e2e::holds_for(
        "the published Widget CRD to stay as negotiated",
        Duration::from_secs(8),
        || async {
            let props = spec_properties(&published_schema(
                &crds.get(&format!("widgets.{group}")).await?,
            )?);
            Ok(if props == ["name"] {
                Ok(())
            } else {
                Err(format!("{props:?}"))
            })
        },
    )
    .await?;
    nars.patch(
        &widgets,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"allowPublishedUpdates": true}})),
    )
    .await?;
    wait_for(
        "the admin's consent to widen the published CRD",
        TIMEOUT,
        || async {
            let props = spec_properties(&published_schema(
                &crds.get(&format!("widgets.{group}")).await?,
            )?);
            Ok(if props == ["name", "wide"] {
                Seen::Done(())
            } else {
                Seen::not_yet(format!("{props:?}"))
            })
        },
    )
    .await
    .with_context(|| tail(&negotiator.log()))?;
    let (code, metrics) = negotiator.get("/metrics").await?;
    ensure!(
        code == 200 && metrics.contains("flotilla_negotiator_imports{"),
        "metrics: {metrics}"
    );
    ensure!(metrics.contains("flotilla_negotiator_negotiation_duration_seconds"));
    Ok(())
}

/// Gateway API's HTTPRoute CRD of release `version`, from the tool cache (`hack/build-tools.sh`).
pub(crate) fn real_httproutes(version: &str) -> Result<Value> {
    let tools = std::env::var("FLOTILLA_TOOLS_BIN")
        .map_err(|_| anyhow!("FLOTILLA_TOOLS_BIN is not set: run the tests with hack/test.sh"))?;
    let path = std::path::Path::new(&tools).join("crds").join(format!(
        "httproutes.gateway.networking.k8s.io@{version}.yaml"
    ));
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{} (run hack/build-tools.sh)", path.display()))?;
    Ok(serde_saphyr::from_str(&text)?)
}

/// A real CRD of two releases: Gateway API's HTTPRoute v1.0.0 in one member and v1.6.1 in the
/// others (both from the tool cache, `hack/build-tools.sh`). The least common denominator keeps
/// only the CEL rules whose fields it keeps and carries the protected group's approval
/// annotation, so `publish: true` makes a hub CRD the hub apiserver accepts.
#[tokio::test]
async fn real_httproutes_of_two_releases_publish_a_crd_the_hub_accepts() -> Result<()> {
    let _one_at_a_time = crate::ONE_NEGOTIATOR.lock().await;
    let env = Environment::get();
    let hub = env.hub.client().await?;
    api::install_crds(&hub).await?;
    let infos = env.require_members(3)?.to_vec();
    let (old, new) = (real_httproutes("v1.0.0")?, real_httproutes("v1.6.1")?);
    let ns = TestNamespace::create("negotiator-routes", &[&env.hub]).await?;
    let id = random_suffix();
    let selector = format!("{SELECTOR_LABEL}={id}");
    let crd_name = "httproutes.gateway.networking.k8s.io";
    let nar = "httproutes.v1.gateway.networking.k8s.io";
    let mut member_crds: Vec<ClusterScopedObjects> =
        infos.iter().map(ClusterScopedObjects::new).collect();
    let mut hub_objects = ClusterScopedObjects::new(&env.hub);
    for objects in &mut member_crds {
        objects.add(crd_resource(), crd_name.to_string());
    }
    hub_objects.add(crd_resource(), crd_name.to_string());
    for version in ["v1", "v1beta1"] {
        hub_objects.add(
            nar_resource(),
            format!("httproutes.{version}.gateway.networking.k8s.io"),
        );
    }
    let _cleanup = ClusterCleanup::new(&env.hub, selector.clone());
    let mut members = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        let client = info.client().await?;
        install_crd(&client, if i == 0 { &old } else { &new }).await?;
        members.push(Member {
            info: info.clone(),
            client,
            cluster: format!("e2e-{}", random_suffix()),
        });
    }
    let controllers = Controllers::start(
        &ns,
        &id,
        &["gateway.networking.k8s.io/v1/HTTPRoute"],
        &members,
    )
    .await?;
    let negotiator = &controllers.negotiator;

    wait_negotiation(&hub, nar, "negotiated over the three imports", |n| {
        has_condition(n, conditions::SUBMITTED, "True", reasons::NEGOTIATED)?;
        let summaries = n.status.as_ref().map_or(0, |s| s.imports.len());
        if summaries == 3 {
            Ok(())
        } else {
            Err(format!("{summaries} import summaries"))
        }
    })
    .await
    .with_context(|| tail(&negotiator.log()))?;
    let nars: Api<NegotiatedApiResource> = Api::all(hub.clone());
    nars.patch(
        nar,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"publish": true}})),
    )
    .await?;
    wait_negotiation(&hub, nar, "published", |n| {
        has_condition(n, conditions::PUBLISHED, "True", reasons::PUBLISHED)
    })
    .await
    .with_context(|| tail(&negotiator.log()))?;
    // The other version all members serve joins the publication (its own NegotiatedAPIResource
    // says so once the hub CRD serves it).
    wait_negotiation(
        &hub,
        "httproutes.v1beta1.gateway.networking.k8s.io",
        "v1beta1 published with v1",
        |n| has_condition(n, conditions::PUBLISHED, "True", reasons::PUBLISHED),
    )
    .await
    .with_context(|| tail(&negotiator.log()))?;
    let published = Api::<CustomResourceDefinition>::all(hub.clone())
        .get(crd_name)
        .await?;
    ensure!(
        published
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("api-approved.kubernetes.io")),
        "the published CRD of a protected group carries its approval"
    );
    let text = serde_json::to_string(&published.spec)?;
    ensure!(
        text.contains("x-kubernetes-validations") && !text.contains("self.percent"),
        "the published CRD keeps the rules of the fields it keeps, and no rule of a field v1.0.0 lacks"
    );
    // Every version all members serve is published: v1 and v1beta1 (the same fields, so the
    // hub's None conversion loses nothing); v1 stores, the most stable, although v1.0.0 stores
    // v1beta1.
    let mut versions: Vec<(String, bool, bool)> = published
        .spec
        .versions
        .iter()
        .map(|v| (v.name.clone(), v.served, v.storage))
        .collect();
    versions.sort();
    ensure!(
        versions
            == [
                ("v1".to_string(), true, true),
                ("v1beta1".to_string(), true, false)
            ],
        "the published CRD serves v1 (storage) and v1beta1: {versions:?}"
    );
    Ok(())
}
