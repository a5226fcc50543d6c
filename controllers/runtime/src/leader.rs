//! Leader election on a `coordination.k8s.io/v1` Lease, with the semantics of client-go's
//! elector: a standby replica takes the Lease once it has seen no renewal for the Lease's
//! duration (measured on its own monotonic clock, so clock skew between machines does not
//! matter); a leader that could not renew within the renew deadline steps down, so two replicas
//! never act as leaders at the same time; a leader that shuts down releases the Lease so a
//! standby takes over at once. Updates use the Lease's resourceVersion: of two replicas racing
//! for a free Lease, exactly one wins.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// Where the Lease lives and how it is held.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a Lease stays valid without renewal.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long steps down.
    pub renew_deadline: Duration,
    /// Interval between renewals and between attempts to acquire.
    pub retry_period: Duration,
}

/// Why a leader stopped being one.
#[derive(Debug, thiserror::Error)]
pub enum LeadershipLost {
    #[error("the Lease {0} is now held by {1}")]
    TakenBy(String, String),
    #[error("could not renew the Lease {lease} for {deadline:?} (last error: {last_error})")]
    RenewDeadline {
        lease: String,
        deadline: Duration,
        last_error: String,
    },
}

/// May `me` take a Lease whose spec is `spec`, last seen changing at `seen_changed_at`?
/// Free Leases and our own may be taken; another holder's only once it has not been renewed for
/// the Lease's duration (as written in it, else `default_duration`).
pub fn may_acquire(
    spec: &LeaseSpec,
    me: &str,
    seen_changed_at: Instant,
    now: Instant,
    default_duration: Duration,
) -> bool {
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == me => true,
        Some(_) => {
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(default_duration);
            now.saturating_duration_since(seen_changed_at) >= duration
        }
    }
}

/// The spec `me` writes to hold the Lease at `now`, given the current one.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    me: &str,
    now: Timestamp,
    duration: Duration,
) -> LeaseSpec {
    let seconds = i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX);
    match current {
        Some(c) if c.holder_identity.as_deref() == Some(me) => LeaseSpec {
            renew_time: Some(MicroTime(now)),
            lease_duration_seconds: Some(seconds),
            ..c.clone()
        },
        _ => LeaseSpec {
            holder_identity: Some(me.to_string()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(
                current
                    .and_then(|c| c.lease_transitions)
                    .unwrap_or(0)
                    .saturating_add(if current.is_some() { 1 } else { 0 }),
            ),
            ..LeaseSpec::default()
        },
    }
}

/// The spec that releases a Lease we hold: no holder, so a standby takes it at once.
fn released_spec(current: &LeaseSpec, now: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    }
}

/// Acquires, holds and releases one Lease.
#[derive(Clone)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The Lease spec last seen and when it was first seen in that state.
    observed: Option<(LeaseSpec, Instant)>,
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        }
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// The current holder as last observed.
    pub fn observed_holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .and_then(|(s, _)| s.holder_identity.as_deref())
            .filter(|h| !h.is_empty())
    }

    fn observe(&mut self, spec: &LeaseSpec, at: Instant) {
        if self.observed.as_ref().map(|(s, _)| s) != Some(spec) {
            self.observed = Some((spec.clone(), at));
        }
    }

    /// One round: creates the Lease, renews it or takes it over when allowed.
    /// `Ok(true)` when this replica holds the Lease afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let me = self.config.identity.clone();
        let now = Instant::now();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(next_spec(
                    None,
                    &me,
                    Timestamp::now(),
                    self.config.lease_duration,
                )),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created.spec.unwrap_or_default(), now);
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(&spec, now);
        let seen_at = self.observed.as_ref().map_or(now, |(_, t)| *t);
        if !may_acquire(&spec, &me, seen_at, now, self.config.lease_duration) {
            return Ok(false);
        }
        lease.spec = Some(next_spec(
            Some(&spec),
            &me,
            Timestamp::now(),
            self.config.lease_duration,
        ));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observe(&updated.spec.unwrap_or_default(), now);
                Ok(true)
            }
            // Someone else changed the Lease first: they won this round.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Tries until this replica holds the Lease (`true`) or `shutdown` is cancelled (`false`).
    /// `on_round` is called after every round with whether the Lease is ours.
    pub async fn acquire(
        &mut self,
        shutdown: &CancellationToken,
        mut on_round: impl FnMut(bool, Option<&str>),
    ) -> bool {
        let mut reported_holder: Option<String> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    on_round(true, Some(&self.config.identity));
                    return true;
                }
                Ok(false) => {
                    let holder = self.observed_holder().map(str::to_string);
                    if holder != reported_holder {
                        tracing::info!(
                            lease = %self.lease_ref(),
                            holder = holder.as_deref().unwrap_or("<none>"),
                            "standing by: another replica holds the Lease"
                        );
                        reported_holder = holder;
                    }
                    on_round(false, reported_holder.as_deref());
                }
                Err(e) => {
                    tracing::warn!(lease = %self.lease_ref(), error = %e, "could not read or take the Lease; retrying");
                }
            }
            let wait = jittered(self.config.retry_period);
            tokio::select! {
                _ = shutdown.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Renews the Lease every retry period until `shutdown` is cancelled (returns `Ok`, still
    /// holding it: the caller stops its controllers first, then [`Self::release`]s it, so no
    /// standby leads while they still run) or leadership is lost (returns why). A shutdown
    /// during a renewal that hangs is a shutdown, not a lost Lease.
    pub async fn hold(&mut self, shutdown: &CancellationToken) -> Result<(), LeadershipLost> {
        let mut last_renewal = Instant::now();
        let mut last_error = String::from("none");
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            let deadline = last_renewal + self.config.renew_deadline;
            let attempt = tokio::time::timeout_at(deadline.into(), self.try_acquire_or_renew());
            let attempt = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                attempt = attempt => attempt,
            };
            match attempt {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                Ok(Ok(false)) => {
                    return Err(LeadershipLost::TakenBy(
                        self.lease_ref(),
                        self.observed_holder().unwrap_or("<none>").to_string(),
                    ));
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.lease_ref(), error = %e, "could not renew the Lease");
                    last_error = e.to_string();
                }
                Err(_) => last_error = "the renewal did not complete in time".into(),
            }
            if last_renewal.elapsed() >= self.config.renew_deadline {
                return Err(LeadershipLost::RenewDeadline {
                    lease: self.lease_ref(),
                    deadline: self.config.renew_deadline,
                    last_error,
                });
            }
        }
    }

    /// [`Self::hold`] on a thread of its own, with a hub client of its own built from
    /// `config`: the renewals never wait behind a runtime that CPU-bound passes keep busy (a
    /// plan of thousands of objects, a large schema negotiated), so a busy replica keeps its
    /// Lease as long as the hub answers. Returns the elector, talking through `client` again, and
    /// why it stopped holding. Falls back to holding here when no thread can be started.
    pub async fn hold_apart(
        self,
        client: Client,
        config: kube::Config,
        shutdown: CancellationToken,
    ) -> (Self, Result<(), LeadershipLost>) {
        let namespace = self.config.namespace.clone();
        let mut here = self.clone();
        here.api = Api::namespaced(client, &namespace);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = shutdown.clone();
        let mut apart = self;
        let started = std::thread::Builder::new()
            .name("lease".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the Lease's runtime");
                        return;
                    }
                };
                let outcome = runtime.block_on(async {
                    match crate::pool::client(&config, None, crate::pool::Retries::Patient) {
                        Ok(own) => apart.api = Api::namespaced(own, &namespace),
                        Err(e) => tracing::warn!(error = %e, "no hub client of its own for the Lease: renewing through the controllers' client"),
                    }
                    let held = apart.hold(&stop).await;
                    (apart.observed, held)
                });
                let _ = tx.send(outcome);
            });
        if let Err(e) = started {
            tracing::warn!(error = %e, "cannot start the Lease's thread: renewing on the controllers' runtime");
            let held = here.hold(&shutdown).await;
            return (here, held);
        }
        match rx.await {
            Ok((observed, held)) => {
                here.observed = observed;
                (here, held)
            }
            // No runtime of its own, or it ended without a word: what the Lease holds now is
            // unknown, so the controllers stop as if it was lost.
            Err(_) => {
                let lost = LeadershipLost::RenewDeadline {
                    lease: here.lease_ref(),
                    deadline: here.config.renew_deadline,
                    last_error: "the Lease's thread ended".into(),
                };
                (here, Err(lost))
            }
        }
    }

    /// Gives the Lease up if this replica holds it, so a standby takes over without waiting for
    /// it to expire. Best effort: failures are logged.
    pub async fn release(&mut self) {
        let released = async {
            let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
                return Ok(false);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(released_spec(&spec, Timestamp::now()));
            self.api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await
                .map(|_| true)
        };
        match tokio::time::timeout(Duration::from_secs(5), released).await {
            Ok(Ok(true)) => tracing::info!(lease = %self.lease_ref(), "released the Lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %self.lease_ref(), error = %e, "could not release the Lease")
            }
            Err(_) => {
                tracing::warn!(lease = %self.lease_ref(), "releasing the Lease timed out")
            }
        }
    }
}

/// `d` plus up to 20% random jitter, so that standby replicas do not poll in lock-step.
fn jittered(d: Duration) -> Duration {
    use rand::Rng;
    d.mul_f64(1.0 + rand::rng().random_range(0.0..0.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            lease_transitions: Some(3),
            acquire_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            renew_time: Some(MicroTime(Timestamp::UNIX_EPOCH)),
            ..LeaseSpec::default()
        }
    }

    /// A hub that never answers.
    fn silent_hub() -> Client {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| {
            std::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
        });
        Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_shutdown_while_a_renewal_hangs_is_a_shutdown_not_a_lost_lease() {
        let mut elector = LeaderElector::new(
            silent_hub(),
            LeaseConfig {
                namespace: "ns".into(),
                name: "lease".into(),
                identity: "me".into(),
                lease_duration: Duration::from_secs(15),
                renew_deadline: Duration::from_millis(600),
                retry_period: Duration::from_millis(100),
            },
        );
        let shutdown = CancellationToken::new();
        let cancel = shutdown.clone();
        tokio::spawn(async move {
            // Inside the first renewal, which hangs.
            tokio::time::sleep(Duration::from_millis(300)).await;
            cancel.cancel();
        });
        let held = elector.hold(&shutdown).await;
        assert!(held.is_ok(), "{held:?}");
        // Without a shutdown, the hanging renewal loses the Lease at the deadline.
        let lost = elector.hold(&CancellationToken::new()).await;
        assert!(
            matches!(lost, Err(LeadershipLost::RenewDeadline { ref last_error, .. }) if last_error.contains("in time")),
            "{lost:?}"
        );
    }

    #[test]
    fn free_and_own_leases_may_be_taken() {
        let t = Instant::now();
        let d = Duration::from_secs(15);
        assert!(may_acquire(&LeaseSpec::default(), "a", t, t, d));
        assert!(may_acquire(
            &LeaseSpec {
                holder_identity: Some(String::new()),
                ..LeaseSpec::default()
            },
            "a",
            t,
            t,
            d
        ));
        assert!(may_acquire(&held_by("a", 15), "a", t, t, d));
    }

    #[test]
    fn another_holders_lease_only_after_its_duration_without_change() {
        let seen = Instant::now();
        let d = Duration::from_secs(15);
        let spec = held_by("b", 10);
        assert!(!may_acquire(&spec, "a", seen, seen, d));
        assert!(!may_acquire(
            &spec,
            "a",
            seen,
            seen + Duration::from_secs(9),
            d
        ));
        // The duration written in the Lease wins over the local default.
        assert!(may_acquire(
            &spec,
            "a",
            seen,
            seen + Duration::from_secs(10),
            d
        ));
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let now = Timestamp::from_second(1_000).expect("timestamp");
        let next = next_spec(Some(&held_by("a", 15)), "a", now, Duration::from_secs(15));
        assert_eq!(next.holder_identity.as_deref(), Some("a"));
        assert_eq!(next.lease_transitions, Some(3));
        assert_eq!(next.acquire_time, Some(MicroTime(Timestamp::UNIX_EPOCH)));
        assert_eq!(next.renew_time, Some(MicroTime(now)));
    }

    #[test]
    fn taking_over_counts_a_transition() {
        let now = Timestamp::from_second(1_000).expect("timestamp");
        let next = next_spec(Some(&held_by("b", 15)), "a", now, Duration::from_secs(20));
        assert_eq!(next.holder_identity.as_deref(), Some("a"));
        assert_eq!(next.lease_transitions, Some(4));
        assert_eq!(next.acquire_time, Some(MicroTime(now)));
        assert_eq!(next.lease_duration_seconds, Some(20));
        let first = next_spec(None, "a", now, Duration::from_secs(15));
        assert_eq!(first.lease_transitions, Some(0));
    }

    #[test]
    fn releasing_clears_the_holder() {
        let now = Timestamp::from_second(1_000).expect("timestamp");
        let released = released_spec(&held_by("a", 15), now);
        assert_eq!(released.holder_identity, None);
        assert!(may_acquire(
            &released,
            "b",
            Instant::now(),
            Instant::now(),
            Duration::from_secs(15)
        ));
    }

    /// A hub that keeps one Lease in memory and counts its renewals: enough of the Lease API for
    /// an elector, served on a thread of its own.
    fn lease_hub() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use axum::body::Bytes;
        use axum::extract::State;
        use axum::http::{StatusCode, header};
        use axum::routing::{get, post};
        use serde_json::Value;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};

        type Hub = (Arc<Mutex<Option<Value>>>, Arc<AtomicUsize>);
        type Answer = (StatusCode, [(header::HeaderName, &'static str); 1], String);
        let answer = |code, body: &Value| -> Answer {
            (
                code,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
        };
        let store = move |code, body: Bytes, hub: &Hub| -> Answer {
            let mut lease: Value = serde_json::from_slice(&body).expect("a Lease");
            let version = hub.1.fetch_add(1, Ordering::SeqCst) + 1;
            lease["apiVersion"] = "coordination.k8s.io/v1".into();
            lease["kind"] = "Lease".into();
            lease["metadata"]["resourceVersion"] = version.to_string().into();
            *hub.0.lock().expect("not poisoned") = Some(lease.clone());
            answer(code, &lease)
        };
        let hub: Hub = Default::default();
        let renewals = hub.1.clone();
        let path = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
        let app = axum::Router::new()
            .route(
                &format!("{path}/lease"),
                get(move |State(hub): State<Hub>| async move {
                    match hub.0.lock().expect("not poisoned").clone() {
                        Some(lease) => answer(StatusCode::OK, &lease),
                        None => answer(
                            StatusCode::NOT_FOUND,
                            &serde_json::json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "NotFound", "code": 404}),
                        ),
                    }
                })
                .put(move |State(hub): State<Hub>, body: Bytes| async move {
                    store(StatusCode::OK, body, &hub)
                }),
            )
            .route(
                path,
                post(move |State(hub): State<Hub>, body: Bytes| async move {
                    store(StatusCode::CREATED, body, &hub)
                }),
            )
            .with_state(hub);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("a port");
                tx.send(listener.local_addr().expect("an address"))
                    .expect("the test waits");
                axum::serve(listener, app).await.expect("serving");
            });
        });
        let address = rx.recv().expect("the hub's address");
        (format!("http://{address}"), renewals)
    }

    /// Passes that keep the controllers' runtime busy for longer than the renew deadline (here
    /// its only thread sleeps) do not cost the Lease: it is renewed on a thread of its own.
    #[test]
    fn a_busy_runtime_keeps_its_lease() {
        let (url, writes) = lease_hub();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (held, renewed) = runtime.block_on(async {
            let config = kube::Config::new(url.parse().expect("a URL"));
            let client = Client::try_from(config.clone()).expect("a client");
            let mut elector = LeaderElector::new(
                client.clone(),
                LeaseConfig {
                    namespace: "ns".into(),
                    name: "lease".into(),
                    identity: "me".into(),
                    lease_duration: Duration::from_secs(3),
                    renew_deadline: Duration::from_secs(1),
                    retry_period: Duration::from_millis(200),
                },
            );
            let shutdown = CancellationToken::new();
            assert!(elector.acquire(&shutdown, |_, _| {}).await, "acquired");
            let before = writes.load(std::sync::atomic::Ordering::SeqCst);
            let holding = tokio::spawn(elector.hold_apart(client, config, shutdown.clone()));
            tokio::time::sleep(Duration::from_millis(100)).await;
            // A CPU-bound pass: nothing else runs on this runtime for three renew deadlines.
            std::thread::sleep(Duration::from_secs(3));
            let renewed = writes.load(std::sync::atomic::Ordering::SeqCst) - before;
            shutdown.cancel();
            let (_, held) = holding.await.expect("not panicked");
            (held, renewed)
        });
        assert!(held.is_ok(), "{held:?}");
        assert!(renewed >= 5, "renewed {renewed} times in 3 s");
    }
}
