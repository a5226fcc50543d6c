//! What Flotilla knows about each kind of object it places, as pure functions of the objects.
//!
//! For every kind, one [`Interpreter`] says:
//! - what the hub made and must never travel to a member ([`Interpreter::prune`], built on
//!   [`hub_made`]): a Job's generated selector, a Service's cluster IPs, a claim's binding;
//! - how the copies share the work under a `Divided` Placement ([`Interpreter::divides`]):
//!   replicas, ordinal ranges, completions, or the whole object on one member;
//! - how the copies' statuses make the hub object's status ([`Interpreter::hub_status`]);
//! - when a member's copy is healthy ([`Interpreter::unhealthy`], on top of the generic rules
//!   of [`health::health`]).
//!
//! A custom kind gets its rules from an accepted `WorkloadProfile` ([`Profile`]), checked against
//! the kind's negotiated schema by [`profile::check`].
//!
//! Kinds without an interpreter of their own get the generic one: copied whole to every chosen
//! member, the hub object's status left alone, healthy by the generic rules.
//!
//! [`table`] is the one place that knows kinds: which an empty `resourceSelectors` places, which
//! have an interpreter, what the splitter needs on the hub for each; `docs/placement.md` shows it.

pub mod health;
pub mod hub_made;
mod kinds;
pub mod profile;
pub mod table;

pub use kinds::{Divides, HubStatus, Interpreter, builtin, generic, interpreter, proportional};
pub use profile::{HealthRule, Kinds, Profile};
pub use table::{KINDS, Kind, Scope};

/// Whether deleting a member's copy of a `kind` object (of `api_version`) would delete what
/// others made in that member too: a Namespace takes everything in it, a
/// CustomResourceDefinition every object of its type. Flotilla never deletes those: a copy that
/// leaves its placement is orphaned (left in the member, unmanaged), whatever the delete policy.
pub fn deletion_cascades(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("v1", "Namespace") | ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_namespaces_and_crds_take_others_objects_with_them() {
        assert!(super::deletion_cascades("v1", "Namespace"));
        assert!(super::deletion_cascades(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition"
        ));
        for (v, k) in [
            ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            ("v1", "ConfigMap"),
            ("example.com/v1", "Namespace"),
        ] {
            assert!(!super::deletion_cascades(v, k), "{v} {k}");
        }
    }
}
