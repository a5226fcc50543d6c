//! How a pass tells a Work as wanted from the one the hub has without a second copy of every
//! placed object in memory: digests of Work specs and manifests, and the lean form of a Work
//! the splitter's cache keeps.

use std::borrow::Cow;
use std::collections::BTreeMap;

use flotilla_api::{Work, WorkSpec, annotations};
use flotilla_interpreter::builtin;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::render::Share;

/// Set only in the splitter's own cache, never written: the digest of a cached Work's spec
/// (see [`lean`]).
pub const CACHED_SPEC_DIGEST: &str = "flotilla.dev/cached-spec-digest";

/// Set only in the splitter's own cache: the digests of the Work's manifests, in their order,
/// each [`DIGEST_LEN`] hex digits, one after the other (one string per Work, not a map per
/// manifest: the cache holds one entry per placed copy).
pub const CACHED_MANIFEST_DIGESTS: &str = "flotilla.dev/cached-manifest-digests";

/// Set only in the splitter's own cache: what a pass reads of the Work's manifests (see
/// [`lean`] and [`manifests`]), as one compact JSON array of `[apiVersion, kind, namespace,
/// name, data]`: one string per Work, where a `DynamicObject` per manifest took about 500 bytes
/// each (its `ObjectMeta` alone, empty, is 360).
pub const CACHED_MANIFESTS: &str = "flotilla.dev/cached-manifests";

/// The length of a digest in hex digits.
pub const DIGEST_LEN: usize = 16;

/// A digest of a Work's spec: equal specs have equal digests (FNV-1a of its JSON with each
/// manifest as [`DynamicObject`] serializes it, whose maps serde_json keeps sorted).
pub fn spec_digest(spec: &WorkSpec) -> String {
    let json: Vec<String> = spec
        .manifests
        .iter()
        .map(|m| serde_json::to_string(m).unwrap_or_default())
        .collect();
    spec_digest_with(spec, json.iter().map(String::as_str))
        .unwrap_or_else(|_| digest(&serde_json::to_vec(spec).unwrap_or_default()))
}

pub fn digest(json: &[u8]) -> String {
    format!("{:016x}", flotilla_api::names::fnv1a(json.iter().copied()))
}

/// [`spec_digest`] of `spec` with `manifests` (each as [`DynamicObject`] serializes it) as its
/// manifests, from their JSON: a pass compares a Work with the hub's without decoding its
/// manifests.
pub fn spec_digest_with<'a>(
    spec: &WorkSpec,
    manifests: impl Iterator<Item = &'a str>,
) -> Result<String, serde_json::Error> {
    // Every field but the manifests (not cloned).
    let empty = WorkSpec {
        manifests: Vec::new(),
        delete_policy: spec.delete_policy,
        conflict_policy: spec.conflict_policy,
        ignore_fields: spec.ignore_fields.clone(),
        namespace_labels: spec.namespace_labels.clone(),
        allow_existing_namespaces: spec.allow_existing_namespaces,
        health: spec.health.clone(),
    };
    let json = serde_json::to_string(&empty)?;
    // `manifests` is the spec's first field: `{"manifests":[],...}`.
    const OPEN: &str = "{\"manifests\":[";
    let rest = json
        .strip_prefix(OPEN)
        .and_then(|r| r.strip_prefix(']'))
        .ok_or_else(|| std::io::Error::other("a Work's spec does not start with its manifests"))
        .map_err(serde_json::Error::io)?;
    let mut bytes: Vec<&[u8]> = vec![OPEN.as_bytes()];
    for (i, m) in manifests.enumerate() {
        if i > 0 {
            bytes.push(b",");
        }
        bytes.push(m.as_bytes());
    }
    bytes.push(b"]");
    bytes.push(rest.as_bytes());
    Ok(format!(
        "{:016x}",
        flotilla_api::names::fnv1a(bytes.into_iter().flatten().copied())
    ))
}

/// A digest of one manifest (of its JSON, as [`DynamicObject`] serializes it).
pub fn manifest_digest(m: &DynamicObject) -> String {
    digest(&serde_json::to_vec(m).unwrap_or_default())
}

/// What the splitter's cache keeps of a Work: all but its manifests, of which it keeps what a
/// pass reads (apiVersion, kind, name, namespace, `spec.replicas`; read with [`manifests`]) and a
/// digest of each, and the digest of the whole spec, so that a pass tells a Work that is as
/// wanted without a second copy of every placed object in memory.
pub fn lean(work: &mut Work) {
    if is_lean(work) {
        return;
    }
    // Each manifest serialized once, for its own digest and the whole spec's.
    let json: Vec<String> = work
        .spec
        .manifests
        .iter()
        .map(|m| serde_json::to_string(m).unwrap_or_default())
        .collect();
    let whole = spec_digest_with(&work.spec, json.iter().map(String::as_str))
        .unwrap_or_else(|_| digest(&serde_json::to_vec(&work.spec).unwrap_or_default()));
    let mut digests = String::with_capacity(json.len() * DIGEST_LEN);
    let mut kept: Vec<Lean<'_>> = Vec::with_capacity(json.len());
    for (m, json) in work.spec.manifests.iter().zip(&json) {
        digests.push_str(&digest(json.as_bytes()));
        // A built-in kind keeps its share; another kind (its profile is not known here) every
        // integer of its spec, where its profile's replica path may be.
        let kind = m
            .types
            .as_ref()
            .and_then(|t| builtin(&t.api_version, &t.kind));
        let data = match kind {
            Some(kind) => {
                let mut data = serde_json::json!({});
                Share::of(kind, m).write(&mut data, kind);
                data
            }
            None => match integers(&m.data["spec"], LEAN_INTEGERS) {
                Value::Object(spec) if spec.is_empty() => serde_json::json!({}),
                spec => serde_json::json!({ "spec": spec }),
            },
        };
        let types = m.types.as_ref();
        kept.push(Lean(
            Cow::Borrowed(types.map_or("", |t| t.api_version.as_str())),
            Cow::Borrowed(types.map_or("", |t| t.kind.as_str())),
            m.metadata.namespace.as_deref().map(Cow::Borrowed),
            m.metadata.name.as_deref().map(Cow::Borrowed),
            data,
        ));
    }
    // (Serializing strings and JSON values does not fail; should it, the Work keeps its
    // manifests whole rather than look empty.)
    let kept = serde_json::to_string(&kept).ok();
    let annotations = work.annotations_mut();
    annotations.insert(CACHED_SPEC_DIGEST.to_string(), whole);
    annotations.insert(CACHED_MANIFEST_DIGESTS.to_string(), digests);
    match kept {
        Some(kept) => {
            annotations.insert(CACHED_MANIFESTS.to_string(), kept);
            work.spec.manifests = Vec::new();
        }
        None => {
            annotations.remove(CACHED_MANIFESTS);
        }
    }
    // Of the member's report, what a pass reads: not the objects' resourceVersions or times.
    if let Some(status) = &mut work.status {
        for m in &mut status.manifests {
            m.resource_version = None;
            m.last_transition_time = None;
            m.identity.resource = None;
        }
        status.manifests.shrink_to_fit();
    }
}

/// A manifest as a lean Work keeps it: apiVersion, kind, namespace, name, and the data a pass
/// reads.
#[derive(serde::Serialize, serde::Deserialize)]
struct Lean<'a>(
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Option<Cow<'a, str>>,
    #[serde(borrow)] Option<Cow<'a, str>>,
    Value,
);

/// The manifests of a Work: as a lean Work from the cache keeps them (their type, namespace,
/// name and the data a pass reads, see [`lean`]), or those of a Work not from the cache.
pub fn manifests(work: &Work) -> Cow<'_, [DynamicObject]> {
    let Some(kept) = work
        .annotations()
        .get(CACHED_MANIFESTS)
        .filter(|_| work.spec.manifests.is_empty())
    else {
        return Cow::Borrowed(&work.spec.manifests);
    };
    // What `lean` wrote, so it reads back.
    let kept: Vec<Lean<'_>> = serde_json::from_str(kept).unwrap_or_else(|e| {
        tracing::error!(work = %work.name_any(), error = %e, "the cached manifests of a Work do not read back");
        Vec::new()
    });
    Cow::Owned(
        kept.into_iter()
            .map(
                |Lean(api_version, kind, namespace, name, data)| DynamicObject {
                    types: (!api_version.is_empty() || !kind.is_empty()).then(|| {
                        kube::api::TypeMeta {
                            api_version: api_version.into_owned(),
                            kind: kind.into_owned(),
                        }
                    }),
                    metadata: kube::api::ObjectMeta {
                        namespace: namespace.map(Cow::into_owned),
                        name: name.map(Cow::into_owned),
                        ..Default::default()
                    },
                    data,
                },
            )
            .collect(),
    )
}

/// `work` (a lean one from the cache) with no manifests at all: what a plan keeps of a Work it
/// does not write.
pub fn without_manifests(work: &mut Work) {
    work.spec.manifests.clear();
    if let Some(a) = work.metadata.annotations.as_mut() {
        a.remove(CACHED_MANIFESTS);
    }
}

/// Whether `work` is the cache's lean form of a Work: no manifests, what a pass reads of them
/// kept aside (a Work the hub serves has at least one manifest).
fn is_lean(work: &Work) -> bool {
    work.spec.manifests.is_empty() && work.annotations().contains_key(CACHED_MANIFESTS)
}

/// How many manifests a Work has, lean or not (without decoding what a lean one keeps).
pub fn manifest_count(work: &Work) -> usize {
    match work.annotations().get(CACHED_MANIFEST_DIGESTS) {
        Some(digests) if is_lean(work) => digests.len() / DIGEST_LEN,
        _ => work.spec.manifests.len(),
    }
}

/// The most integers of a custom kind's spec a lean Work manifest keeps.
const LEAN_INTEGERS: usize = 16;

/// The integer fields of `value` (through objects, not arrays), at most `budget` of them, in
/// the objects they are in: `{"replicas": 3, "workers": {"count": 2}}`.
fn integers(value: &Value, budget: usize) -> Value {
    fn walk(value: &Value, left: &mut usize) -> Option<Value> {
        match value {
            Value::Number(n) if n.is_u64() || n.is_i64() => {
                *left = left.checked_sub(1)?;
                Some(value.clone())
            }
            Value::Object(map) => {
                let kept: serde_json::Map<String, Value> = map
                    .iter()
                    .filter_map(|(k, v)| Some((k.clone(), walk(v, left)?)))
                    .collect();
                (!kept.is_empty()).then_some(Value::Object(kept))
            }
            _ => None,
        }
    }
    let mut left = budget;
    walk(value, &mut left).unwrap_or_else(|| serde_json::json!({}))
}

/// The digest of a hub Work's spec: as its cache entry recorded it, or of the spec itself.
pub fn hub_digest(hub: &Work) -> String {
    hub.annotations()
        .get(CACHED_SPEC_DIGEST)
        .cloned()
        .unwrap_or_else(|| spec_digest(&hub.spec))
}

/// The digest of a hub Work's manifest `i`: as its cache entry recorded it, or of the manifest.
pub fn hub_manifest_digest(hub: &Work, i: usize) -> Option<String> {
    let recorded = hub
        .annotations()
        .get(CACHED_MANIFEST_DIGESTS)
        .and_then(|d| d.get(i * DIGEST_LEN..(i + 1) * DIGEST_LEN));
    match recorded {
        Some(d) => Some(d.to_string()),
        None => manifests(hub).get(i).map(manifest_digest),
    }
}

/// Whether the hub's Work already says what `wanted` says: the same spec (by digest: the cache
/// keeps no manifests; `wanted_digest` is that of `wanted`'s spec), every label and annotation
/// the splitter sets, and no Works replaced that `wanted` no longer names. Anything else another
/// writer set on it is left alone.
pub fn up_to_date(wanted: &Work, wanted_digest: &str, hub: &Work) -> bool {
    let subset = |w: &Option<BTreeMap<String, String>>, h: &Option<BTreeMap<String, String>>| {
        let h = h.as_ref();
        w.iter()
            .flatten()
            .all(|(k, v)| h.and_then(|h| h.get(k)) == Some(v))
    };
    hub.metadata.deletion_timestamp.is_none()
        && subset(&wanted.metadata.labels, &hub.metadata.labels)
        && subset(&wanted.metadata.annotations, &hub.metadata.annotations)
        && (wanted.annotations().contains_key(annotations::REPLACES)
            || !hub.annotations().contains_key(annotations::REPLACES))
        && wanted
            .finalizers()
            .iter()
            .all(|f| hub.finalizers().contains(f))
        && wanted_digest == hub_digest(hub)
}
