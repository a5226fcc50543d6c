//! Charts nobody on this project wrote, installed through the hub as their users install them:
//! `helm install|upgrade|rollback|uninstall --wait` against the hub, with a Placement that selects
//! nothing in particular (every kind Flotilla places). Each chart must end up in every member —
//! DaemonSets, StatefulSets, hook Jobs, RBAC, NetworkPolicies, Secrets, budgets and autoscalers —
//! with every hub object Current for kstatus, and must leave every member when uninstalled.
//!
//! The charts are vendored under `tests/e2e/fixtures/charts` (see its README for where each comes
//! from); the values each test gives are next to them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use flotilla_api::{ClusterPlacement, Placement};
use flotilla_e2e::api::ClusterScopedObjects;
use flotilla_e2e::chart::helm_run;
use flotilla_e2e::fleet::Fleet;
use flotilla_e2e::{Environment, Seen, api, random_suffix, repo_root, wait_for};
use kube::Api;
use kube::api::ApiResource;
use serde_json::{Value, json};

/// How long helm waits for a release, and the suite for members to follow it.
const WAIT: Duration = Duration::from_secs(180);

/// The pod-template annotation each revision of a release sets, to tell revisions apart in
/// the members.
const REVISION: &str = "flotilla-e2e-revision";

/// One third-party chart and how this suite installs it.
struct Case {
    /// Its directory under `tests/e2e/fixtures/charts` (and `<chart>.values.yaml` beside it).
    chart: &'static str,
    /// The spec of the namespace's Placement (no `resourceSelectors`: every kind).
    placement: Value,
    /// Values that depend on the namespace (`{ns}`) or the release (`{release}`).
    set: &'static [&'static str],
    /// The values (strings) that carry [`REVISION`] into the pod templates (`{revision}`).
    revision: &'static [&'static str],
    /// Kinds the release must have (so that a chart update that drops one is noticed), and
    /// whether it has a hook Job.
    carries: &'static [&'static str],
    hook_job: bool,
}

/// One object of a release, as `helm get manifest` lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Object {
    api_version: String,
    kind: String,
    name: String,
    /// `None` when cluster-scoped.
    namespace: Option<String>,
}

impl Object {
    fn probe(&self) -> Value {
        json!({"apiVersion": self.api_version, "kind": self.kind,
               "metadata": {"name": self.name, "namespace": self.namespace}})
    }

    /// Whether Flotilla places objects of this kind (the interpreter's table).
    fn placed_kind(&self) -> bool {
        flotilla_interpreter::table::lookup(&self.api_version, &self.kind).is_some()
    }

    fn is_workload(&self) -> bool {
        self.api_version == "apps/v1"
            && ["Deployment", "StatefulSet", "DaemonSet"].contains(&self.kind.as_str())
    }
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

fn fixtures() -> PathBuf {
    repo_root().join("tests/e2e/fixtures/charts")
}

/// A release of one case in one test's fleet.
struct Release<'a> {
    case: &'a Case,
    fleet: &'a Fleet,
    name: String,
    kubeconfig: String,
}

impl Release<'_> {
    fn ns(&self) -> &str {
        self.fleet.ns.name()
    }

    /// `helm <command> --wait` of this release at `revision`, against the hub.
    async fn helm(&self, command: &str, revision: u32) -> Result<String> {
        let chart = fixtures().join(self.case.chart);
        let values = fixtures().join(format!("{}.values.yaml", self.case.chart));
        let fill = |s: &str| {
            s.replace("{ns}", self.ns())
                .replace("{release}", &self.name)
                .replace("{revision}", &revision.to_string())
        };
        let sets: Vec<String> = self.case.set.iter().map(|s| fill(s)).collect();
        let strings: Vec<String> = self.case.revision.iter().map(|s| fill(s)).collect();
        let timeout = format!("{}s", WAIT.as_secs());
        let mut args: Vec<&str> = vec![
            command,
            &self.name,
            chart.to_str().context("chart path")?,
            "--values",
            values.to_str().context("values path")?,
        ];
        for s in &sets {
            args.extend(["--set", s.as_str()]);
        }
        for s in &strings {
            args.extend(["--set-string", s.as_str()]);
        }
        args.extend(["--kubeconfig", &self.kubeconfig, "--namespace", self.ns()]);
        args.extend(["--wait", "--timeout", &timeout]);
        helm_run(&args).await.map_err(|e| self.explain(e))
    }

    /// `helm <args>` against the hub, in the release's namespace.
    async fn helm_plain(&self, args: &[&str]) -> Result<String> {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", &self.kubeconfig, "--namespace", self.ns()]);
        helm_run(&all).await.map_err(|e| self.explain(e))
    }

    /// An error with what the splitter said, for whoever reads a failure.
    fn explain(&self, e: anyhow::Error) -> anyhow::Error {
        e.context(self.fleet.splitter.log())
    }

    /// The objects of the release's current revision (hooks aside).
    async fn objects(&self) -> Result<Vec<Object>> {
        let manifest = self.helm_plain(&["get", "manifest", &self.name]).await?;
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&manifest).context("parsing helm get manifest")?;
        let mut objects = Vec::new();
        for d in docs.into_iter().filter(Value::is_object) {
            let field = |p: &str| d.pointer(p).and_then(Value::as_str).map(str::to_string);
            let (Some(api_version), Some(kind), Some(name)) = (
                field("/apiVersion"),
                field("/kind"),
                field("/metadata/name"),
            ) else {
                return Err(anyhow!("an object without apiVersion, kind or name: {d}"));
            };
            let probe = json!({"apiVersion": api_version, "kind": kind});
            let (_, scope) = api::resource_of(&self.fleet.hub, &probe).await?;
            let namespace = (scope == kube::discovery::Scope::Namespaced)
                .then(|| field("/metadata/namespace").unwrap_or_else(|| self.ns().to_string()));
            objects.push(Object {
                api_version,
                kind,
                name,
                namespace,
            });
        }
        objects.sort();
        Ok(objects)
    }
}

/// What `client` has of `object`: the object, if there.
async fn get(client: &kube::Client, object: &Object) -> Result<Option<Value>> {
    let found = api::api_for(client, &object.probe())
        .await?
        .get_opt(&object.name)
        .await?;
    Ok(found.map(|o| serde_json::to_value(o).unwrap_or_default()))
}

/// The [`REVISION`] annotation of a workload's pod template.
fn revision_of(workload: &Value) -> Option<String> {
    workload
        .pointer(&format!("/spec/template/metadata/annotations/{REVISION}"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The kinds whose copies a `Divided` Placement divides among the members: a member whose share
/// is nothing gets no copy.
const DIVIDED: [&str; 6] = [
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
];

/// Waits until the members have every placed object of `objects` — in every member, or for the
/// kinds a `Divided` Placement divides, in at least one, the members' replicas adding up to the
/// hub's — its workloads at `revision`, and no Job but those of `objects` (the hook Jobs went
/// with the hub's).
async fn members_follow(release: &Release<'_>, objects: &[Object], revision: u32) -> Result<()> {
    let want = revision.to_string();
    // As the hub stored the Placement, its defaults filled in.
    let placement = Api::<Placement>::namespaced(release.fleet.hub.clone(), release.ns())
        .get("all")
        .await?;
    let divided = serde_json::to_value(&placement)?.pointer("/spec/replicaScheduling/type")
        == Some(&json!("Divided"));
    wait_for(
        &format!(
            "every member to have release {} at revision {revision}",
            release.name
        ),
        WAIT,
        || async {
            let mut wrong = Vec::new();
            for o in objects.iter().filter(|o| o.placed_kind()) {
                let mut holders = Vec::new();
                let mut replicas = 0;
                for (cluster, member) in &release.fleet.members {
                    let Some(copy) = get(member, o).await? else {
                        continue;
                    };
                    holders.push(cluster.clone());
                    replicas += copy
                        .pointer("/spec/replicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0);
                    if ["Secret", "ConfigMap"].contains(&o.kind.as_str()) {
                        let hub = get(&release.fleet.hub, o)
                            .await?
                            .context("the hub object")?;
                        if copy.get("data") != hub.get("data") {
                            wrong.push(format!("{cluster}: {o} has other data than the hub's"));
                        }
                    }
                    let seen = revision_of(&copy);
                    if o.is_workload() && seen.as_deref() != Some(want.as_str()) {
                        wrong.push(format!("{cluster}: {o} at revision {seen:?}"));
                    }
                }
                let shared = divided && o.namespace.is_some() && DIVIDED.contains(&o.kind.as_str());
                if !shared && holders.len() != release.fleet.members.len() {
                    wrong.push(format!("{o} only in {holders:?}"));
                } else if holders.is_empty() {
                    wrong.push(format!("{o} in no member"));
                } else if shared && ["Deployment", "StatefulSet"].contains(&o.kind.as_str()) {
                    let hub = get(&release.fleet.hub, o)
                        .await?
                        .context("the hub object")?;
                    let total = hub.pointer("/spec/replicas").and_then(Value::as_i64);
                    if total != Some(replicas) {
                        wrong.push(format!(
                            "{o}: {replicas} replicas in the members, {total:?} in the hub"
                        ));
                    }
                }
            }
            for (cluster, member) in &release.fleet.members {
                let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(
                    member.clone(),
                    release.ns(),
                )
                .list(&Default::default())
                .await?;
                for job in jobs {
                    let name = job.metadata.name.unwrap_or_default();
                    if !objects.iter().any(|o| o.kind == "Job" && o.name == name) {
                        wrong.push(format!("{cluster}: Job {name} (a hook's) is still there"));
                    }
                }
            }
            Ok(Seen::unless(&wrong, ()))
        },
    )
    .await
    .map_err(|e| release.explain(e))
}

/// Waits until no member has any object of `objects`.
async fn members_let_go(release: &Release<'_>, objects: &[Object]) -> Result<()> {
    wait_for(
        &format!("every member to let go of release {}", release.name),
        WAIT,
        || async {
            let mut left = Vec::new();
            for (cluster, member) in &release.fleet.members {
                for o in objects.iter().filter(|o| o.placed_kind()) {
                    if get(member, o).await?.is_some() {
                        left.push(format!("{cluster}: {o}"));
                    }
                }
            }
            Ok(Seen::unless(&left, ()))
        },
    )
    .await
    .map_err(|e| release.explain(e))
}

/// kstatus (what GitOps tools read) says every hub object of the release is Current.
async fn all_current(env: &Environment, release: &Release<'_>, objects: &[Object]) -> Result<()> {
    for o in objects {
        let kind = format!("{}.{}", o.kind.to_lowercase(), group_of(&o.api_version));
        let ns = o.namespace.as_deref().unwrap_or(release.ns());
        crate::api::kstatus_current(env, ns, kind.trim_end_matches('.'), &o.name)
            .await
            .map_err(|e| release.explain(e))?;
    }
    Ok(())
}

fn group_of(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map(|(group, _)| group)
        .unwrap_or("")
}

/// The namespace's Placement says it places everything there (nothing left out).
async fn all_placed(release: &Release<'_>) -> Result<()> {
    let placements: Api<Placement> = Api::namespaced(release.fleet.hub.clone(), release.ns());
    wait_for(
        "the Placement to say every object of the namespace is placed",
        Duration::from_secs(60),
        || async {
            let p = placements.get("all").await?;
            let status = p.status.unwrap_or_default();
            let placed = status
                .conditions
                .iter()
                .find(|c| c.type_ == "AllPlaced")
                .map(|c| (c.status.clone(), c.message.clone()));
            Ok(match placed {
                Some((s, _)) if s == "True" => Seen::Done(()),
                other => Seen::not_yet(format!("{other:?}; notPlaced: {:?}", status.not_placed)),
            })
        },
    )
    .await
    .map_err(|e| release.explain(e))
}

/// A release name for `chart` unique to one test.
fn release_name(chart: &str) -> String {
    format!(
        "{}-{}",
        chart.split('-').next().unwrap_or("r"),
        random_suffix()
    )
}

/// The whole life of release `name` of `case` through the hub.
async fn life_of(case: &Case, fleet: &Fleet, name: String) -> Result<()> {
    let env = Environment::get();
    let ns = fleet.ns.name();
    api::apply(
        &fleet.hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "Placement",
                "metadata": {"name": "all", "namespace": ns}, "spec": case.placement}),
        false,
    )
    .await??;
    let release = Release {
        case,
        fleet,
        name,
        kubeconfig: env.hub.kubeconfig.to_string_lossy().into_owned(),
    };

    // install: every member gets every placed object; the hook Jobs ran and went.
    let out = release.helm("install", 1).await?;
    ensure!(out.contains("STATUS: deployed"), "{out}");
    let first = release.objects().await?;
    for kind in case.carries {
        ensure!(
            first.iter().any(|o| o.kind == *kind),
            "the release has no {kind}: {first:?}"
        );
    }
    let hooks = release.helm_plain(&["get", "hooks", &release.name]).await?;
    ensure!(
        hooks.contains("kind: Job") == case.hook_job,
        "hook Job expected: {}\n{hooks}",
        case.hook_job
    );
    members_follow(&release, &first, 1).await?;
    all_current(&env, &release, &first).await?;
    all_placed(&release).await?;

    // upgrade: the members' pods templates follow.
    release.helm("upgrade", 2).await?;
    let second = release.objects().await?;
    members_follow(&release, &second, 2).await?;
    all_current(&env, &release, &second).await?;

    // rollback to the first revision: helm's record of it comes back, and so do the members.
    let timeout = format!("{}s", WAIT.as_secs());
    release
        .helm_plain(&[
            "rollback",
            &release.name,
            "1",
            "--wait",
            "--timeout",
            &timeout,
        ])
        .await?;
    let rolled_back = release.objects().await?;
    ensure!(
        rolled_back == first,
        "the rollback has the first revision's objects"
    );
    members_follow(&release, &rolled_back, 1).await?;
    all_current(&env, &release, &rolled_back).await?;

    // uninstall: the hub and every member let go of every object.
    release
        .helm_plain(&["uninstall", &release.name, "--wait", "--timeout", &timeout])
        .await?;
    let union: BTreeSet<Object> = first.into_iter().chain(second).collect();
    let union: Vec<Object> = union.into_iter().collect();
    for o in &union {
        ensure!(
            get(&fleet.hub, o).await?.is_none(),
            "{o} is still in the hub after helm uninstall"
        );
    }
    members_let_go(&release, &union).await
}

#[tokio::test]
async fn ingress_nginx_as_a_daemonset_with_its_hook_jobs_and_cluster_rbac() -> Result<()> {
    let env = Environment::get();
    let fleet = Fleet::builder("ingress-nginx")
        .cluster_placements()
        .start()
        .await?;
    // The cluster-scoped half of the chart (its ClusterRoles, bindings and IngressClass) goes
    // with a ClusterPlacement of the objects labelled with the release, as an admin would
    // place an ingress controller; the label of the test's splitter makes it this test's.
    let (label, id) = fleet
        .selector
        .split_once('=')
        .context("the fleet's selector")?;
    let release = release_name("ingress-nginx");
    let name = format!("ingress-nginx-{}", random_suffix());
    let mut placed = ClusterScopedObjects::new(&env.hub);
    placed.add(ApiResource::erase::<ClusterPlacement>(&()), name.clone());
    let by_release = json!({"matchLabels": {"app.kubernetes.io/instance": release}});
    api::apply(
        &fleet.hub,
        &json!({"apiVersion": "flotilla.dev/v1alpha1", "kind": "ClusterPlacement",
                "metadata": {"name": name, "labels": {label: id}},
                "spec": {"resourceSelectors": [
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "labelSelector": by_release},
                    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "labelSelector": by_release},
                    {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "labelSelector": by_release},
                ]}}),
        false,
    )
    .await??;
    let case = Case {
        chart: "ingress-nginx",
        placement: json!({"replicaScheduling": {"type": "Divided", "division": "Even"}}),
        set: &[
            // An IngressClass of the release's own: two teams may run an ingress controller each.
            "controller.ingressClassResource.name={release}",
            "controller.ingressClassResource.controllerValue=k8s.io/{release}",
        ],
        revision: &[
            "controller.podAnnotations.flotilla-e2e-revision={revision}",
            "defaultBackend.podAnnotations.flotilla-e2e-revision={revision}",
        ],
        carries: &[
            "DaemonSet",
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "IngressClass",
        ],
        hook_job: true,
    };
    life_of(&case, &fleet, release).await
}

#[tokio::test]
async fn kube_state_metrics_as_a_sharded_statefulset_with_a_secret_and_roles() -> Result<()> {
    let fleet = Fleet::builder("kube-state-metrics").start().await?;
    let case = Case {
        chart: "kube-state-metrics",
        placement: json!({}),
        set: &["namespaces={ns}"],
        revision: &["podAnnotations.flotilla-e2e-revision={revision}"],
        carries: &[
            "StatefulSet",
            "Secret",
            "Role",
            "RoleBinding",
            "PodDisruptionBudget",
            "NetworkPolicy",
        ],
        hook_job: false,
    };
    life_of(&case, &fleet, release_name(case.chart)).await
}

#[tokio::test]
async fn prometheus_pushgateway_as_a_divided_statefulset_with_a_budget() -> Result<()> {
    let fleet = Fleet::builder("pushgateway").start().await?;
    let case = Case {
        chart: "prometheus-pushgateway",
        placement: json!({"replicaScheduling": {"type": "Divided", "division": "Even"}}),
        set: &[],
        revision: &["podAnnotations.flotilla-e2e-revision={revision}"],
        carries: &[
            "StatefulSet",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "Service",
        ],
        hook_job: false,
    };
    life_of(&case, &fleet, release_name(case.chart)).await
}
