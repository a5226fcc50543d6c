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
//! - A version served in the new CRD that the old one did not serve (added, or newly served) is
//!   compared with every version served in both, by [`compare`](crate::compare) of their
//!   schemas in the new CRD: does the new version accept everything the existing one accepts?
//!   Without a conversion webhook (strategy `None` or no `spec.conversion`) the API server
//!   converts between versions by rewriting `apiVersion` only, so both are views of the same
//!   stored objects: a field the new version lacks is pruned by a write through it and lost to
//!   the existing version's clients (crdify's served-version validation). Every difference that
//!   is not safe is a `ServedVersionNarrower` change, breaking (unknown where the schema
//!   comparison itself cannot decide), in the new version, at `.spec.versions[v1->v2]` followed
//!   by the field's path (`v1` the existing version, `v2` the new one). With a conversion
//!   webhook the webhook may map the field elsewhere: unknown. Versions served in both are not
//!   compared with each other again. Each newly served version is compared with at most
//!   [`Limits::max_nodes`] schema nodes of existing versions; pairs beyond that are unknown.
//! - `spec.preserveUnknownFields` true→false narrows (unknown fields start being pruned).
//!
//! Printer columns, short names, categories, selectable fields and deprecation flags do not
//! change what is accepted and are not compared.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionSpec, CustomResourceDefinitionVersion,
};
use serde_json::Value;

use crate::change::{Change, ChangeKind, Comparison, Verdict};
use crate::compare::Comparer;
use crate::path::Path;
use crate::schema::{AdditionalProperties, Schema};
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
    newly_served(o, n, limits, &mut changes_sink(&mut push))?;
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

/// A parsed version schema and its number of nodes.
type Parsed = Option<(Schema, usize)>;

/// The schema of a version, parsed within `limits`, with its size; `None` when it has none.
fn parse_version(
    v: &CustomResourceDefinitionVersion,
    limits: &Limits,
) -> Result<Parsed, SchemaError> {
    let Some(value) = schema_value(v) else {
        return Ok(None);
    };
    let schema = Schema::from_value_with(&value, limits).map_err(|e| SchemaError::InVersion {
        version: v.name.clone(),
        source: Box::new(e),
    })?;
    let size = nodes(&schema);
    Ok(Some((schema, size)))
}

/// How many nodes a parsed schema has (the parser bounded its depth and size).
fn nodes(s: &Schema) -> usize {
    let mut n = 1;
    n += s.properties.values().map(nodes).sum::<usize>();
    if let AdditionalProperties::Schema(v) = &s.additional_properties {
        n += nodes(v);
    }
    n += s.items.as_deref().map_or(0, nodes);
    n += s.not.as_deref().map_or(0, nodes);
    n += s
        .all_of
        .iter()
        .chain(&s.any_of)
        .chain(&s.one_of)
        .map(nodes)
        .sum::<usize>();
    n
}

/// Compares every version served in `n` but not in `o` with every version served in both (see
/// the module docs). Only differences that are not safe are reported.
fn newly_served(
    o: &CustomResourceDefinitionSpec,
    n: &CustomResourceDefinitionSpec,
    limits: &Limits,
    sink: &mut impl FnMut(Change),
) -> Result<(), SchemaError> {
    let served_before = |name: &str| o.versions.iter().any(|v| v.name == name && v.served);
    let (added, existing): (Vec<_>, Vec<_>) = n
        .versions
        .iter()
        .filter(|v| v.served)
        .partition(|v| !served_before(&v.name));
    if added.is_empty() || existing.is_empty() {
        return Ok(());
    }
    // The strategy that converts between the versions once the new CRD is applied.
    let strategy = n
        .conversion
        .as_ref()
        .map(|c| c.strategy.as_str())
        .filter(|s| *s != "None");
    let existing = existing
        .into_iter()
        .map(|v| parse_version(v, limits).map(|s| (v, s)))
        .collect::<Result<Vec<_>, _>>()?;
    for nv in added {
        let added_schema = parse_version(nv, limits)?;
        let mut budget = limits.max_nodes;
        for (ev, existing_schema) in &existing {
            let base = format!(".spec.versions[{}->{}]", ev.name, nv.name);
            let (e, a) = (&ev.name, &nv.name);
            let differences = match (existing_schema, &added_schema) {
                (Some((old, size)), Some((new, _))) => {
                    if *size > budget {
                        sink(Change {
                            version: Some(nv.name.clone()),
                            path: base,
                            kind: ChangeKind::ServedVersionNarrower,
                            verdict: Verdict::Unknown,
                            message: format!(
                                "served version {a} not compared with served version {e}: together with the versions compared before, more than {} schema nodes",
                                limits.max_nodes
                            ),
                        });
                        continue;
                    }
                    budget -= size;
                    let mut c = Comparer::default();
                    c.node(&Path::root(), old, new);
                    c.changes
                }
                (None, Some(_)) => vec![Change {
                    version: None,
                    path: ".".into(),
                    kind: ChangeKind::SchemaAdded,
                    verdict: Verdict::Narrowing,
                    message: format!("{a} has a schema, {e} accepts any object"),
                }],
                (_, None) => Vec::new(),
            };
            for d in differences
                .into_iter()
                .filter(|d| d.verdict != Verdict::Safe)
            {
                let what = format!("{}: {}", d.kind, d.message);
                let (verdict, message) = match (strategy, d.verdict) {
                    (Some(strategy), _) => (
                        Verdict::Unknown,
                        format!(
                            "served version {a} does not accept everything served version {e} accepts ({what}); with conversion strategy {strategy} the conversion webhook decides whether data is lost (it may map the field elsewhere)"
                        ),
                    ),
                    (None, Verdict::Unknown) => (
                        Verdict::Unknown,
                        format!(
                            "cannot tell whether served version {a} accepts everything served version {e} accepts ({what}); without a conversion webhook both are views of the same stored objects"
                        ),
                    ),
                    (None, _) => (
                        Verdict::Breaking,
                        format!(
                            "served version {a} does not accept everything served version {e} accepts ({what}); without a conversion webhook both are views of the same stored objects (only apiVersion is rewritten): a write through {a} drops or rejects what {e} clients stored"
                        ),
                    ),
                };
                let path = if d.path == "." {
                    base.clone()
                } else {
                    format!("{base}{}", d.path)
                };
                sink(Change {
                    version: Some(nv.name.clone()),
                    path,
                    kind: ChangeKind::ServedVersionNarrower,
                    verdict,
                    message,
                });
            }
        }
    }
    Ok(())
}
