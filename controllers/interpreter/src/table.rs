//! The table of kinds: the one place that knows which kinds Flotilla places and what it does with
//! each. From it come the types an empty `resourceSelectors` selects ([`defaults`]), the built-in
//! interpreters ([`crate::builtin`]), what the splitter must be allowed to read and write on the
//! hub ([`Kind::hub_rights`], which a test checks the chart's RBAC against) and the table of
//! kinds in `docs/placement.md` ([`markdown`], which a test keeps the document in step with).

use crate::kinds::{self, HubStatus, Interpreter};

/// Whether objects of a kind live in a namespace (placed by a Placement) or in the cluster
/// (placed by a ClusterPlacement).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
}

/// The history the splitter keeps on the hub for `kubectl rollout history|undo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum History {
    None,
    /// A ReplicaSet record per revision (a Deployment's).
    ReplicaSets,
    /// A ControllerRevision per revision (a StatefulSet's, a DaemonSet's).
    ControllerRevisions,
}

/// One kind Flotilla knows.
pub struct Kind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub scope: Scope,
    /// Its own rules; `None`: the generic ones (copied whole, its status left alone).
    pub interpreter: Option<&'static dyn Interpreter>,
    pub history: History,
    /// For the docs: how it is placed, what stays on the hub, what the hub object's status shows.
    pub placed: &'static str,
    pub stays: &'static str,
    pub status: &'static str,
}

impl Kind {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn namespaced(&self) -> bool {
        self.scope == Scope::Namespaced
    }

    /// Whether the splitter writes the hub object's status from its copies'.
    pub fn hub_status(&self) -> bool {
        self.interpreter
            .is_some_and(|i| i.hub_status() != HubStatus::Kept)
    }

    /// What the splitter needs on the hub for this kind, as `(resource, verbs)` of its group:
    /// reading every object (to place it and follow its changes) and, where it shows the copies'
    /// status on the hub object, patching its status.
    pub fn hub_rights(&self) -> Vec<(String, &'static [&'static str])> {
        let mut rights = vec![(self.plural.to_string(), &["get", "list", "watch"][..])];
        if self.hub_status() {
            rights.push((format!("{}/status", self.plural), &["get", "patch"][..]));
        }
        match self.history {
            History::None => {}
            History::ReplicaSets => rights.push((
                "replicasets".to_string(),
                &["get", "list", "watch", "create", "patch", "delete"][..],
            )),
            History::ControllerRevisions => rights.push((
                "controllerrevisions".to_string(),
                &["get", "list", "create", "patch", "delete"][..],
            )),
        }
        rights
    }
}

macro_rules! kind {
    ($group:literal, $version:literal, $kind:literal, $plural:literal, $scope:ident,
     $interpreter:expr, $history:ident, $placed:literal, $stays:literal, $status:literal) => {
        Kind {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            scope: Scope::$scope,
            interpreter: $interpreter,
            history: History::$history,
            placed: $placed,
            stays: $stays,
            status: $status,
        }
    };
}

/// Every kind Flotilla knows, namespaced ones first.
pub static KINDS: &[Kind] = &[
    kind!(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        Namespaced,
        Some(&kinds::Deployment),
        ReplicaSets,
        "`Divided`: replicas divided (see Replicas); `Duplicated`: all replicas in every member",
        "`status`; the ReplicaSet records of its revisions (see History)",
        "divided: counters summed over the copies; duplicated: the copy furthest behind; `observedGeneration` once every copy observed the current spec, `Available`, `Progressing` and `Placed` conditions"
    ),
    kind!(
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        Namespaced,
        Some(&kinds::ReplicaSet),
        None,
        "`Divided`: replicas divided, as a Deployment's; `Duplicated`: all replicas in every member (a Deployment's ReplicaSets are never placed)",
        "`status`",
        "divided: `replicas`, `fullyLabeledReplicas` summed, `readyReplicas`, `availableReplicas` summed over reachable members; duplicated: the copy furthest behind; `observedGeneration` once every copy observed the current spec; a copy is available once all its pods are"
    ),
    kind!(
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        Namespaced,
        Some(&kinds::StatefulSet),
        ControllerRevisions,
        "`Divided`: disjoint ordinal ranges (see StatefulSets); `Duplicated`: every ordinal in every member",
        "`status`; the ControllerRevisions of its revisions (see History)",
        "`replicas`, `currentReplicas`, `updatedReplicas` summed, `readyReplicas` and `availableReplicas` summed over reachable members, `observedGeneration` once every copy observed the current spec, `currentRevision`/`updateRevision` where every copy has the same one, `Placed` naming each member's ordinals; a copy is available once all its pods are"
    ),
    kind!(
        "apps",
        "v1",
        "DaemonSet",
        "daemonsets",
        Namespaced,
        Some(&kinds::DaemonSet),
        ControllerRevisions,
        "whole in every member (each runs it on its own nodes)",
        "`status`; the ControllerRevisions of its revisions (see History)",
        "the counts of every member summed (`desiredNumberScheduled`, `numberReady`, `numberAvailable`, …; an unreachable member's pods count as unavailable), `observedGeneration` once every copy observed the current spec; a copy is available once all its pods are"
    ),
    kind!(
        "batch",
        "v1",
        "Job",
        "jobs",
        Namespaced,
        Some(&kinds::Job),
        None,
        "`Divided`: NonIndexed with `completions`: completions divided once, parallelism in proportion; Indexed or without `completions`: whole on one member (see Jobs and CronJobs); `Duplicated`: whole in every member",
        "`status`; `ttlSecondsAfterFinished` (the hub deletes the finished Job, and the copies go with it); the selector and pod-template labels generated from the hub Job's UID, unless `manualSelector: true`",
        "`active`, `ready`, `succeeded`, `failed` summed, `startTime`, `SuccessCriteriaMet`/`Complete` with `completionTime` once every copy is complete and the successes reach `completions`, `FailureTarget`/`Failed` once one failed and none runs"
    ),
    kind!(
        "batch",
        "v1",
        "CronJob",
        "cronjobs",
        Namespaced,
        Some(&kinds::CronJob),
        None,
        "`Divided`: whole on one member; `Duplicated`: whole in every member (each runs its own Jobs)",
        "`status`",
        "`lastScheduleTime` and `lastSuccessfulTime`: the latest of any copy (the Jobs of `active` are the members', so it stays empty)"
    ),
    kind!(
        "",
        "v1",
        "Service",
        "services",
        Namespaced,
        Some(&kinds::Service),
        None,
        "to every candidate, even one that runs none of the pods it selects (clients there find it, and it serves as soon as pods arrive); such a member's decision carries a `note`: no endpoints there, and where the pods run; one with `spec.externalIPs` is held back (`ExternalIPsHeldBack`: it would take those addresses' traffic in every member) unless a hub admin annotates the namespace `flotilla.dev/allow-external-ips=true`",
        "`status`; cluster IPs always, IP families and node ports unless someone set them",
        "`loadBalancer.ingress`: every member's load balancer, each address once"
    ),
    kind!(
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        Namespaced,
        Some(&kinds::Ingress),
        None,
        "to every candidate",
        "`status`",
        "`loadBalancer.ingress`: every member's, each address once"
    ),
    kind!(
        "",
        "v1",
        "ConfigMap",
        "configmaps",
        Namespaced,
        None,
        None,
        "to every candidate; also follows a placed workload that refers to it",
        "`kube-root-ca.crt` is never placed",
        "none (nothing to report)"
    ),
    kind!(
        "",
        "v1",
        "Secret",
        "secrets",
        Namespaced,
        None,
        None,
        "to every candidate, its data in a hub Secret beside the Work, never in the Work; also follows a placed workload that refers to it",
        "service-account token Secrets and Helm release records are never placed",
        "none (nothing to report)"
    ),
    kind!(
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        Namespaced,
        None,
        None,
        "to every candidate; also follows a placed workload that runs as it",
        "the `default` ServiceAccount is never placed",
        "none (nothing to report)"
    ),
    kind!(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        Namespaced,
        Some(&kinds::PersistentVolumeClaim),
        None,
        "to every candidate (each member binds its own volume)",
        "`status`; `spec.volumeName` and the binding annotations",
        "`Bound` once every copy is bound (with their access modes, and their capacity where all agree), `Lost` when one lost its volume, else `Pending`; a copy is available once bound"
    ),
    kind!(
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        Namespaced,
        Some(&kinds::PodDisruptionBudget),
        None,
        "`Divided`: a `minAvailable` given as a number is divided like replicas (5 over three members: 2+2+1); a percentage, and `maxUnavailable`, hold as they are in every member (dividing `maxUnavailable` would give members 0, which blocks every drain there)",
        "`status`",
        "none (each member's budget guards its own pods)"
    ),
    kind!(
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        Namespaced,
        Some(&kinds::HorizontalPodAutoscaler),
        None,
        "`Divided`: `maxReplicas` divided like replicas (10 over three members: 4+3+3) and `minReplicas` in proportion, at least 1 (the members together may so run up to one replica each above the hub's minimum); each member's autoscaler scales its own copy of the target, on its own metrics. List the target's `.spec.replicas` in the Placement's `ignoreFields` so that the hub's count does not undo the member's scaling. `Duplicated`: as it is in every member",
        "`status`",
        "none (the hub has no metrics; each member's autoscaler reports in its member)"
    ),
    kind!(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        Namespaced,
        None,
        None,
        "to every candidate (each member's network plugin enforces its copy)",
        "–",
        "none"
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        Namespaced,
        None,
        None,
        "to every candidate",
        "–",
        "none"
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        Namespaced,
        None,
        None,
        "to every candidate when it grants no more in a member than on the hub: its subjects are ServiceAccounts of its namespace placed with it, and its role a Role placed with it or a ClusterRole the hub has (see RBAC); otherwise held back, with the reason in the Placement's status",
        "–",
        "none"
    ),
    kind!(
        "",
        "v1",
        "LimitRange",
        "limitranges",
        Namespaced,
        None,
        None,
        "to every candidate",
        "–",
        "none"
    ),
    kind!(
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        Namespaced,
        None,
        None,
        "to every candidate (each member counts its own usage against the whole quota)",
        "`status`",
        "none"
    ),
    kind!(
        "",
        "v1",
        "Namespace",
        "namespaces",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate, with its labels and annotations (Pod Security labels among them); takes over a namespace Flotilla made for a Placement's objects",
        "`status`; `default`, `kube-*` and `flotilla-cluster-*` are never placed",
        "none; **never deleted from a member** (see Cluster-scoped objects)"
    ),
    kind!(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate",
        "`status`; Flotilla's own CRDs are never placed",
        "none; **never deleted from a member**"
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate",
        "`system:*`, `flotilla:*` and the apiserver's defaults (`kubernetes.io/bootstrapping`) are never placed",
        "none"
    ),
    kind!(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate",
        "`system:*`, `flotilla:*` and the apiserver's defaults (`kubernetes.io/bootstrapping`) are never placed; one naming users, groups or the hub's own ServiceAccounts is held back (see [RBAC](#rbac))",
        "none"
    ),
    kind!(
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate",
        "–",
        "none"
    ),
    kind!(
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate",
        "`system-*` (every cluster's own) are never placed",
        "none"
    ),
    kind!(
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        Cluster,
        None,
        None,
        "(ClusterPlacement) to every candidate (a member without its provisioner leaves its claims Pending)",
        "–",
        "none"
    ),
];

/// The kind `kind` of `api_version`, if the table has it.
pub fn lookup(api_version: &str, kind: &str) -> Option<&'static Kind> {
    KINDS
        .iter()
        .find(|k| k.kind == kind && k.api_version() == api_version)
}

/// The kinds an empty `resourceSelectors` selects: every namespaced kind of the table for a
/// Placement (`namespaced`), every cluster-scoped one for a ClusterPlacement.
pub fn defaults(namespaced: bool) -> impl Iterator<Item = &'static Kind> {
    KINDS.iter().filter(move |k| k.namespaced() == namespaced)
}

/// The table of `docs/placement.md`, one row per kind.
pub fn markdown() -> String {
    let mut out = String::from(
        "| kind | scope | how it is placed | what stays on the hub | status on the hub |\n\
         |---|---|---|---|---|\n",
    );
    for k in KINDS {
        let scope = match k.scope {
            Scope::Namespaced => "namespaced",
            Scope::Cluster => "cluster",
        };
        out.push_str(&format!(
            "| {} {} | {scope} | {} | {} | {} |\n",
            k.api_version(),
            k.kind,
            k.placed,
            k.stays,
            k.status
        ));
    }
    out.push_str(
        "| anything with a controller `ownerReference` | – | never placed | everything | – |\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds a placement of any real application needs are all in the table.
    #[test]
    fn the_table_knows_the_kinds_applications_are_made_of() {
        for (api_version, kind, namespaced) in [
            ("apps/v1", "Deployment", true),
            ("apps/v1", "ReplicaSet", true),
            ("apps/v1", "StatefulSet", true),
            ("apps/v1", "DaemonSet", true),
            ("batch/v1", "Job", true),
            ("batch/v1", "CronJob", true),
            ("v1", "Service", true),
            ("networking.k8s.io/v1", "Ingress", true),
            ("v1", "ConfigMap", true),
            ("v1", "Secret", true),
            ("v1", "ServiceAccount", true),
            ("v1", "PersistentVolumeClaim", true),
            ("policy/v1", "PodDisruptionBudget", true),
            ("autoscaling/v2", "HorizontalPodAutoscaler", true),
            ("networking.k8s.io/v1", "NetworkPolicy", true),
            ("rbac.authorization.k8s.io/v1", "Role", true),
            ("rbac.authorization.k8s.io/v1", "RoleBinding", true),
            ("v1", "LimitRange", true),
            ("v1", "ResourceQuota", true),
            ("v1", "Namespace", false),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition", false),
            ("rbac.authorization.k8s.io/v1", "ClusterRole", false),
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", false),
            ("networking.k8s.io/v1", "IngressClass", false),
            ("scheduling.k8s.io/v1", "PriorityClass", false),
            ("storage.k8s.io/v1", "StorageClass", false),
        ] {
            let k = lookup(api_version, kind).unwrap_or_else(|| panic!("{api_version} {kind}"));
            assert_eq!(k.namespaced(), namespaced, "{api_version} {kind}");
            assert_eq!(
                defaults(namespaced).filter(|d| d.kind == kind).count(),
                1,
                "an empty resourceSelectors selects {kind}"
            );
        }
    }

    #[test]
    fn every_kind_appears_once_and_status_rights_follow_the_interpreter() {
        for (i, k) in KINDS.iter().enumerate() {
            assert!(
                KINDS[..i]
                    .iter()
                    .all(|o| (o.api_version(), o.kind) != (k.api_version(), k.kind)),
                "{} {} twice",
                k.api_version(),
                k.kind
            );
            let rights = k.hub_rights();
            assert_eq!(
                k.history == History::ControllerRevisions,
                matches!(k.kind, "StatefulSet" | "DaemonSet")
            );
            assert_eq!(rights[0].1, ["get", "list", "watch"]);
            assert_eq!(
                rights.iter().any(|(r, _)| r.ends_with("/status")),
                k.hub_status(),
                "{}: status rights exactly when the splitter writes the hub status",
                k.kind
            );
        }
        assert!(lookup("apps/v1", "Deployment").is_some_and(Kind::hub_status));
        assert!(!lookup("v1", "ConfigMap").is_some_and(Kind::hub_status));
        assert_eq!(
            lookup("apps/v1", "Deployment").map(|k| k.history),
            Some(History::ReplicaSets)
        );
    }

    /// `docs/placement.md` shows the table as [`markdown`] makes it. `UPDATE_DOCS=1` rewrites the
    /// document's table.
    #[test]
    fn the_docs_show_the_table() {
        const BEGIN: &str =
            "<!-- kinds-table: generated from controllers/interpreter/src/table.rs -->\n";
        const END: &str = "<!-- kinds-table end -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/placement.md");
        let text = std::fs::read_to_string(path).expect("reading docs/placement.md");
        let start = text.find(BEGIN).expect("the table's begin marker") + BEGIN.len();
        let end = text[start..].find(END).expect("the table's end marker") + start;
        let table = markdown();
        if std::env::var_os("UPDATE_DOCS").is_some() {
            let updated = format!("{}{table}{}", &text[..start], &text[end..]);
            std::fs::write(path, updated).expect("writing docs/placement.md");
            return;
        }
        assert_eq!(
            &text[start..end],
            table,
            "docs/placement.md's table of kinds is stale: run UPDATE_DOCS=1 cargo test -p flotilla-interpreter"
        );
    }
}
