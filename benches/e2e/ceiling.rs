//! Reference 1, the HTTP ceiling: a bare reqwest client, configured like Courier's
//! (`src/delivery/http.rs`), POSTing the same 512-byte events to the same API
//! stand-in at the same concurrency. No Kafka, no decoding, no bookkeeping: what
//! the API and the HTTP stack allow on this machine right now.

use crate::procs::{cpu_seconds, Pid};
use bytes::Bytes;
use courier::config::{ApiConfig, ApiTlsConfig};
use courier::delivery::http::ApiClient;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests the bare client makes, prepared before the clock starts.
pub(crate) struct Requests {
    bodies: Vec<(String, Bytes)>,
}

impl Requests {
    /// `n` distinct events (ids `<prefix>-<i>`), the shape and size Courier delivers.
    pub(crate) fn new(prefix: &str, n: usize, keys: usize, event_bytes: usize) -> Requests {
        let bodies = (0..n.max(1))
            .map(|i| {
                let id = courier_standins::loadgen::event_id(prefix, i);
                let key = courier_standins::loadgen::key_of(i, keys);
                let body = courier_standins::loadgen::event_json(
                    &id,
                    "profile.updated",
                    &key,
                    i,
                    event_bytes,
                );
                (id, Bytes::from(body))
            })
            .collect();
        Requests { bodies }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CeilingResult {
    pub concurrency: usize,
    pub requests: u64,
    pub failures: u64,
    pub secs: f64,
    pub req_per_s: f64,
    /// CPU of the bench process during this phase only, per request.
    pub cpu_us_per_req: Option<f64>,
    /// Exact latency quantiles of the requests, in ms.
    pub p50_ms_exact: Option<f64>,
    pub p99_ms_exact: Option<f64>,
    /// The same latencies bucketed on Courier's histogram bounds and interpolated
    /// like Courier's figures, so the two are comparable.
    pub p50_ms_bucketed: Option<f64>,
    pub p99_ms_bucketed: Option<f64>,
    pub mean_ms: Option<f64>,
}

/// How the bench's clients and Courier reach the stand-in: HTTP/2 or not (the
/// bench's `--http2`), and over HTTPS (`--https`) the CA to trust.
#[derive(Debug, Clone, Default)]
pub(crate) struct Transport {
    pub http2: bool,
    pub ca_file: Option<PathBuf>,
}

impl Transport {
    /// The `api.*` defaults with this transport: HTTP/2 by prior knowledge (h2c)
    /// over http://, by ALPN (`api.http2`) over https://.
    pub(crate) fn api_config(&self, url: &str) -> ApiConfig {
        let https = url.starts_with("https://");
        ApiConfig {
            url: url.to_string(),
            http2_prior_knowledge: self.http2 && !https,
            http2: self.http2 && https,
            tls: ApiTlsConfig {
                ca_file: self.ca_file.clone(),
                ..ApiTlsConfig::default()
            },
            ..ApiConfig::default()
        }
    }

    /// The same for Courier's config file: lines for `[api]`, and an `[api.tls]`
    /// section (empty over http://) to append.
    pub(crate) fn toml(&self, url: &str) -> (String, String) {
        let cfg = self.api_config(url);
        let api = format!(
            "http2 = {}\nhttp2_prior_knowledge = {}\n",
            cfg.http2, cfg.http2_prior_knowledge
        );
        let tls = match &cfg.tls.ca_file {
            Some(p) => format!("\n[api.tls]\nca_file = {:?}\n", p.display().to_string()),
            None => String::new(),
        };
        (api, tls)
    }
}

/// Courier's own API client (`src/delivery/http.rs`) with the `api.*` defaults:
/// the same library, settings and request, by construction. HTTP/1.1 keep-alive,
/// or HTTP/2 (`--http2`), over HTTPS with the bench's CA (`--https`).
pub(crate) fn client(
    url: &str,
    concurrency: usize,
    transport: &Transport,
) -> anyhow::Result<ApiClient> {
    Ok(ApiClient::new(
        &transport.api_config(url),
        std::sync::Arc::new(courier::auth::Auth::none()),
        concurrency,
    )?)
}

/// `concurrency` workers POST until `total` requests are done or `max` has passed.
/// With `warm`, each worker first sends one request outside the clock, so the
/// measured phase starts with `concurrency` connections open (over HTTPS: their
/// handshakes done) instead of opening them all at its start.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    url: &str,
    concurrency: usize,
    total: usize,
    max: Duration,
    requests: Arc<Requests>,
    ticks: f64,
    transport: &Transport,
    warm: bool,
) -> anyhow::Result<CeilingResult> {
    let client = client(url, concurrency, transport)?;
    if warm {
        let mut warmers = tokio::task::JoinSet::new();
        for i in 0..concurrency {
            let (client, requests) = (client.clone(), requests.clone());
            warmers.spawn(async move {
                let (id, body) = &requests.bodies[i % requests.bodies.len()];
                client.post(id, body.clone(), None).await.is_ok()
            });
        }
        while let Some(done) = warmers.join_next().await {
            anyhow::ensure!(done?, "a warm-up request failed");
        }
    }
    let next = Arc::new(AtomicUsize::new(0));
    let cpu0 = cpu_seconds(Pid::SelfProcess, ticks);
    let t0 = Instant::now();
    let deadline = t0 + max;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (client, next, requests) = (client.clone(), next.clone(), requests.clone());
        workers.spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, Relaxed);
                if i >= total || Instant::now() >= deadline {
                    break;
                }
                let (id, body) = &requests.bodies[i % requests.bodies.len()];
                let started = Instant::now();
                let success = client
                    .post(id, body.clone(), None)
                    .await
                    .is_ok_and(|a| (200..300).contains(&a.status));
                latencies.push(started.elapsed().as_secs_f64());
                if success {
                    ok += 1;
                } else {
                    failed += 1;
                }
            }
            (ok, failed, latencies)
        });
    }
    let (mut ok, mut failed, mut latencies) = (0u64, 0u64, Vec::new());
    while let Some(joined) = workers.join_next().await {
        let (o, f, l) = joined?;
        ok += o;
        failed += f;
        latencies.extend(l);
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(Pid::SelfProcess, ticks)
        .zip(cpu0)
        .map(|(b, a)| b - a);
    latencies.sort_by(f64::total_cmp);
    let bucketed = courier_testkit::prom::Histogram::from_samples(
        courier::metrics::LATENCY_BUCKETS,
        &latencies,
    );
    let ms = |s: Option<f64>| s.map(|s| s * 1e3);
    let done = ok + failed;
    Ok(CeilingResult {
        concurrency,
        requests: ok,
        failures: failed,
        secs,
        req_per_s: ok as f64 / secs,
        cpu_us_per_req: cpu.filter(|_| done > 0).map(|c| c * 1e6 / done as f64),
        p50_ms_exact: ms(courier_testkit::prom::exact_quantile(&latencies, 0.5)),
        p99_ms_exact: ms(courier_testkit::prom::exact_quantile(&latencies, 0.99)),
        p50_ms_bucketed: ms(bucketed.quantile(0.5)),
        p99_ms_bucketed: ms(bucketed.quantile(0.99)),
        mean_ms: ms(
            (!latencies.is_empty()).then(|| latencies.iter().sum::<f64>() / latencies.len() as f64)
        ),
    })
}
