//! The HTTP server: `/metrics` (and `/debug/allocator`), `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// What `/readyz` reports. A replica is ready once it knows the state of the leader Lease and,
/// if it is the leader, once its controllers' caches are synced. A standby replica is ready:
/// it is healthy and can take over.
#[derive(Clone, Default)]
pub struct Health(Arc<HealthState>);

#[derive(Default)]
struct HealthState {
    lease_known: AtomicBool,
    leader: AtomicBool,
    caches_synced: AtomicBool,
    /// Why the hub could not be reached on the last attempt, until it answers.
    hub_unreachable: std::sync::Mutex<Option<String>>,
}

impl Health {
    /// Records the outcome of leader election: this replica leads (`true`) or stands by.
    pub fn set_lease_state(&self, leader: bool) {
        self.0.leader.store(leader, Ordering::SeqCst);
        self.0.lease_known.store(true, Ordering::SeqCst);
    }

    /// Controllers call this once their watches have listed everything.
    pub fn set_caches_synced(&self, synced: bool) {
        self.0.caches_synced.store(synced, Ordering::SeqCst);
    }

    /// Records that the hub did not answer (`Some(why)`) or answered (`None`).
    pub fn set_hub_unreachable(&self, why: Option<String>) {
        *self
            .0
            .hub_unreachable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = why;
    }

    pub fn is_leader(&self) -> bool {
        self.0.leader.load(Ordering::SeqCst)
    }

    /// `Ok` when ready, else why not.
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(why) = self
            .0
            .hub_unreachable
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
        {
            return Err(format!("the hub is unreachable: {why}"));
        }
        if !self.0.lease_known.load(Ordering::SeqCst) {
            return Err("leader election has not completed its first round".into());
        }
        if self.is_leader() && !self.0.caches_synced.load(Ordering::SeqCst) {
            return Err("leader, but the caches are not synced yet".into());
        }
        Ok(())
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.metrics.encode(),
    )
}

/// The allocator's own statistics (jemalloc's `malloc_stats_print`: per size class, how many
/// regions are in use and how full their slabs are), to find where a controller's memory goes.
async fn allocator() -> impl IntoResponse {
    let mut text = Vec::new();
    let mut options = tikv_jemalloc_ctl::stats_print::Options::default();
    options.skip_per_arena = true;
    match tikv_jemalloc_ctl::stats_print::stats_print(&mut text, options) {
        Ok(()) => (StatusCode::OK, String::from_utf8_lossy(&text).into_owned()),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the allocator's statistics: {e}\n"),
        ),
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    match s.health.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// The routes served on the metrics address and on the health address.
fn routers(metrics_: Metrics, health: Health) -> (Router, Router) {
    let state = AppState {
        metrics: metrics_,
        health,
    };
    let metrics_router = Router::new()
        .route("/metrics", get(metrics))
        .route("/debug/allocator", get(allocator))
        .with_state(state.clone());
    let health_router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state);
    (metrics_router, health_router)
}

/// Binds the listeners (so a taken port fails start-up with a clear error) and serves until
/// `shutdown` is cancelled. Serves everything on one listener when both addresses are equal.
pub async fn serve(
    metrics_address: SocketAddr,
    health_address: SocketAddr,
    metrics: Metrics,
    health: Health,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let (metrics_router, health_router) = routers(metrics, health);
    let mut servers = Vec::new();
    if metrics_address == health_address {
        servers.push((metrics_address, metrics_router.merge(health_router)));
    } else {
        servers.push((metrics_address, metrics_router));
        servers.push((health_address, health_router));
    }
    let mut tasks = Vec::new();
    for (address, router) in servers {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {address}: {e}"))?;
        tracing::info!(%address, "serving HTTP");
        let shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(%address, error = %e, "HTTP server failed");
            }
        }));
    }
    Ok(tokio::spawn(async move {
        futures::future::join_all(tasks).await;
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    async fn get_path(router: Router, path: &str) -> (StatusCode, String) {
        let response = router
            .oneshot(Request::get(path).body(Body::empty()).expect("request"))
            .await
            .expect("response");
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_follows_lease_and_cache_state() {
        let health = Health::default();
        let metrics = Metrics::new("test").expect("metrics");
        let (_, router) = routers(metrics, health.clone());

        let (status, body) = get_path(router.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("leader election"), "{body}");

        health.set_lease_state(true);
        let (status, body) = get_path(router.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("caches"), "{body}");

        health.set_caches_synced(true);
        assert_eq!(get_path(router.clone(), "/readyz").await.0, StatusCode::OK);

        // The hub not answering wins: /readyz says so, and where it tried.
        health.set_hub_unreachable(Some("https://hub:6443: connection refused".into()));
        let (status, body) = get_path(router.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("the hub is unreachable: https://hub:6443"),
            "{body}"
        );
        health.set_hub_unreachable(None);
        assert_eq!(get_path(router.clone(), "/readyz").await.0, StatusCode::OK);

        // A standby replica is ready without caches.
        let standby = Health::default();
        standby.set_lease_state(false);
        assert!(standby.readiness().is_ok());

        assert_eq!(get_path(router, "/healthz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_are_served_as_prometheus_text() {
        let metrics = Metrics::new("test").expect("metrics");
        let (router, _) = routers(metrics, Health::default());
        let (status, body) = get_path(router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("# TYPE flotilla_test_leader gauge"), "{body}");
    }

    #[tokio::test]
    async fn the_allocator_statistics_are_served_per_size_class_on_the_metrics_address() {
        let metrics = Metrics::new("test").expect("metrics");
        let (router, health_router) = routers(metrics, Health::default());
        let (status, body) = get_path(router, "/debug/allocator").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("jemalloc statistics"), "{body}");
        assert!(body.contains("bins:"), "the size classes: {body}");
        // Not on the health address, which may be exposed more widely.
        let (status, _) = get_path(health_router, "/debug/allocator").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }
}
