//! The HTTP client for the external API: one POST per event, with the event id as
//! `Idempotency-Key`, a per-request timeout and a bounded connection setup time.
//!
//! Over `https://` it speaks TLS with rustls: the platform's root certificates,
//! or `api.tls.ca_file` instead of them (`ca_mode = "replace"`, the default) or
//! in addition (`"add"`); a client certificate for mTLS from `api.tls.cert_file`
//! and `key_file`; HTTP/2 offered in ALPN only with `api.http2 = true`.
//!
//! Credentials come from [`Auth`] for each request: the bearer token
//! (static, a rotating file, or OAuth2) and the Standard Webhooks signature
//! over exactly the body sent. A 401 to a request that carried a token is
//! answered by one more send with a new credential when there is one (a
//! refreshed OAuth2 token, a token file that changed): one call to the stages,
//! not a try of the event (`courier_auth_retries_total`).
//!
//! A failed call says what failed: [`classify`] walks the error's `source()`
//! chain down to rustls, hyper and I/O errors and names a [`TransportFailure`]
//! (`tls_untrusted`, `dns`, `connect_refused`, ...), with a short detail that
//! holds neither the URL nor anything the API sent.

use crate::auth::{Auth, AuthFailure};
use crate::config::{ApiConfig, CaMode};
use crate::core::backoff::parse_retry_after;
use crate::core::classify::TransportFailure;
use crate::core::mapping::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};

mod excerpt;
mod exchange;
mod failure;
#[cfg(test)]
mod tests;

pub use excerpt::{body_excerpt, redacted_excerpt};
use excerpt::{read_body, read_whole, secret_forms, secret_header};
pub use exchange::{Answer, Outgoing, TransportError, MAX_READ_ANSWER_BYTES};
pub use failure::{classify, tls_failure};
use failure::{classify_reqwest, error_chain};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid header `{0}`")]
    Header(String),
    #[error(transparent)]
    Tls(#[from] crate::config::ConfigError),
    #[error("cannot build the HTTP client: {}", error_chain(.0))]
    Build(#[from] reqwest::Error),
}

/// The event id's header (`Idempotency-Key`; header names are case-blind and
/// go out in lower case), made once rather than parsed at every request.
const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

#[derive(Clone)]
pub struct ApiClient {
    client: reqwest::Client,
    url: reqwest::Url,
    error_body_bytes: usize,
    /// Values redacted from an answer's body before it goes into an envelope:
    /// configured header values whose names say credential (the credentials
    /// `auth` holds are added at each answer: they may rotate).
    secrets: Vec<Vec<u8>>,
    auth: std::sync::Arc<Auth>,
}

/// What the delivery stages send requests through: the [`ApiClient`] in
/// production, a fake in the shell's unit tests (the stages are generic over
/// it, so the hot path stays monomorphic).
pub(crate) trait Api: Clone + Send + Sync + 'static {
    /// One request for event `event_id` (`redelivery`: the DLQ round).
    fn send(
        &self,
        out: &Outgoing,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> impl std::future::Future<Output = Result<Answer, TransportError>> + Send;

    /// What of `text` (from an answer: a per-item result) may go into an
    /// envelope's `last_error`: cut, with every secret redacted; `None` when
    /// nothing may (`api.error_body_bytes = 0`).
    fn excerpt(&self, text: &[u8]) -> Option<String> {
        body_excerpt(text, 200)
    }
}

impl Api for ApiClient {
    fn send(
        &self,
        out: &Outgoing,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> impl std::future::Future<Output = Result<Answer, TransportError>> + Send {
        ApiClient::send(self, out, event_id, body, redelivery)
    }

    fn excerpt(&self, text: &[u8]) -> Option<String> {
        if self.error_body_bytes == 0 {
            return None;
        }
        redacted_excerpt(text, self.error_body_bytes, &self.current_secrets())
    }
}

impl ApiClient {
    /// `auth` gives each request its credentials (sensitive header values,
    /// which reqwest and Courier's logs never print). The TLS files are read here.
    pub fn new(
        cfg: &ApiConfig,
        auth: std::sync::Arc<Auth>,
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
        let url = reqwest::Url::parse(&cfg.url).map_err(|_| ClientError::Header("url".into()))?;
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
            .retry(reqwest::retry::never())
            // An https API redirecting nowhere else: never fall back to http.
            .https_only(url.scheme() == "https");
        if cfg.http2_prior_knowledge {
            b = b.http2_prior_knowledge();
        } else if !cfg.http2 {
            // ALPN offers only http/1.1 over TLS (and no h2c upgrade over http).
            b = b.http1_only();
        }
        if url.scheme() == "https" {
            b = tls(b, cfg)?;
        }
        let mut secrets: Vec<Vec<u8>> = Vec::new();
        for (k, v) in &cfg.headers {
            if secret_header(k) && !v.is_empty() {
                secrets.extend(secret_forms(v));
            }
        }
        Ok(ApiClient {
            client: b.build()?,
            url,
            error_body_bytes: cfg.error_body_bytes,
            secrets,
            auth,
        })
    }

    /// `redelivery`: the DLQ round (sent as `Courier-Redelivery`), for drains.
    pub async fn post(
        &self,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> Result<Answer, TransportError> {
        self.send(&Outgoing::default(), event_id, body, redelivery)
            .await
    }

    /// One request as `out` says. A URL, header name or value the HTTP stack
    /// refuses fails as `request_unbuildable` (the event's fault); no
    /// credential to send fails as `auth_token_*` (systemic).
    pub async fn send(
        &self,
        out: &Outgoing,
        event_id: &str,
        body: bytes::Bytes,
        redelivery: Option<u32>,
    ) -> Result<Answer, TransportError> {
        let url = match &out.url {
            None => self.url.clone(),
            Some(u) => reqwest::Url::parse(u)
                .map_err(|_| TransportError::new(TransportFailure::Request, String::new()))?,
        };
        let authorization = self.auth.authorization().await.map_err(auth_error)?;
        let resp = self
            .request(
                out,
                url.clone(),
                event_id,
                &body,
                redelivery,
                authorization.as_ref(),
            )
            .send()
            .await
            .map_err(|e| classify_reqwest(&e))?;
        let resp = match authorization {
            Some(used) if resp.status() == reqwest::StatusCode::UNAUTHORIZED => {
                let challenge = resp.headers().get(reqwest::header::WWW_AUTHENTICATE);
                match self.auth.unauthorized(&used, challenge).await {
                    None => resp,
                    Some(fresh) => {
                        // Read to its end, so the connection goes back to the pool.
                        read_body(resp, 0, false).await;
                        let again = self
                            .request(out, url, event_id, &body, redelivery, Some(&fresh))
                            .send()
                            .await
                            .map_err(|e| classify_reqwest(&e))?;
                        let outcome = if again.status() == reqwest::StatusCode::UNAUTHORIZED {
                            "refused"
                        } else {
                            "delivered"
                        };
                        metrics::counter!(crate::metrics::AUTH_RETRIES, "outcome" => outcome)
                            .increment(1);
                        if again.status().is_success() {
                            self.auth.accepted(&fresh);
                        }
                        again
                    }
                }
            }
            Some(used) if resp.status().is_success() => {
                self.auth.accepted(&used);
                resp
            }
            _ => resp,
        };
        self.answer(resp, out.read_answer).await
    }

    /// The request: the route's method and URL, the event id as
    /// `Idempotency-Key`, the credential, the signature over `body`.
    fn request(
        &self,
        out: &Outgoing,
        url: reqwest::Url,
        event_id: &str,
        body: &bytes::Bytes,
        redelivery: Option<u32>,
        authorization: Option<&HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let method = match out.method {
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
        };
        let mut req = self
            .client
            .request(method, url)
            .header(IDEMPOTENCY_KEY, event_id);
        if let Some(a) = authorization {
            req = req.header(AUTHORIZATION, a.clone());
        }
        if let Some(ct) = &out.content_type {
            req = req.header(CONTENT_TYPE, ct.as_ref());
        }
        for (name, value) in &out.headers {
            req = req.header(name.as_str(), value.as_ref());
        }
        if let Some(n) = redelivery {
            req = req.header("Courier-Redelivery", n.to_string());
        }
        if let Some(headers) = self.auth.signature(event_id, body) {
            for (name, value) in headers {
                req = req.header(name, value);
            }
        }
        req.body(body.clone())
    }

    /// The answer, reduced: status, `Retry-After`, and for a failure an
    /// excerpt of its body with every secret redacted.
    async fn answer(
        &self,
        resp: reqwest::Response,
        whole: Option<usize>,
    ) -> Result<Answer, TransportError> {
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
        if let (Some(cap), true) = (whole, (200..300).contains(&status)) {
            let full = read_whole(resp, cap.min(MAX_READ_ANSWER_BYTES)).await;
            return Ok(Answer {
                status,
                retry_after,
                body: None,
                full: Some(full),
                no_result: None,
                per_item: false,
            });
        }
        // Read a small body to its end, so the connection goes back to the
        // pool; of any other, only what the excerpt needs (the cap plus the
        // longest secret, so a secret is redacted whole).
        let success = (200..300).contains(&status);
        if success || self.error_body_bytes == 0 {
            read_body(resp, 0, success).await;
            return Ok(Answer {
                status,
                retry_after,
                body: None,
                full: None,
                no_result: None,
                per_item: false,
            });
        }
        let secrets = self.current_secrets();
        let longest = secrets.iter().map(Vec::len).max().unwrap_or(0);
        let keep = self.error_body_bytes.saturating_add(longest);
        let read = read_body(resp, keep, success).await;
        Ok(Answer {
            status,
            retry_after,
            body: redacted_excerpt(&read, self.error_body_bytes, &secrets),
            full: None,
            no_result: None,
            per_item: false,
        })
    }

    /// Every value redacted from an answer's excerpt now: the configured
    /// credential headers and the current credentials (they may rotate).
    fn current_secrets(&self) -> Vec<Vec<u8>> {
        let mut secrets = self.secrets.clone();
        for s in self.auth.current_secrets() {
            secrets.extend(secret_forms(&s));
        }
        secrets
    }
}

/// No credential to send: a systemic transport failure of its own reason.
fn auth_error(f: AuthFailure) -> TransportError {
    let kind = match f {
        AuthFailure::Unavailable => TransportFailure::AuthTokenUnavailable,
        AuthFailure::Refused => TransportFailure::AuthTokenRefused,
    };
    TransportError::new(kind, "no OAuth2 access token")
}

/// Roots and client identity from `[api.tls]`.
fn tls(b: reqwest::ClientBuilder, cfg: &ApiConfig) -> Result<reqwest::ClientBuilder, ClientError> {
    let files = cfg.tls.load()?;
    let roots = files
        .roots
        .iter()
        .map(|c| reqwest::Certificate::from_der(c.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut b = if roots.is_empty() {
        // The platform's roots (rustls-platform-verifier).
        b
    } else {
        match cfg.tls.ca_mode {
            CaMode::Replace => b.tls_certs_only(roots),
            CaMode::Add => b.tls_certs_merge(roots),
        }
    };
    if let Some(pem) = files.identity_pem() {
        b = b.identity(reqwest::Identity::from_pem(&pem)?);
    }
    Ok(b)
}
