//! Every label, annotation, finalizer, field manager, condition type and reason Flotilla uses,
//! in one place, so that the controllers, the CLI and the tests agree on the spelling.

/// Label keys.
pub mod labels {
    /// The member cluster an object belongs to: on every Work and APIResourceImport, on the hub
    /// namespace `flotilla-cluster-<name>` and on the agent's CertificateSigningRequests.
    /// Informational for Works and imports (the namespace is the source of truth); the `Cluster`
    /// printer column of both kinds reads it.
    pub const CLUSTER: &str = "flotilla.dev/cluster";

    /// On Works: the name of the Placement that produced the Work. Placement names are limited to
    /// 63 characters so that they fit a label value.
    pub const PLACEMENT: &str = "flotilla.dev/placement";

    /// On Works of one object (written by splitters before Works held many): the UID of the
    /// hub object the Work renders.
    pub const SOURCE_UID: &str = "flotilla.dev/source-uid";

    /// On the splitter's Works: which of the Works of one Placement, member and type this is
    /// (`0`, `1`, ...). Each holds up to 50 objects of that type.
    pub const BUNDLE: &str = "flotilla.dev/bundle";

    /// On every object the syncer created in a member (including namespaces it created), with the
    /// value [`MANAGED_VALUE`]. The syncer watches member objects by this label, and an object
    /// without it is never overwritten unless the Work's `conflictPolicy` is `Adopt`.
    pub const MANAGED: &str = "flotilla.dev/managed";

    /// The value of [`MANAGED`].
    pub const MANAGED_VALUE: &str = "true";

    /// On hub CustomResourceDefinitions the negotiator created from a NegotiatedAPIResource
    /// (`spec.publish: true`), with the value [`PUBLISHED_VALUE`]. A hub CRD without it was made
    /// by someone else: its schema is enforced, never changed.
    pub const PUBLISHED: &str = "flotilla.dev/published";

    /// The value of [`PUBLISHED`].
    pub const PUBLISHED_VALUE: &str = "true";

    /// On the hub Secrets that hold the data of the Secrets a Work places (see
    /// [`crate::work_data`]), with the value [`WORK_DATA_VALUE`]: the splitter made them, each
    /// belongs to its Work (an ownerReference) and goes with it.
    pub const WORK_DATA: &str = "flotilla.dev/work-data";

    /// The value of [`WORK_DATA`].
    pub const WORK_DATA_VALUE: &str = "true";
}

/// Annotation keys.
pub mod annotations {
    /// On member objects: the Work that owns the object, as `<namespace>/<name>` on the hub.
    pub const WORK: &str = "flotilla.dev/work";

    /// On member objects: a hash of the manifest as the syncer last applied it (the object it
    /// sent, without this annotation; a Secret's with its data by reference, as its Work has it,
    /// see [`DATA_SECRET`]). With the object's `resourceVersion` unchanged since, the syncer
    /// knows there is nothing to apply.
    pub const MANIFEST_HASH: &str = "flotilla.dev/manifest-hash";

    /// On Works and member objects: the `apiVersion` of the hub object the Work renders.
    pub const SOURCE_API_VERSION: &str = "flotilla.dev/source-api-version";

    /// On Works and member objects: the `kind` of the hub object the Work renders.
    pub const SOURCE_KIND: &str = "flotilla.dev/source-kind";

    /// On Works and member objects: the namespace of the hub object the Work renders.
    pub const SOURCE_NAMESPACE: &str = "flotilla.dev/source-namespace";

    /// On Works and member objects: the name of the hub object the Work renders.
    pub const SOURCE_NAME: &str = "flotilla.dev/source-name";

    /// On Works: the names, separated by commas, of older Works of the same cluster namespace
    /// that placed objects this Work now places (Works of one object, written before Works held
    /// many). The syncer lets this Work take over their member objects, so the move never
    /// deletes and recreates them; the splitter removes an older Work once this one reports its
    /// object applied.
    pub const REPLACES: &str = "flotilla.dev/replaces";

    /// On Works: the `metadata.generation` of the hub object the Work renders, so the hub status
    /// can tell whether every copy runs the current generation.
    pub const SOURCE_GENERATION: &str = "flotilla.dev/source-generation";

    /// On member namespaces: set when the syncer created the namespace (rather than finding it),
    /// so that only namespaces Flotilla created are ever candidates for clean-up.
    pub const CREATED_NAMESPACE: &str = "flotilla.dev/created-namespace";
    /// On a hub `flotilla-cluster-<name>` namespace: the UID of the Cluster registration created
    /// it for. A namespace of that name without it (made by someone else first) is never used.
    pub const CLUSTER_UID: &str = "flotilla.dev/cluster-uid";
    /// On a pull-mode Cluster: the CertificateSigningRequest of its bootstrap identity that
    /// registration approved. A bootstrap identity gets one certificate; after that the agent
    /// renews with its own, and further requests of the bootstrap identity are denied
    /// (`BootstrapUsed`). The hub admin removes the annotation to let a member that lost its
    /// credential register again.
    pub const BOOTSTRAP_REQUEST: &str = "flotilla.dev/bootstrap-request";
    /// On a hub Namespace, set by an admin: `"true"` lets the Placements of the namespace take
    /// over member objects Flotilla did not create (`conflictPolicy: Adopt`). Without it a
    /// Placement's `Adopt` counts as `Abort`: adopting is an admin decision, not a tenant's
    /// (a tenant whose namespace shares a name with a member's own, say `monitoring`, would
    /// otherwise take over the member's objects).
    pub const ALLOW_ADOPT: &str = "flotilla.dev/allow-adopt";

    /// On a hub Namespace, set by an admin: `"true"` lets its Placements place objects into
    /// member namespaces of the same name that Flotilla did not create (the members' own, say
    /// `monitoring`), which hold what the member's admins put there: ServiceAccounts with rights,
    /// no Pod Security labels from the hub. Without it (nor [`ALLOW_ADOPT`], which implies it)
    /// only namespaces Flotilla created for the hub namespace take its objects; a manifest bound
    /// for another reports `Applied=False, reason=NamespaceNotFlotillas`.
    pub const ALLOW_EXISTING_NAMESPACES: &str = "flotilla.dev/allow-existing-namespaces";

    /// On a hub Namespace, set by an admin: `"true"` lets its Placements place RoleBindings
    /// whose subjects are users, groups, or ServiceAccounts not placed with them. Without it such
    /// a binding is held back: a user or group name means whoever a member's authenticators say,
    /// which need not be who it is on the hub. On a ClusterPlacement (an admin's already), the
    /// same for the ClusterRoleBindings it places: without it, only those whose subjects are all
    /// ServiceAccounts the hub has outside its own namespaces are placed.
    pub const ALLOW_ANY_BINDING_SUBJECT: &str = "flotilla.dev/allow-any-binding-subject";

    /// On a hub Namespace, set by an admin: `"true"` lets its Placements place Services with
    /// `spec.externalIPs`. Without it such a Service is held back: in a member it would take the
    /// traffic of those addresses from every pod and node there (CVE-2020-8554), which on the hub
    /// (no nodes) it takes from nobody.
    pub const ALLOW_EXTERNAL_IPS: &str = "flotilla.dev/allow-external-ips";

    /// On a hub Namespace, set by an admin: the most copies (placed objects × the members each
    /// goes to) its Placements may keep in the members, e.g. `"500"`; `"0"` allows none. Without
    /// it the splitter's `--max-copies-per-namespace` holds. Each copy is a manifest in a Work in
    /// the hub's etcd, outside any quota of the namespace: without a limit one tenant could fill
    /// the hub.
    pub const MAX_COPIES: &str = "flotilla.dev/max-copies";

    /// On a hub Namespace, set by an admin: the most bytes the copies of its Placements may take
    /// in the hub's etcd (their Works' manifests and the data of their Secrets), as a quantity,
    /// e.g. `"64Mi"`; `"0"` allows none. Without it the splitter's
    /// `--max-copy-bytes-per-namespace` holds. Copies count once per member: one 1 MiB
    /// ConfigMap placed on 50 members takes 50 MiB.
    pub const MAX_COPY_BYTES: &str = "flotilla.dev/max-copy-bytes";

    /// On Works, written by the splitter: the bytes its copies take in the hub (manifests and
    /// Secret data), counted against [`MAX_COPY_BYTES`].
    pub const COPY_BYTES: &str = "flotilla.dev/copy-bytes";

    /// On hub objects: the Placement that won when several Placements select the object.
    pub const PLACEMENT: &str = "flotilla.dev/placement";

    /// On the Secret manifests of a Work, which hold no `data` or `stringData`: the name of the
    /// hub Secret, in the Work's namespace, that holds their data (the key named after the
    /// Secret; see [`crate::work_data`]). So a tenant's Secret bytes are stored only in
    /// Secrets (which the hub's encryption at rest for `secrets` covers), never in Works. The
    /// syncer reads the data from there, puts it into the object and applies it without this
    /// annotation.
    pub const DATA_SECRET: &str = "flotilla.dev/data-secret";

    /// On the Secret manifests of a Work, next to [`DATA_SECRET`]: the `resourceVersion` of the
    /// hub Secret the data comes from. It changes whenever the data does, so the Work (and the
    /// hash its member object is applied with) changes too and the syncer applies the new data;
    /// it says nothing about the data itself. Not applied to the member either.
    pub const DATA_VERSION: &str = "flotilla.dev/data-version";

    /// On Works of a Placement (or ClusterPlacement) that no longer exists, and on hub Secrets
    /// of type [`crate::work_data::SECRET_TYPE`] left without their Work: when the splitter first
    /// saw it so, an RFC 3339 time. Once it is older than the splitter's `--orphaned-work-grace`
    /// the splitter releases the Work (`deletePolicy: Orphan`, then deletes it: its member objects
    /// stay, unmanaged) or deletes the Secret; a Placement of that name appearing again removes
    /// it. Kept on the object, so the clock survives a restart of the splitter.
    pub const ORPHANED_SINCE: &str = "flotilla.dev/orphaned-since";
}

/// Finalizers, each named after the controller that removes it.
pub mod finalizers {
    /// On Clusters: revoke the agent's access and remove `flotilla-cluster-<name>` before the
    /// Cluster goes.
    pub const REGISTRATION: &str = "flotilla.dev/registration";

    /// On Works: delete (or orphan, per `deletePolicy`) the member objects before the Work goes.
    /// The splitter writes Works with it already set; the syncer adds it to Works made by others.
    pub const SYNCER: &str = "flotilla.dev/syncer";

    /// On placed hub objects: delete their Works (and so their member copies) before they go.
    pub const SPLITTER: &str = "flotilla.dev/splitter";
}

/// Server-side apply field managers, one per controller.
pub mod field_managers {
    /// `flotilla-registration` on the hub.
    pub const REGISTRATION: &str = "flotilla/registration";
    /// `flotilla-registration agent` in a pull-mode member.
    pub const AGENT: &str = "flotilla/agent";
    /// `flotilla-syncer`, for member objects and Work status.
    pub const SYNCER: &str = "flotilla/syncer";
    /// `flotilla-splitter`, for Works and the status of hub objects.
    pub const SPLITTER: &str = "flotilla/splitter";
    /// `flotilla-negotiator` on the hub.
    pub const NEGOTIATOR: &str = "flotilla/negotiator";
    /// The importer of `flotilla-negotiator` (on the hub, or in a pull-mode member).
    pub const IMPORTER: &str = "flotilla/importer";
    /// `kubectl flotilla join`: a push member's kubeconfig Secrets and Cluster on the hub, and
    /// its read-only identity in the member.
    pub const JOIN: &str = "flotilla/join";
}

/// Condition types.
pub mod conditions {
    /// Cluster: the hub accepts the cluster (push mode: on creation; pull mode: `hubAcceptsClient`).
    pub const ACCEPTED: &str = "Accepted";
    /// Cluster: the per-cluster namespace and RBAC exist and the member was reached once.
    pub const JOINED: &str = "Joined";
    /// Cluster: the member answered the last probe (push) or heartbeat (pull) within the grace
    /// period. `Unknown` after the grace period without an answer.
    pub const READY: &str = "Ready";
    /// Cluster: new work may be placed on the member (`False` when cordoned or tainted
    /// `NoSchedule`).
    pub const SCHEDULABLE: &str = "Schedulable";

    /// Work, Placement: every manifest was applied to the member.
    pub const APPLIED: &str = "Applied";
    /// Work, Placement, hub objects: every applied object is available in the member.
    pub const AVAILABLE: &str = "Available";
    /// Work: an applied object reports a failure (e.g. a Deployment's `Progressing=False`).
    pub const DEGRADED: &str = "Degraded";

    /// APIResourceImport: the member's schema accepts what the negotiated (or enforced) schema
    /// accepts.
    pub const COMPATIBLE: &str = "Compatible";
    /// APIResourceImport: the last attempt to read the member's schema succeeded. When it fails
    /// (the member is unreachable, say) the last import is kept and this condition says why.
    pub const IMPORTED: &str = "Imported";

    /// NegotiatedAPIResource: a least-common-denominator schema was computed from the imports.
    pub const SUBMITTED: &str = "Submitted";
    /// NegotiatedAPIResource: the hub serves a CRD created from the negotiated schema.
    pub const PUBLISHED: &str = "Published";
    /// NegotiatedAPIResource: the hub already serves this type (built in, or a CRD not created by
    /// Flotilla), its schema is fixed and imports are only checked against it.
    pub const ENFORCED: &str = "Enforced";

    /// Placement: every selected object has a placement decision.
    pub const SCHEDULED: &str = "Scheduled";
    /// Placement: every object of its namespace of a kind in Flotilla's table of kinds is placed
    /// by one of the namespace's Placements (`False`, reason `NotPlaced`: `status.notPlaced`
    /// lists those that are not, and why).
    pub const ALL_PLACED: &str = "AllPlaced";

    /// Hub objects (e.g. a Deployment's status): where the object runs; the message gives the
    /// distribution, e.g. `member1=4 member2=3 member3=3`.
    pub const PLACED: &str = "Placed";
}

/// Condition reasons (CamelCase, as Kubernetes requires), grouped by the condition that uses them.
pub mod reasons {
    // Cluster: Accepted
    /// The Cluster is accepted by the hub.
    pub const ACCEPTED: &str = "Accepted";
    /// A pull-mode Cluster waits for an admin to set `hubAcceptsClient: true`.
    pub const AWAITING_ACCEPTANCE: &str = "AwaitingAcceptance";
    /// `hubAcceptsClient` was set back to false: the agent's access is revoked.
    pub const ACCEPTANCE_REVOKED: &str = "AcceptanceRevoked";
    /// Another member already registered under this name (a different cluster ID).
    pub const DUPLICATE_NAME: &str = "DuplicateName";

    // Cluster: Joined
    /// The per-cluster namespace and RBAC exist and the member was reached.
    pub const JOINED: &str = "Joined";
    /// The pull-mode agent has not sent an approved CSR yet.
    pub const AWAITING_AGENT: &str = "AwaitingAgent";

    // Cluster: Ready
    /// The last probe or heartbeat succeeded.
    pub const REACHABLE: &str = "Reachable";
    /// The member's apiserver could not be reached.
    pub const UNREACHABLE: &str = "Unreachable";
    /// The member rejected the credentials (401/403).
    pub const UNAUTHORIZED: &str = "Unauthorized";
    /// The kubeconfig in the Secret cannot be parsed or used.
    pub const INVALID_KUBECONFIG: &str = "InvalidKubeconfig";
    /// A push-mode Cluster has no read-only kubeconfig (`spec.readOnlyKubeconfigSecretRef`) and
    /// the hub does not let registration and the negotiator read members with the writable one.
    pub const READ_ONLY_KUBECONFIG_REQUIRED: &str = "ReadOnlyKubeconfigRequired";
    /// The Secret named by `kubeconfigSecretRef` does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// The Secret exists but has no such key.
    pub const SECRET_KEY_NOT_FOUND: &str = "SecretKeyNotFound";
    /// The member answered, but `/readyz` says it is not ready.
    pub const NOT_READY: &str = "NotReady";
    /// A Placement's member that was not Ready for longer than the failover toleration: its work
    /// moves to the other members.
    pub const FAILED_OVER: &str = "FailedOver";
    /// No successful probe or heartbeat within the grace period.
    pub const HEARTBEAT_EXPIRED: &str = "HeartbeatExpired";

    // Cluster: Schedulable
    /// Nothing prevents new placements.
    pub const SCHEDULABLE: &str = "Schedulable";
    /// `spec.unschedulable` is true.
    pub const CORDONED: &str = "Cordoned";
    /// A `NoSchedule` taint is present.
    pub const TAINTED: &str = "Tainted";

    // Work: Applied / Available / Degraded
    /// Every manifest was applied.
    pub const APPLIED: &str = "Applied";
    /// The member rejected a manifest; the message has the server's answer.
    pub const APPLY_FAILED: &str = "ApplyFailed";
    /// An object not created by Flotilla exists in the member and `conflictPolicy` is `Abort`.
    pub const CONFLICT: &str = "Conflict";
    /// A manifest is not an object with an apiVersion, a kind and a `metadata.name` (a Work
    /// written by hand); the message names it by its index in `spec.manifests`.
    pub const INVALID_MANIFEST: &str = "InvalidManifest";
    /// A manifest's member namespace exists and Flotilla did not create it, and the Work may not
    /// place into such namespaces (`spec.allowExistingNamespaces: false`).
    pub const NAMESPACE_NOT_FLOTILLAS: &str = "NamespaceNotFlotillas";
    /// The member does not serve a manifest's resource type.
    pub const UNKNOWN_RESOURCE_TYPE: &str = "UnknownResourceType";
    /// The hub Secret that holds a Secret manifest's data (its `flotilla.dev/data-secret`) is
    /// missing, unreadable or lacks the data: nothing was applied, and the member keeps its copy.
    pub const SECRET_DATA_MISSING: &str = "SecretDataMissing";
    /// The member is not Ready: work is paused, nothing is deleted.
    pub const CLUSTER_UNAVAILABLE: &str = "ClusterUnavailable";
    /// The Work is being deleted and member objects are being removed (or orphaned).
    pub const DELETING: &str = "Deleting";
    /// Every applied object is available.
    pub const AVAILABLE: &str = "Available";
    /// Some applied object is not available yet.
    pub const NOT_AVAILABLE: &str = "NotAvailable";
    /// An applied object reports a failure.
    pub const DEGRADED: &str = "Degraded";
    /// No applied object reports a failure.
    pub const HEALTHY: &str = "Healthy";

    // APIResourceImport: Compatible
    /// The member's schema is the same as the negotiated one.
    pub const IDENTICAL: &str = "Identical";
    /// The member's schema accepts everything the negotiated one does, and more.
    pub const SUPERSET: &str = "Superset";
    /// The member lacks fields the negotiated schema has; objects that do not use them can go.
    pub const MISSING_FIELDS: &str = "MissingFields";
    /// The member's schema cannot accept what the negotiated schema accepts.
    pub const INCOMPATIBLE: &str = "Incompatible";
    /// The member serves the type cluster-scoped where the negotiated type is namespaced, or
    /// the other way round: none of its objects can go there.
    pub const SCOPE_DIFFERS: &str = "ScopeDiffers";
    /// Not decided yet (no import, or not compared yet): never treated as incompatible.
    pub const PENDING: &str = "Pending";
    /// The comparison could not decide (unsupported construct); the message has the path.
    pub const UNDECIDABLE: &str = "Undecidable";

    // APIResourceImport: Imported
    /// The member's schema was read.
    pub const IMPORTED: &str = "Imported";
    /// The member's schema could not be read; the last import is kept.
    pub const IMPORT_FAILED: &str = "ImportFailed";

    // NegotiatedAPIResource: Submitted / Published / Enforced
    /// A negotiated schema was computed.
    pub const NEGOTIATED: &str = "Negotiated";
    /// No import exists yet.
    pub const NO_IMPORTS: &str = "NoImports";
    /// The imports have no common schema (or none could be read); the message has the path.
    pub const NO_COMMON_SCHEMA: &str = "NoCommonSchema";

    // WorkloadProfile: Accepted
    /// Every path is in the kind's negotiated schema and the health rule compiles.
    pub const PROFILE_ACCEPTED: &str = "Accepted";
    /// The kind has no NegotiatedAPIResource yet (no Placement selects it, no `--extra-type`).
    pub const NO_NEGOTIATED_SCHEMA: &str = "NoNegotiatedSchema";
    /// A path names a field the kind's negotiated schema does not have.
    pub const PATH_NOT_IN_SCHEMA: &str = "PathNotInSchema";
    /// A path names a field that is not an integer.
    pub const NOT_AN_INTEGER: &str = "NotAnInteger";
    /// Status sums are asked for, but the kind has no status subresource to write them to.
    pub const NO_STATUS_SUBRESOURCE: &str = "NoStatusSubresource";
    /// The health rule does not compile, or refers to something other than `self`.
    pub const INVALID_HEALTH_RULE: &str = "InvalidHealthRule";
    /// A `Ready` condition is asked for, but the kind's status has no conditions list that
    /// takes one.
    pub const NO_CONDITIONS_LIST: &str = "NoConditionsList";
    /// A Placement asks for `conflictPolicy: Adopt` in a namespace whose admin did not allow it
    /// (the `flotilla.dev/allow-adopt` annotation): its copies are placed with `Abort`.
    pub const ADOPT_NOT_ALLOWED: &str = "AdoptNotAllowed";
    /// Placing what a Placement selects would make its namespace hold more copies in the
    /// members than its limit (`flotilla.dev/max-copies`, `--max-copies-per-namespace`): no
    /// new copy is placed; the copies there stay and follow their hub objects.
    pub const COPY_QUOTA_EXCEEDED: &str = "CopyQuotaExceeded";
    /// The Cluster's hub namespace `flotilla-cluster-<name>` exists and registration did not
    /// create it for this Cluster (someone made it first): the Cluster is not joined.
    pub const NAMESPACE_TAKEN: &str = "NamespaceTaken";
    /// A workload's pods violate its hub namespace's Pod Security level: placed nowhere.
    pub const POD_SECURITY_VIOLATION: &str = "PodSecurityViolation";
    /// The hub could not check a workload's pods against its namespace's Pod Security level
    /// now: nothing new is placed, its copies stay as they are.
    pub const POD_SECURITY_UNKNOWN: &str = "PodSecurityUnknown";
    /// A RoleBinding would grant more in a member than on the hub (a subject that is not a
    /// ServiceAccount placed with it, or a role that is neither placed with it nor on the hub):
    /// placed nowhere.
    pub const BINDING_HELD_BACK: &str = "BindingHeldBack";
    /// The hub could not tell now whether a RoleBinding grants more in a member than on the hub
    /// (its ClusterRole could not be read): nothing new is placed, its copies stay as they are.
    pub const BINDING_UNKNOWN: &str = "BindingUnknown";
    /// A Service with `spec.externalIPs` is placed nowhere: it would intercept those addresses'
    /// traffic in every member (see `annotations::ALLOW_EXTERNAL_IPS`); its copies stay as they
    /// are.
    pub const EXTERNAL_IPS_HELD_BACK: &str = "ExternalIPsHeldBack";
    /// Placement `AllPlaced`: objects of the namespace are placed by no Placement (listed in
    /// `status.notPlaced`); also the Event on each such hub object.
    pub const NOT_PLACED: &str = "NotPlaced";
    /// Placement `AllPlaced`: every object of the namespace of a known kind is placed.
    pub const ALL_PLACED: &str = "AllPlaced";
    /// `status.notPlaced`: no Placement of the namespace selects the object.
    pub const NOT_SELECTED: &str = "NotSelected";
    /// `status.notPlaced`: the hub made the object for itself (a controller of the hub owns it,
    /// or it is the record of a Helm release installed into the hub): never placed.
    pub const MADE_BY_THE_HUB: &str = "MadeByTheHub";
    /// An older profile of the same kind is the one in use.
    pub const DUPLICATE: &str = "Duplicate";
    /// The hub CRD was created or updated from the negotiated schema.
    pub const PUBLISHED: &str = "Published";
    /// `spec.publish` is false.
    pub const NOT_PUBLISHED: &str = "NotPublished";
    /// Creating or updating the hub CRD failed.
    pub const PUBLISH_FAILED: &str = "PublishFailed";
    /// The hub's apiserver refuses the CRD that would be published (a server-side dry run): the
    /// message has its first errors, with their paths, and how many more there are.
    pub const PUBLISH_REFUSED: &str = "PublishRefused";
    /// Another version of the type is published, this one is not: not every member that serves
    /// the published version serves it, or its fields differ from the storage version's (the
    /// hub can only convert between versions with None). The message says which.
    pub const VERSION_LEFT_OUT: &str = "VersionLeftOut";
    /// The type is built into the hub's apiserver.
    pub const BUILT_IN: &str = "BuiltIn";
    /// The hub serves the type from a CRD that Flotilla did not create.
    pub const HUB_CRD: &str = "HubCRD";
    /// The hub does not serve the type; the negotiated schema is used.
    pub const NOT_ENFORCED: &str = "NotEnforced";

    // Placement: Scheduled
    /// Every selected object has a decision.
    pub const SCHEDULED: &str = "Scheduled";
    /// The cluster affinity selects no cluster.
    pub const NO_CLUSTER_SELECTED: &str = "NoClusterSelected";
    /// Clusters are selected, but none is eligible (not Ready, cordoned, tainted, incompatible).
    pub const NO_ELIGIBLE_CLUSTER: &str = "NoEligibleCluster";
    /// A resource selector names a type that no member (or the hub) serves.
    pub const UNSUPPORTED_TYPE: &str = "UnsupportedType";
    /// The splitter may not read a selected type (RBAC); its copies are kept as they are.
    pub const FORBIDDEN: &str = "Forbidden";
    /// A selected type cannot be looked up or read right now (discovery or API error); its
    /// copies are kept as they are.
    pub const TYPE_UNREADABLE: &str = "TypeUnreadable";
    /// The hub refused to store some of the Placement's Works (too large, an admission policy);
    /// the others were written.
    pub const WORK_WRITE_FAILED: &str = "WorkWriteFailed";
    /// Two Placements of equal specificity select the same object.
    pub const PLACEMENT_CONFLICT: &str = "PlacementConflict";
    /// A more specific Placement selects the object.
    pub const OVERRIDDEN: &str = "Overridden";
    /// Replicas are moving away from a failed cluster.
    pub const FAILING_OVER: &str = "FailingOver";
    /// The Cluster is being deleted: it takes no work, and its Works are registration's to
    /// remove (Orphan for push mode).
    pub const CLUSTER_DELETING: &str = "ClusterDeleting";

    // Placement: Applied and Available
    /// Every copy is applied (Applied) or available (Available) for its current spec.
    pub const ALL_COPIES: &str = "AllCopies";
    /// Some copies are not applied (Applied) or not available (Available) yet.
    pub const WAITING_FOR_COPIES: &str = "WaitingForCopies";
    /// The Placement places nothing.
    pub const NOTHING_PLACED: &str = "NothingPlaced";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Condition types and reasons must be CamelCase identifiers: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
    /// is what the apiserver enforces for `reason`; we hold ourselves to plain CamelCase.
    fn is_camel_case(s: &str) -> bool {
        s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && s.chars().all(|c| c.is_ascii_alphanumeric())
    }

    #[test]
    fn condition_types_and_reasons_are_camel_case() {
        let all = [
            conditions::ACCEPTED,
            conditions::JOINED,
            conditions::READY,
            conditions::SCHEDULABLE,
            conditions::APPLIED,
            conditions::AVAILABLE,
            conditions::DEGRADED,
            conditions::COMPATIBLE,
            conditions::IMPORTED,
            conditions::SUBMITTED,
            conditions::PUBLISHED,
            conditions::ENFORCED,
            conditions::SCHEDULED,
            conditions::PLACED,
            reasons::AWAITING_ACCEPTANCE,
            reasons::ACCEPTANCE_REVOKED,
            reasons::DUPLICATE_NAME,
            reasons::AWAITING_AGENT,
            reasons::REACHABLE,
            reasons::UNREACHABLE,
            reasons::UNAUTHORIZED,
            reasons::INVALID_KUBECONFIG,
            reasons::SECRET_NOT_FOUND,
            reasons::SECRET_KEY_NOT_FOUND,
            reasons::NOT_READY,
            reasons::HEARTBEAT_EXPIRED,
            reasons::CORDONED,
            reasons::TAINTED,
            reasons::APPLY_FAILED,
            reasons::CONFLICT,
            reasons::UNKNOWN_RESOURCE_TYPE,
            reasons::SECRET_DATA_MISSING,
            reasons::CLUSTER_UNAVAILABLE,
            reasons::DELETING,
            reasons::NOT_AVAILABLE,
            reasons::HEALTHY,
            reasons::IDENTICAL,
            reasons::SUPERSET,
            reasons::MISSING_FIELDS,
            reasons::INCOMPATIBLE,
            reasons::PENDING,
            reasons::UNDECIDABLE,
            reasons::IMPORTED,
            reasons::IMPORT_FAILED,
            reasons::NEGOTIATED,
            reasons::NO_IMPORTS,
            reasons::NO_COMMON_SCHEMA,
            reasons::NOT_PUBLISHED,
            reasons::PUBLISH_FAILED,
            reasons::BUILT_IN,
            reasons::HUB_CRD,
            reasons::NOT_ENFORCED,
            reasons::NO_CLUSTER_SELECTED,
            reasons::NO_ELIGIBLE_CLUSTER,
            reasons::UNSUPPORTED_TYPE,
            reasons::FORBIDDEN,
            reasons::TYPE_UNREADABLE,
            reasons::WORK_WRITE_FAILED,
            reasons::PLACEMENT_CONFLICT,
            reasons::OVERRIDDEN,
            reasons::FAILING_OVER,
            reasons::CLUSTER_DELETING,
            reasons::ALL_COPIES,
            reasons::WAITING_FOR_COPIES,
            reasons::NOTHING_PLACED,
        ];
        for s in all {
            assert!(is_camel_case(s), "{s:?} is not CamelCase");
        }
    }

    #[test]
    fn keys_are_in_the_flotilla_domain() {
        for key in [
            labels::CLUSTER,
            labels::PLACEMENT,
            labels::SOURCE_UID,
            labels::MANAGED,
            labels::PUBLISHED,
            labels::WORK_DATA,
            annotations::WORK,
            annotations::SOURCE_API_VERSION,
            annotations::SOURCE_KIND,
            annotations::SOURCE_NAMESPACE,
            annotations::SOURCE_NAME,
            annotations::CREATED_NAMESPACE,
            annotations::PLACEMENT,
            annotations::DATA_SECRET,
            annotations::DATA_VERSION,
            annotations::ORPHANED_SINCE,
            finalizers::REGISTRATION,
            finalizers::SYNCER,
            finalizers::SPLITTER,
        ] {
            let (prefix, name) = key.split_once('/').expect("qualified key");
            assert_eq!(prefix, crate::GROUP, "{key}");
            assert!(!name.is_empty() && name.len() <= 63, "{key}");
        }
        for manager in [
            field_managers::REGISTRATION,
            field_managers::AGENT,
            field_managers::SYNCER,
            field_managers::SPLITTER,
            field_managers::NEGOTIATOR,
            field_managers::IMPORTER,
        ] {
            assert!(manager.starts_with("flotilla/"), "{manager}");
        }
    }
}
