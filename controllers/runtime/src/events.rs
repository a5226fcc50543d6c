//! Kubernetes Events on the objects users look at.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The longest note the Events API accepts.
const MAX_NOTE_BYTES: usize = 1024;

/// Publishes Events as one controller. Events are best effort: a failure to publish is logged,
/// never returned, so it cannot fail a reconciliation.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    /// `controller` is the reporting controller, e.g. `flotilla.dev/syncer`; `instance` the
    /// replica's identity.
    pub fn new(client: kube::Client, controller: &str, instance: &str) -> Self {
        let reporter = Reporter {
            controller: controller.into(),
            instance: Some(instance.into()),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A Normal event: something happened that a user may want to know.
    pub async fn normal<K>(&self, object: &K, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Normal, reason, action, note.into())
            .await;
    }

    /// A Warning event: something the user can and should act on. `reason` is usually an
    /// [`crate::ErrorCategory::category`].
    pub async fn warning<K>(&self, object: &K, reason: &str, action: &str, note: impl Into<String>)
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(object, EventType::Warning, reason, action, note.into())
            .await;
    }

    /// A Normal event on an object known by reference (e.g. a dynamically typed one).
    pub async fn normal_ref(
        &self,
        reference: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish_ref(reference, EventType::Normal, reason, action, note.into())
            .await;
    }

    /// A Warning event on an object known by reference.
    pub async fn warning_ref(
        &self,
        reference: &ObjectReference,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) {
        self.publish_ref(reference, EventType::Warning, reason, action, note.into())
            .await;
    }

    async fn publish<K>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: Resource<DynamicType = ()>,
    {
        self.publish_ref(&object.object_ref(&()), type_, reason, action, note)
            .await;
    }

    async fn publish_ref(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(note, MAX_NOTE_BYTES)),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            tracing::warn!(
                object = reference.name.as_deref().unwrap_or_default(),
                reason,
                error = %e,
                "could not publish an Event"
            );
        }
    }
}

/// Cuts `s` to at most `max` bytes on a character boundary, marking the cut.
pub fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    const MARK: &str = "…";
    let mut cut = max.saturating_sub(MARK.len());
    while cut > 0 && !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(MARK);
    s
}

#[cfg(test)]
mod tests {
    use super::truncate;

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("short".into(), 10), "short");
        let long = "é".repeat(600); // 1200 bytes
        let cut = truncate(long, 1024);
        assert!(cut.len() <= 1024, "{}", cut.len());
        assert!(cut.ends_with('…'));
    }
}
