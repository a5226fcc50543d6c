//! Clients with a bounded pool of idle connections.
//!
//! kube's default client keeps every connection it opened: its pool has no timer, so an idle
//! connection past its 90 s is only noticed when the pool is next asked for one. A
//! controller's requests come in bursts (a Work's objects, a relist, a Placement of thousands of
//! objects): a burst opens as many connections as it has requests in flight, and each then sits
//! idle with a TLS session and its buffers on both sides (about 17 KiB of the syncer's heap per
//! connection, measured with heaptrack) — per member, which adds up in a fleet. The clients
//! here keep at most [`IDLE_CONNECTIONS`] idle connections per server, each for at most
//! [`IDLE_TIMEOUT`].

use std::time::Duration;

use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// How many idle connections a client keeps per server. As many as a member client has requests
/// in flight ([`crate::member_client::MEMBER_REQUESTS_IN_FLIGHT`]): within a burst a request
/// finds the connection the one before it let go of. With 4, the syncer opened 72–170
/// connections per member during a create of 3,000 copies instead of 17–23 (a TLS handshake on
/// both sides for each).
pub const IDLE_CONNECTIONS: usize = crate::member_client::MEMBER_REQUESTS_IN_FLIGHT;

/// How long an idle connection is kept. Long enough for the requests of a burst, which follow
/// each other within milliseconds, and for the next pass of a reconciliation (after a debounce of
/// tens of milliseconds); short enough that a burst's connections do not outlive it by long.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// How a client retries a request the server answered 429, 503 or 504 (and `Retry-After`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retries {
    /// kube's default: up to 15 retries, backing off from 5 ms up to 1000 s (about three minutes
    /// in all). For the hub, without which nothing goes on anyway.
    Patient,
    /// Up to 3 retries within about a second. For a member: one that keeps answering 503 (an
    /// overloaded or broken apiserver) then fails the request soon, and the reconciliation that
    /// sent it is retried with its own backoff, instead of holding a worker for minutes.
    Brief,
}

impl Retries {
    fn policy(self) -> RetryPolicy {
        match self {
            Self::Patient => RetryPolicy::server_retry(),
            Self::Brief => {
                RetryPolicy::new(Duration::from_millis(5), Duration::from_secs(1), 3, true)
                    .expect("valid backoff parameters")
            }
        }
    }
}

/// A client for `config`: kube's own stack (base URL, retries of 429/503/504 unless `config`
/// turns them off, credentials, extra headers, the connect, read and write timeouts of `config`)
/// over a pool bounded by [`IDLE_CONNECTIONS`] and [`IDLE_TIMEOUT`], and, given a `limit`, at
/// most that many requests in flight (the others wait for a place).
///
/// Unlike kube's `Client::try_from`, the client carries no expiry of a client certificate that
/// an exec plugin issued (nothing here reads it: a controller restarts on an expired
/// credential).
pub fn client(
    config: &Config,
    limit: Option<usize>,
    retries: Retries,
) -> Result<Client, kube::Error> {
    counted_client(config, limit, retries, None)
}

/// Counts the requests a client sends, by verb (`get` — reads and lists —, `watch`, `create`,
/// `patch`, `update`, `delete`), each attempt of a retried request once.
#[derive(Clone)]
pub struct RequestCounter {
    counter: prometheus::IntCounterVec,
    /// The values of the counter's labels before the verb (e.g. the member's name).
    labels: std::sync::Arc<[String]>,
}

impl RequestCounter {
    /// Counts in `counter`, whose labels are `labels` then the verb.
    pub fn new(counter: prometheus::IntCounterVec, labels: &[&str]) -> Self {
        Self {
            counter,
            labels: labels.iter().map(|l| (*l).to_string()).collect(),
        }
    }

    fn count<B>(&self, request: &http::Request<B>) {
        let mut values: Vec<&str> = self.labels.iter().map(String::as_str).collect();
        values.push(verb_of(request.method(), request.uri().query()));
        self.counter.with_label_values(&values).inc();
    }
}

/// The Kubernetes verb of a request, as far as the request line tells it.
fn verb_of(method: &http::Method, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    });
    match *method {
        http::Method::GET if watch => "watch",
        http::Method::GET => "get",
        http::Method::POST => "create",
        http::Method::PATCH => "patch",
        http::Method::PUT => "update",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// [`client`], counting every request it sends in `counter`.
pub fn counted_client(
    config: &Config,
    limit: Option<usize>,
    retries: Retries,
    counter: Option<RequestCounter>,
) -> Result<Client, kube::Error> {
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(IDLE_CONNECTIONS)
        .pool_idle_timeout(IDLE_TIMEOUT)
        // Without a timer, idle connections past their timeout are only noticed when the
        // pool is next asked for one, and so never closed by a client that went quiet.
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector);
    let service = ServiceBuilder::new()
        .option_layer(limit.map(tower::limit::ConcurrencyLimitLayer::new))
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(retries.policy())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .option_layer(counter.map(|counter| {
            tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
                counter.count(&request);
                request
            })
        }))
        .map_err(BoxError::from)
        .service(pool);
    Ok(Client::new(service, config.default_namespace.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_their_kubernetes_verb() {
        use http::Method;
        assert_eq!(verb_of(&Method::GET, None), "get");
        assert_eq!(
            verb_of(&Method::GET, Some("labelSelector=a&limit=500")),
            "get"
        );
        assert_eq!(
            verb_of(
                &Method::GET,
                Some("labelSelector=a&watch=true&timeoutSeconds=290")
            ),
            "watch"
        );
        assert_eq!(
            verb_of(&Method::GET, Some("fieldSelector=watch%3Dtrue")),
            "get"
        );
        assert_eq!(verb_of(&Method::POST, None), "create");
        assert_eq!(
            verb_of(&Method::PATCH, Some("fieldManager=x&force=true")),
            "patch"
        );
        assert_eq!(verb_of(&Method::PUT, None), "update");
        assert_eq!(verb_of(&Method::DELETE, None), "delete");
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Connections a test server has open now, opened in all, requests served, and requests in
    /// flight at most.
    #[derive(Default)]
    struct Counts {
        open: AtomicUsize,
        opened: AtomicUsize,
        served: AtomicUsize,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
    }

    const OK: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    const UNAVAILABLE: &str = "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n";

    /// A plain HTTP/1.1 server that gives every request `answer` after `delay`, on keep-alive
    /// connections (the narrow parts of the client this tests are its pool and its retries).
    async fn server(delay: Duration, answer: &'static str) -> (String, Arc<Counts>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let c = c.clone();
                c.open.fetch_add(1, Ordering::SeqCst);
                c.opened.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut pending = Vec::new();
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => pending.extend_from_slice(&buf[..n]),
                        }
                        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                            pending.drain(..end + 4);
                            let now = c.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                            c.most_in_flight.fetch_max(now, Ordering::SeqCst);
                            tokio::time::sleep(delay).await;
                            c.in_flight.fetch_sub(1, Ordering::SeqCst);
                            c.served.fetch_add(1, Ordering::SeqCst);
                            if stream.write_all(answer.as_bytes()).await.is_err() {
                                break;
                            }
                        }
                    }
                    c.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        (url, counts)
    }

    async fn burst(client: &Client, n: usize) {
        let requests = (0..n).map(|_| {
            let client = client.clone();
            async move {
                let request = http::Request::get("/version")
                    .body(Vec::new())
                    .expect("a request");
                client.request_text(request).await.expect("an answer")
            }
        });
        futures::future::join_all(requests).await;
    }

    #[tokio::test]
    async fn a_burst_shares_connections_and_they_close_once_idle() {
        let (url, counts) = server(Duration::from_millis(20), OK).await;
        let config = Config::new(url.parse().expect("a URL"));
        let client = client(&config, Some(8), Retries::Brief).expect("a client");
        burst(&client, 200).await;
        assert!(
            counts.most_in_flight.load(Ordering::SeqCst) <= 8,
            "the limit holds"
        );
        let opened = counts.opened.load(Ordering::SeqCst);
        assert!(
            opened <= 16,
            "200 requests, 8 at a time, reuse their connections ({opened} opened)"
        );
        assert!(counts.open.load(Ordering::SeqCst) > 0);
        // Quiet now: the idle connections close on their own, though nothing asks the pool.
        let deadline = tokio::time::Instant::now() + IDLE_TIMEOUT * 3;
        while counts.open.load(Ordering::SeqCst) > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} connections still open {:?} after the burst",
                counts.open.load(Ordering::SeqCst),
                IDLE_TIMEOUT * 3
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // And the client still works.
        burst(&client, 1).await;
    }

    #[tokio::test]
    async fn a_member_that_keeps_answering_503_fails_a_request_within_seconds() {
        let (url, counts) = server(Duration::ZERO, UNAVAILABLE).await;
        let config = Config::new(url.parse().expect("a URL"));
        let member = client(&config, None, Retries::Brief).expect("a client");
        let started = std::time::Instant::now();
        let request = http::Request::get("/version")
            .body(Vec::new())
            .expect("a request");
        assert!(member.request_text(request).await.is_err());
        assert_eq!(
            counts.served.load(Ordering::SeqCst),
            4,
            "one try and 3 retries"
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
}
