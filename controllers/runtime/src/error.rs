//! Error categories: every controller error maps to a short, static category that is both the
//! `category` label of `*_reconcile_errors_total` and the reason of the Warning Event a user sees.

/// An error that knows its category.
pub trait ErrorCategory: std::error::Error {
    /// A short CamelCase word, e.g. `Unreachable`, `InvalidKubeconfig`. Low cardinality: never
    /// includes names or messages.
    fn category(&self) -> &'static str;

    /// Whether retrying with backoff can help. `false` for errors only a change of the object
    /// can fix (invalid input): those wait for the next change instead of retrying hot.
    fn is_transient(&self) -> bool {
        true
    }

    /// A wait this error asks for itself, before any backoff: e.g. a namespace still being made
    /// is tried again in moments. `None`: as [`crate::reconcile::Retry`] decides.
    fn retry_after(&self) -> Option<std::time::Duration> {
        None
    }
}

/// The category of a Kubernetes client error.
pub fn kube_error_category(error: &kube::Error) -> &'static str {
    match error {
        kube::Error::Api(status) => match status.code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            500..=599 => "ServerError",
            _ => "ApiError",
        },
        kube::Error::HyperError(_) | kube::Error::Service(_) => "Unreachable",
        kube::Error::Auth(_) => "Unauthorized",
        kube::Error::SerdeError(_) => "InvalidResponse",
        kube::Error::RustlsTls(_) | kube::Error::TlsRequired => "TLSError",
        _ => "ClientError",
    }
}

/// Whether retrying a request that failed with `error` can help.
pub fn kube_error_is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 409 | 429 | 500..=599),
        _ => true,
    }
}

impl ErrorCategory for kube::Error {
    fn category(&self) -> &'static str {
        kube_error_category(self)
    }

    fn is_transient(&self) -> bool {
        kube_error_is_transient(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("x", "y").with_code(code)))
    }

    #[test]
    fn api_errors_map_to_categories() {
        assert_eq!(api_error(401).category(), "Unauthorized");
        assert_eq!(api_error(403).category(), "Forbidden");
        assert_eq!(api_error(503).category(), "ServerError");
        assert!(api_error(503).is_transient());
        assert!(!api_error(422).is_transient());
        assert!(!api_error(403).is_transient());
    }
}
