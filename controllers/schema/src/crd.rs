//! CRD-level comparison: what `kubectl apply` of a new CRD does to clients and stored objects.
//!
//! Rules (OLM v1 CRD upgrade safety, plus what the API server enforces):
//! - `spec.scope` changed: breaking (OLM "scope"). `spec.group`, `names.kind`, `names.plural`
//!   or `names.listKind` changed: breaking (another resource altogether).
//! - A version removed: breaking when it is listed in `status.storedVersions` (OLM "stored
//!   version removed"; the API server refuses it) or was served (its clients break); safe when
//!   it was neither. A version added: safe. A version no longer served: breaking; newly served:
//!   safe. The storage version moving: safe (reported).
//! - Every version in both: its `openAPIV3Schema` compared by [`compare`](crate::compare), the
//!   changes tagged with the version. A schema added where there was none narrows (anything was
//!   accepted); removed is safe.
//! - Subresources: `status` added or removed is breaking (who may write `.status` changes);
//!   `scale` removed or its paths changed is breaking, added is safe.
//! - `spec.conversion` changed: unknown (a webhook's behaviour cannot be read from the CRD).
//! - `spec.preserveUnknownFields` true→false narrows (unknown fields start being pruned).
//!
//! Printer columns, short names, categories, selectable fields and deprecation flags do not
//! change what is accepted and are not compared.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use serde_json::Value;

use crate::change::{Change, ChangeKind, Comparison, Verdict};
use crate::compare::Comparer;
use crate::path::Path;
use crate::schema::Schema;
use crate::{Limits, SchemaError};

/// Compares two CRDs (see the module docs), with the default [`Limits`].
pub fn compare_crds(
    old: &CustomResourceDefinition,
    new: &CustomResourceDefinition,
) -> Result<Comparison, SchemaError> {
    compare_crds_with(old, new, &Limits::default())
}

/// [`compare_crds`] within `limits`.
pub fn compare_crds_with(
    old: &CustomResourceDefinition,
    new: &CustomResourceDefinition,
    limits: &Limits,
) -> Result<Comparison, SchemaError> {
    let mut changes = Vec::new();
    let mut push = |version: Option<&str>, path: &str, kind, verdict, message: String| {
        changes.push(Change {
            version: version.map(str::to_string),
            path: path.to_string(),
            kind,
            verdict,
            message,
        })
    };
    let (o, n) = (&old.spec, &new.spec);

    if o.scope != n.scope {
        push(
            None,
            ".spec.scope",
            ChangeKind::ScopeChanged,
            Verdict::Breaking,
            format!("scope changed from {} to {}", o.scope, n.scope),
        );
    }
    if o.group != n.group {
        push(
            None,
            ".spec.group",
            ChangeKind::GroupChanged,
            Verdict::Breaking,
            format!("group changed from {} to {}", o.group, n.group),
        );
    }
    for (field, a, b) in [
        ("kind", Some(&o.names.kind), Some(&n.names.kind)),
        ("plural", Some(&o.names.plural), Some(&n.names.plural)),
        (
            "listKind",
            o.names.list_kind.as_ref(),
            n.names.list_kind.as_ref(),
        ),
    ] {
        if a != b {
            push(
                None,
                &format!(".spec.names.{field}"),
                ChangeKind::NamesChanged,
                Verdict::Breaking,
                format!("names.{field} changed from {a:?} to {b:?}"),
            );
        }
    }
    if o.conversion != n.conversion {
        push(
            None,
            ".spec.conversion",
            ChangeKind::ConversionChanged,
            Verdict::Unknown,
            "conversion changed: what the new conversion does cannot be read from the CRD".into(),
        );
    }
    match (
        o.preserve_unknown_fields.unwrap_or(false),
        n.preserve_unknown_fields.unwrap_or(false),
    ) {
        (true, false) => push(
            None,
            ".spec.preserveUnknownFields",
            ChangeKind::PreserveUnknownFieldsRemoved,
            Verdict::Narrowing,
            "preserveUnknownFields turned off: unknown fields are pruned".into(),
        ),
        (false, true) => push(
            None,
            ".spec.preserveUnknownFields",
            ChangeKind::PreserveUnknownFieldsAdded,
            Verdict::Safe,
            "preserveUnknownFields turned on".into(),
        ),
        _ => {}
    }

    let stored: BTreeSet<&str> = old
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.as_ref())
        .map(|v| v.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let find = |list: &'_ [CustomResourceDefinitionVersion], name: &str| {
        list.iter().position(|v| v.name == name)
    };
    for ov in &o.versions {
        let path = format!(".spec.versions[{}]", ov.name);
        let Some(i) = find(&n.versions, &ov.name) else {
            let (kind, verdict, why) = if stored.contains(ov.name.as_str()) || ov.storage {
                (
                    ChangeKind::StoredVersionRemoved,
                    Verdict::Breaking,
                    "it is a stored version: objects stored in it can no longer be read",
                )
            } else if ov.served {
                (
                    ChangeKind::VersionRemoved,
                    Verdict::Breaking,
                    "it was served: its clients break",
                )
            } else {
                (
                    ChangeKind::VersionRemoved,
                    Verdict::Safe,
                    "it was neither served nor stored",
                )
            };
            push(
                Some(&ov.name),
                &path,
                kind,
                verdict,
                format!("version {} removed: {why}", ov.name),
            );
            continue;
        };
        let nv = &n.versions[i];
        match (ov.served, nv.served) {
            (true, false) => push(
                Some(&ov.name),
                &format!("{path}.served"),
                ChangeKind::VersionUnserved,
                Verdict::Breaking,
                format!("version {} no longer served: its clients break", ov.name),
            ),
            (false, true) => push(
                Some(&ov.name),
                &format!("{path}.served"),
                ChangeKind::VersionServed,
                Verdict::Safe,
                format!("version {} now served", ov.name),
            ),
            _ => {}
        }
        if !ov.storage && nv.storage {
            push(
                Some(&ov.name),
                &format!("{path}.storage"),
                ChangeKind::StorageVersionChanged,
                Verdict::Safe,
                format!("storage version is now {}", ov.name),
            );
        }
        subresources(ov, nv, &path, &mut push);
        schemas(ov, nv, &path, limits, &mut changes_sink(&mut push))?;
    }
    for nv in &n.versions {
        if find(&o.versions, &nv.name).is_none() {
            push(
                Some(&nv.name),
                &format!(".spec.versions[{}]", nv.name),
                ChangeKind::VersionAdded,
                Verdict::Safe,
                format!("version {} added", nv.name),
            );
        }
    }
    Ok(Comparison { changes })
}

type Push<'a> = dyn FnMut(Option<&str>, &str, ChangeKind, Verdict, String) + 'a;

/// Adapts `push` to take whole changes.
fn changes_sink<'a, 'b>(push: &'a mut Push<'b>) -> impl FnMut(Change) + 'a {
    move |c: Change| push(c.version.as_deref(), &c.path, c.kind, c.verdict, c.message)
}

fn subresources(
    ov: &CustomResourceDefinitionVersion,
    nv: &CustomResourceDefinitionVersion,
    path: &str,
    push: &mut Push<'_>,
) {
    let (os, ns) = (
        ov.subresources.clone().unwrap_or_default(),
        nv.subresources.clone().unwrap_or_default(),
    );
    let version = Some(ov.name.as_str());
    match (os.status.is_some(), ns.status.is_some()) {
        (false, true) => push(
            version,
            &format!("{path}.subresources.status"),
            ChangeKind::SubresourceAdded,
            Verdict::Breaking,
            "status subresource added: .status is no longer written through the main resource"
                .into(),
        ),
        (true, false) => push(
            version,
            &format!("{path}.subresources.status"),
            ChangeKind::SubresourceRemoved,
            Verdict::Breaking,
            "status subresource removed: clients of /status break".into(),
        ),
        _ => {}
    }
    let scale_path = format!("{path}.subresources.scale");
    match (&os.scale, &ns.scale) {
        (None, Some(_)) => push(
            version,
            &scale_path,
            ChangeKind::SubresourceAdded,
            Verdict::Safe,
            "scale subresource added".into(),
        ),
        (Some(_), None) => push(
            version,
            &scale_path,
            ChangeKind::SubresourceRemoved,
            Verdict::Breaking,
            "scale subresource removed: autoscalers and kubectl scale break".into(),
        ),
        (Some(a), Some(b)) if a != b => push(
            version,
            &scale_path,
            ChangeKind::SubresourceChanged,
            Verdict::Breaking,
            "scale subresource paths changed".into(),
        ),
        _ => {}
    }
}

/// The `openAPIV3Schema` of a version, as a JSON value.
fn schema_value(v: &CustomResourceDefinitionVersion) -> Option<Value> {
    v.schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
}

fn schemas(
    ov: &CustomResourceDefinitionVersion,
    nv: &CustomResourceDefinitionVersion,
    path: &str,
    limits: &Limits,
    sink: &mut impl FnMut(Change),
) -> Result<(), SchemaError> {
    let in_version = |e: SchemaError| SchemaError::InVersion {
        version: ov.name.clone(),
        source: Box::new(e),
    };
    let path = format!("{path}.schema.openAPIV3Schema");
    let version = Some(ov.name.clone());
    match (schema_value(ov), schema_value(nv)) {
        (Some(a), Some(b)) => {
            let a = Schema::from_value_with(&a, limits).map_err(in_version)?;
            let b = Schema::from_value_with(&b, limits).map_err(in_version)?;
            let mut c = Comparer::default();
            c.node(&Path::root(), &a, &b);
            for mut change in c.changes {
                change.version = version.clone();
                sink(change);
            }
        }
        (None, Some(_)) => sink(Change {
            version,
            path,
            kind: ChangeKind::SchemaAdded,
            verdict: Verdict::Narrowing,
            message: "schema added where any object was accepted".into(),
        }),
        (Some(_), None) => sink(Change {
            version,
            path,
            kind: ChangeKind::SchemaRemoved,
            verdict: Verdict::Safe,
            message: "schema removed: any object is accepted".into(),
        }),
        (None, None) => {}
    }
    Ok(())
}
