//! The splitter: placement, replica division, failover, status aggregation.
//!
//! | module | does |
//! |---|---|
//! | [`controller`] | the Placement (and ClusterPlacement) controller: each pass observes, plans, executes and reports |
//! | [`observe`] | what a pass reads: caches, and a fresh list of the selected objects |
//! | [`plan`] | pure: the Works to write and delete (and those kept, and why), the decisions |
//! | [`watermarks`] | the newest state seen of each type: a pass lists from the apiserver's cache, never older |
//! | [`recent`] | read-your-writes: the Works a pass wrote, until the cache has them |
//! | [`release`] | the Works of deleted Placements, released after `--orphaned-work-grace` |
//! | [`execute`] | the plan's writes (only what differs) and deletions (with preconditions) |
//! | [`report`] | the Placement's bounded status, the divided Deployments' status, Events |
//! | [`division`] | pure: replicas per member (largest remainder, stable on scale, join, leave) |
//! | [`ordinals`] | pure: a divided StatefulSet's ordinal range per member (disjoint; let go before taking) |
//! | [`compatibility`] | pure: whether a member's API can take one object (per-object check) |
//! | [`pod_security`] | pure: the Pod Security dry run of a workload's pod template, and its verdicts |
//! | [`coverage`] | pure: the objects of a namespace that no Placement places, and why |
//! | [`inventory`] | the hub's objects of every namespaced kind, watched, as the report of what is not placed reads them |
//! | [`bindings`] | pure: whether a placed RoleBinding or ClusterRoleBinding grants no more in a member than on the hub |
//! | [`external_ips`] | pure: whether a placed Service may keep its `spec.externalIPs` |
//! | [`eligibility`] | pure: which members a Placement may use, and why not the others |
//! | [`services`] | pure: the members where a placed Service has no endpoints (a note on its decision) |
//! | [`revisions`] | pure: a placed StatefulSet's or DaemonSet's hub ControllerRevisions, one per revision |
//! | [`history`] | pure: a placed Deployment's hub ReplicaSet records, one per revision |
//! | [`specificity`] | pure: which of several Placements places an object |
//! | [`references`] | pure: what a workload's pod template refers to (follows it) |
//! | [`render`] | pure: a member's manifest of an object, and the Works that hold them |
//! | [`aggregate`] | pure: the hub object's status from its copies (per kind) |
//!
//! What each kind prunes, how it divides, how its status combines and when a copy is healthy is
//! `flotilla_interpreter`'s, shared with the syncer.

pub mod aggregate;
pub mod bindings;
pub mod compatibility;
pub mod controller;
pub mod coverage;
pub mod digest;
pub mod division;
pub mod eligibility;
pub mod execute;
pub mod external_ips;
pub mod history;
pub mod inventory;
pub mod keys;
pub mod observation;
pub mod observe;
pub mod ordinals;
pub mod plan;
pub mod pod_security;
pub mod recent;
pub mod references;
pub mod release;
pub mod render;
pub mod report;
pub mod revisions;
pub mod services;
pub mod specificity;
pub mod state;
pub mod watches;
pub mod watermarks;
pub mod works;

use clap::Args;
use flotilla_runtime::Context;

/// Flags of the splitter.
#[derive(Args, Debug, Clone, Default)]
pub struct SplitterArgs {
    /// Only place objects of these namespaces (their Placements and objects); repeat the flag or
    /// separate with commas. None: every namespace. Each namespace gets watches of its own.
    #[arg(long, value_delimiter = ',', value_name = "NAMESPACE")]
    pub namespace: Vec<String>,

    /// Only place on Clusters with these labels (a label selector); empty: every Cluster. The
    /// Works on a Cluster outside the selector are left as they are (another splitter may serve
    /// it).
    #[arg(long, default_value = "", value_name = "SELECTOR", value_parser = flotilla_runtime::selector::checked)]
    pub cluster_selector: String,

    /// Whether this splitter serves ClusterPlacements (cluster-scoped objects). Default: true
    /// without --namespace (it serves everything), false with it (a namespace's splitter leaves
    /// them to another).
    #[arg(long, value_name = "BOOL")]
    pub cluster_placements: Option<bool>,

    /// Only serve ClusterPlacements with these labels (a label selector); empty: every one.
    #[arg(long, default_value = "", value_name = "SELECTOR", value_parser = flotilla_runtime::selector::checked)]
    pub cluster_placement_selector: String,

    /// How many Placements (per --namespace) are worked on at the same time.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub concurrency: u16,

    /// How long the Works of a deleted Placement (or ClusterPlacement) stay before the splitter
    /// releases them: it marks each Work `deletePolicy: Orphan` and deletes it, so the member
    /// objects stay as they are, unmanaged (no longer updated, a change in the member no longer
    /// reverted), and the hub Secret with the data of its Secrets goes with it. A Placement of
    /// the same name created within it (`kubectl replace --force`) takes its Works over as
    /// before. The time a Work was first seen orphaned is kept on it (annotation
    /// `flotilla.dev/orphaned-since`), so a restart does not start the clock again. Only the
    /// Works of Placements this splitter serves (--namespace, --cluster-placements) on Clusters
    /// it serves (--cluster-selector) are released; with --cluster-placement-selector, no
    /// ClusterPlacement's (a deleted one's labels are not known). 0s: never released.
    #[arg(long, default_value = "10m", value_parser = flotilla_runtime::cli::parse_duration,
          value_name = "DURATION")]
    pub orphaned_work_grace: std::time::Duration,

    /// The most copies (placed objects × the members each goes to) the Placements of one hub
    /// namespace may keep, unless the namespace's annotation `flotilla.dev/max-copies` (the hub
    /// admin's) says otherwise. A Placement that would go beyond it places no new copy and says
    /// `Scheduled=False, reason=CopyQuotaExceeded`; its copies stay. 0: no limit.
    /// ClusterPlacements (the admins') have none.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub max_copies_per_namespace: u32,

    /// The most bytes the copies of one hub namespace's Placements may take in the hub's etcd
    /// (their Works' manifests and the data of their Secrets, once per member), as a quantity,
    /// unless the namespace's annotation `flotilla.dev/max-copy-bytes` (the hub admin's) says
    /// otherwise. Beyond it a Placement places no new copy, writes no copy that grows, and says
    /// `Scheduled=False, reason=CopyQuotaExceeded`; its copies stay as they are. 0: no limit.
    /// ClusterPlacements have none. Keep the sum over the namespaces that may grow well under
    /// the hub etcd's quota (the chart gives an eighth of it).
    #[arg(long, default_value = "256Mi", value_parser = parse_bytes, value_name = "QUANTITY")]
    pub max_copy_bytes_per_namespace: u64,

    /// The Pod Security level of a hub namespace that names none (no label
    /// `pod-security.kubernetes.io/enforce`): a workload whose pods it forbids is placed nowhere,
    /// and the member namespaces Flotilla creates for that namespace enforce it.
    #[arg(long, value_enum, default_value_t = pod_security::Level::Baseline, value_name = "LEVEL")]
    pub default_pod_security_level: pod_security::Level,

    /// Where the hub judges pod templates: a Pod built from each is created as a dry run in the
    /// namespace `<prefix><level>` (e.g. flotilla-pod-security-baseline), which must enforce that
    /// level and let the splitter create Pods (the chart makes one per level). Not in the
    /// tenant's namespace, whose LimitRanges, quotas or ServiceAccounts could refuse the Pod
    /// before Pod Security looks at it.
    #[arg(long, default_value = "flotilla-pod-security-", value_name = "PREFIX")]
    pub pod_security_check_namespace_prefix: String,

    /// The hub namespaces whose ServiceAccounts are the hub's own identities (Flotilla's
    /// controllers), besides kube-system, kube-public, kube-node-lease, the members'
    /// flotilla-cluster-* namespaces and the Pod Security check namespaces: a ClusterRoleBinding
    /// that a ClusterPlacement selects and that names one of their ServiceAccounts is placed
    /// nowhere (its name means the member's own controllers there) unless the ClusterPlacement
    /// carries `flotilla.dev/allow-any-binding-subject: "true"`. Default: the splitter's own
    /// namespace (POD_NAMESPACE, set by the chart).
    #[arg(
        long,
        env = "POD_NAMESPACE",
        value_delimiter = ',',
        value_name = "NAMESPACE"
    )]
    pub hub_identity_namespaces: Vec<String>,
}

/// Runs the controllers of `flotilla-splitter` until `ctx.shutdown` is cancelled.
pub async fn run(ctx: Context, args: SplitterArgs) -> anyhow::Result<()> {
    let namespaces: Vec<String> = args
        .namespace
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    use state::Scope;
    if namespaces.is_empty() {
        let scope = if args.cluster_placements == Some(false) {
            Scope::Namespaces
        } else {
            Scope::Everything
        };
        return controller::run(ctx, scope, &args).await;
    }
    let mut scopes: Vec<Scope<'_>> = namespaces.iter().map(|ns| Scope::Namespace(ns)).collect();
    if args.cluster_placements == Some(true) {
        scopes.push(Scope::ClusterPlacements);
    }
    let runs = scopes
        .into_iter()
        .map(|scope| controller::run(ctx.clone(), scope, &args));
    futures::future::try_join_all(runs).await?;
    Ok(())
}

/// A quantity of bytes (`256Mi`, `1G`, `1048576`).
fn parse_bytes(s: &str) -> Result<u64, String> {
    flotilla_api::quantity::bytes(s)
        .ok_or_else(|| format!("{s:?} is not a quantity of bytes (e.g. 256Mi, 1G, 1048576)"))
}
