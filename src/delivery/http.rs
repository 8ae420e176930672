//! The HTTP client for the external API: one POST per event, with the event id as
//! `Idempotency-Key`, a per-request timeout and a bounded connection setup time.

use crate::config::ApiConfig;
use crate::core::backoff::parse_retry_after;
use crate::core::classify::TransportFailure;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid header `{0}`")]
    Header(String),
    #[error("cannot build HTTP client: {0}")]
    Build(#[from] reqwest::Error),
}

/// An HTTP answer, reduced to what classification needs.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<Duration>,
}

#[derive(Clone)]
pub struct ApiClient {
    client: reqwest::Client,
    url: reqwest::Url,
}

impl ApiClient {
    /// `token` comes from the environment; it goes into a sensitive header value,
    /// which reqwest and Courier's logs never print.
    pub fn new(
        cfg: &ApiConfig,
        token: Option<&str>,
        max_conns: usize,
    ) -> Result<ApiClient, ClientError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/cloudevents+json"),
        );
        for (k, v) in &cfg.headers {
            let name =
                HeaderName::from_bytes(k.as_bytes()).map_err(|_| ClientError::Header(k.clone()))?;
            let value = HeaderValue::from_str(v).map_err(|_| ClientError::Header(k.clone()))?;
            headers.insert(name, value);
        }
        if let Some(t) = token {
            let mut value = HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| ClientError::Header("authorization".into()))?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        let mut b = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(cfg.request_timeout)
            .connect_timeout(cfg.connect_timeout)
            .pool_max_idle_per_host(cfg.pool_max_idle_per_host.max(max_conns))
            .tcp_nodelay(true)
            // Courier retries by itself (with the breaker and the DLQ in the loop),
            // and a redirected POST is not a delivery: an API answering 3xx is
            // misconfigured, and the 3xx is classified and reported as such.
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never());
        if cfg.http2_prior_knowledge {
            b = b.http2_prior_knowledge();
        }
        let url = reqwest::Url::parse(&cfg.url).map_err(|_| ClientError::Header("url".into()))?;
        Ok(ApiClient {
            client: b.build()?,
            url,
        })
    }

    /// `redelivery`: the DLQ round (sent as `Courier-Redelivery`), for drains.
    pub async fn post(
        &self,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> Result<Answer, TransportFailure> {
        let mut req = self
            .client
            .post(self.url.clone())
            .header("Idempotency-Key", event_id)
            .body(body);
        if let Some(n) = redelivery {
            req = req.header("Courier-Redelivery", n.to_string());
        }
        let resp = req.send().await.map_err(classify_reqwest)?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
        // Read the (small) body so the connection goes back to the pool.
        let _ = resp.bytes().await;
        Ok(Answer {
            status,
            retry_after,
        })
    }
}

fn classify_reqwest(e: reqwest::Error) -> TransportFailure {
    if e.is_timeout() {
        TransportFailure::Timeout
    } else if e.is_connect() {
        TransportFailure::Connect
    } else {
        TransportFailure::Other
    }
}
