//! A copy's manifest as a pass holds it until it goes into a Work.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_api::{Work, conditions, reasons};
use k8s_openapi::ByteString;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::digest::digest;
use crate::render::{is_secret, refer_to_data, take_secret_data};

/// A copy going into a Work: its manifest, as JSON (decoded again only for a Work to write: a
/// pass of many objects holds each in a few hundred bytes, not decoded), its digest and size;
/// and a Secret's data, which its manifest does not have (see [`flotilla_api::work_data`]).
#[derive(Clone)]
pub(super) struct Entry {
    /// Shared by the copies of an object that are alike (a pass renders each once).
    json: Arc<str>,
    digest: String,
    pub secret: Option<SecretData>,
}

/// A Secret's data, held apart from its manifest.
#[derive(Clone)]
pub(super) struct SecretData {
    /// The Secret's name: its key in the hub Secret of its Work.
    pub name: String,
    pub data: BTreeMap<String, ByteString>,
}

impl Entry {
    pub fn new(mut manifest: Value) -> Result<Self, serde_json::Error> {
        let secret = match (manifest["apiVersion"].as_str(), manifest["kind"].as_str()) {
            (Some(v), Some(k)) if is_secret(v, k) => Some(SecretData {
                name: manifest["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                data: take_secret_data(&mut manifest)?,
            }),
            _ => None,
        };
        // As a `DynamicObject` serializes it: the digest is then the one the cache computes of
        // the manifest in the hub's Work.
        let manifest: DynamicObject = serde_json::from_value(manifest)?;
        let json = serde_json::to_string(&manifest)?;
        Ok(Self {
            digest: digest(json.as_bytes()),
            json: Arc::from(json),
            secret,
        })
    }

    /// Its size in a Work and, for a Secret, in the Work's hub Secret: a Work's Secrets share
    /// one hub Secret, whose data stays within [`BUNDLE_BYTES`] as the Work does.
    pub fn bytes(&self) -> usize {
        let data = self.secret.as_ref().map_or(0, |s| {
            s.data.iter().map(|(k, v)| 8 + k.len() + v.0.len()).sum()
        });
        self.json.len() + data
    }

    /// Its manifest as Work `work` holds it: a Secret's names the Work's hub Secret.
    pub fn json_in(&self, work: &str) -> Result<Cow<'_, str>, serde_json::Error> {
        if self.secret.is_none() {
            return Ok(Cow::Borrowed(&self.json));
        }
        let mut manifest: DynamicObject = serde_json::from_str(&self.json)?;
        refer_to_data(&mut manifest, work);
        Ok(Cow::Owned(serde_json::to_string(&manifest)?))
    }

    /// The digest of its manifest as Work `work` holds it.
    pub fn digest_in(&self, work: &str) -> Cow<'_, str> {
        match &self.secret {
            None => Cow::Borrowed(&self.digest),
            Some(_) => Cow::Owned(
                self.json_in(work)
                    .map(|json| digest(json.as_bytes()))
                    .unwrap_or_default(),
            ),
        }
    }
}

/// Whether the syncer reports, for Work `w`'s current spec, that the hub Secret with the data of
/// its Secrets is missing: it is written again.
pub(super) fn data_missing(w: &Work) -> bool {
    w.status.iter().flat_map(|s| &s.conditions).any(|c| {
        c.type_ == conditions::APPLIED
            && c.reason == reasons::SECRET_DATA_MISSING
            && c.observed_generation == w.metadata.generation
    })
}
