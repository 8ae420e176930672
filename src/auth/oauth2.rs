//! The OAuth2 client credentials grant: an access token fetched from
//! `api.oauth2.token_url`, cached, refreshed ahead of its expiry in the
//! background, one fetch in flight for the whole process however many calls
//! wait (`core::credentials` decides when). The protocol — the request's form,
//! client authentication, the token and error answers — is the `oauth2`
//! crate's; the request goes through a reqwest client of Courier's own (no
//! redirects, `api.request_timeout`, rustls).
//!
//! A failed fetch has a typed reason: `auth_token_unavailable` (no answer, a
//! 5xx, 408/429, an answer that is not a token) or `auth_token_refused` (a 4xx:
//! the client's credentials). Both are systemic for the calls waiting: the
//! group pauses, no event is parked for it. The token endpoint's `error` field
//! is logged once per change of reason; the token and the secret never are.
//!
//! A 401 from the API never drops the token: `core::credentials::unauthorized`
//! decides whether the refused call sends again with another token, waits for
//! a refresh it starts (at most one per `api.oauth2.unauthorized_refresh_interval`),
//! or keeps its 401; the other calls send with the cached token meanwhile.

use super::secret::Watched;
use super::AuthFailure;
use crate::clock::now_ms;
use crate::config::{AuthStyle, ConfigError, OAuth2Config};
use crate::core::credentials::unauthorized::{self, Challenge, Step};
use crate::core::credentials::{self, TokenStep, TokenTimes};
use crate::metrics as m;
use crate::status_page::{CredentialSnapshot, StatusBoard};
use oauth2::basic::{BasicClient, BasicErrorResponseType};
use oauth2::{
    AuthType, ClientId, ClientSecret, RequestTokenError, Scope, StandardErrorResponse,
    TokenResponse, TokenUrl,
};
use reqwest::header::HeaderValue;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a call waits for the next fetch once the last one failed.
pub(crate) const FAILING_WAIT: Duration = Duration::from_secs(1);
/// The most of a token endpoint's answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

pub(crate) struct TokenSource {
    url: TokenUrl,
    client_id: ClientId,
    secret: Arc<Watched<String>>,
    scopes: Vec<Scope>,
    extra: Vec<(String, String)>,
    auth_type: AuthType,
    http: reqwest::Client,
    /// How long a call waits for a token at most (`api.request_timeout`).
    wait: Duration,
    /// `api.oauth2.unauthorized_refresh_interval`.
    interval: Duration,
    state: Mutex<State>,
    /// Held while a fetch is in flight: one at a time.
    fetch: tokio::sync::Mutex<()>,
    /// Told each time `fetching` is cleared (a 401 that joined a fetch waits
    /// for it).
    fetch_done: tokio::sync::Notify,
    board: Option<Arc<StatusBoard>>,
}

#[derive(Default)]
struct State {
    token: Option<Issued>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<AuthFailure>,
    fetching: bool,
    /// Bumped by each fetch's end and each invalidation: a caller that waited
    /// for the fetch lock sees whether someone else fetched meanwhile.
    generation: u64,
    last_refresh_ms: Option<i64>,
    /// No refresh caused by a 401 before this.
    quiet_until: Option<Instant>,
    /// The tokens the cached one replaced, newest first (for redaction only).
    previous: Vec<HeaderValue>,
}

#[derive(Clone)]
struct Issued {
    header: HeaderValue,
    /// When it was asked for.
    asked: Instant,
    /// A call with it was answered 2xx.
    accepted: bool,
    refresh_at: Instant,
    expires_at: Instant,
    expires_ms: i64,
}

impl State {
    fn times(&self) -> TokenTimes {
        TokenTimes {
            token: self.token.as_ref().map(|t| (t.refresh_at, t.expires_at)),
            retry_at: self.retry_at,
            fetching: self.fetching,
        }
    }
}

/// Why the HTTP exchange with the token endpoint gave no answer the crate
/// should read (its text: no URL, no secret).
#[derive(Debug, thiserror::Error)]
enum ExchangeError {
    #[error("{0}")]
    Transport(String),
    #[error("the token endpoint answered {0}")]
    Status(u16),
}

impl TokenSource {
    pub(crate) fn new(
        cfg: &OAuth2Config,
        secret: Arc<Watched<String>>,
        request_timeout: Duration,
        connect_timeout: Duration,
        board: Option<Arc<StatusBoard>>,
    ) -> Result<TokenSource, ConfigError> {
        let field = "api.oauth2.token_url";
        let url = TokenUrl::new(cfg.token_url.clone())
            .map_err(|e| crate::config::invalid(field, e.to_string()))?;
        let mut b = reqwest::Client::builder()
            .timeout(request_timeout)
            .connect_timeout(connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .https_only(cfg.token_url.starts_with("https://"));
        if let Some(ca) = &cfg.ca_file {
            let roots = crate::tls::ClientFiles::load("api.oauth2", Some(ca), None, None)
                .map_err(|e| crate::config::invalid("api.oauth2.ca_file", e.to_string()))?;
            let certs = roots
                .roots
                .iter()
                .map(|c| reqwest::Certificate::from_der(c.as_ref()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| crate::config::invalid("api.oauth2.ca_file", e.to_string()))?;
            b = b.tls_certs_merge(certs);
        }
        let http = b
            .build()
            .map_err(|e| crate::config::invalid(field, e.to_string()))?;
        let mut extra: Vec<(String, String)> = cfg
            .params
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if let Some(a) = &cfg.audience {
            extra.push(("audience".into(), a.clone()));
        }
        metrics::gauge!(m::AUTH_TOKEN_EXPIRY).set(0.0);
        Ok(TokenSource {
            url,
            client_id: ClientId::new(cfg.client_id.clone()),
            secret,
            scopes: cfg
                .scope
                .split_whitespace()
                .map(|s| Scope::new(s.to_string()))
                .collect(),
            extra,
            auth_type: match cfg.auth_style {
                AuthStyle::Basic => AuthType::BasicAuth,
                AuthStyle::Body => AuthType::RequestBody,
            },
            http,
            wait: request_timeout,
            interval: cfg.unauthorized_refresh_interval,
            state: Mutex::new(State::default()),
            fetch: tokio::sync::Mutex::new(()),
            fetch_done: tokio::sync::Notify::new(),
            board,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `Authorization` value to send now: the cached token, or one fetched
    /// for this call (waiting at most `api.request_timeout`, joining a fetch
    /// already in flight).
    pub(crate) async fn bearer(self: &Arc<Self>) -> Result<HeaderValue, AuthFailure> {
        let deadline = Instant::now() + self.wait;
        loop {
            let (step, generation, header, last) = {
                let mut s = self.lock();
                let step = credentials::step(&s.times(), Instant::now());
                if step == TokenStep::UseAndRefresh {
                    s.fetching = true;
                }
                (
                    step,
                    s.generation,
                    s.token.as_ref().map(|t| t.header.clone()),
                    s.last_error,
                )
            };
            let unavailable = || last.unwrap_or(AuthFailure::Unavailable);
            match (step, header) {
                (TokenStep::Use, Some(h)) => return Ok(h),
                (TokenStep::UseAndRefresh, Some(h)) => {
                    let this = self.clone();
                    tokio::spawn(async move { this.fetch_after(generation).await });
                    return Ok(h);
                }
                (TokenStep::WaitUntil(at), _) => {
                    // The last fetch failed: wait for the next one at most
                    // FAILING_WAIT, then fail (systemic: the breaker pauses the
                    // group, and its probes come back here).
                    let give_up = deadline.min(Instant::now() + FAILING_WAIT);
                    if at >= give_up {
                        tokio::time::sleep_until(give_up.into()).await;
                        return Err(unavailable());
                    }
                    tokio::time::sleep_until(at.into()).await;
                }
                _ => {
                    if Instant::now() >= deadline {
                        return Err(unavailable());
                    }
                    let fetched =
                        tokio::time::timeout_at(deadline.into(), self.fetch_after(generation));
                    if fetched.await.is_err() {
                        return Err(unavailable());
                    }
                }
            }
        }
    }

    /// The API answered 401 to a call that carried `used`, saying `challenge`:
    /// the token to send that call again with (a different one), or `None`
    /// (the 401 stands). Never drops the cached token; see
    /// `core::credentials::unauthorized` for when a refresh is started.
    pub(crate) async fn unauthorized(
        self: &Arc<Self>,
        used: &HeaderValue,
        challenge: Challenge,
    ) -> Option<HeaderValue> {
        let now = Instant::now();
        let fetch_done = self.fetch_done.notified();
        let (step, generation) = {
            let mut s = self.lock();
            let cached = s.token.as_ref().filter(|t| now < t.expires_at);
            let case = unauthorized::Case {
                used_cached: cached.is_some_and(|t| t.header == used),
                fetching: s.fetching,
                issued: cached.map(|t| t.asked),
                expires: cached.map(|t| t.expires_at),
                accepted: cached.is_some_and(|t| t.accepted),
                quiet_until: s.quiet_until,
                retry_at: s.retry_at,
                challenge,
            };
            let step = unauthorized::step(&case, now, self.interval, rand::random());
            if let Step::Refresh { quiet_until } = step {
                if quiet_until.is_some() {
                    s.quiet_until = quiet_until;
                }
                s.fetching = true;
            }
            (step, s.generation)
        };
        match step {
            Step::Resend => {}
            Step::Join => {
                // Told when the fetch in flight ends (registered before the
                // state was read: its end cannot be missed).
                let _ = tokio::time::timeout(self.wait, fetch_done).await;
            }
            Step::Refresh { quiet_until } => {
                tracing::debug!(
                    expiring = quiet_until.is_none(),
                    "the API answered 401 to the cached OAuth2 token: refreshing it (for 401s at most once per {:?})",
                    self.interval
                );
                // A task of its own: the refresh ends (and clears `fetching`)
                // even if this call stops waiting for it.
                let this = self.clone();
                let refresh = tokio::spawn(async move { this.fetch_after(generation).await });
                let _ = tokio::time::timeout(self.wait, refresh).await;
            }
            Step::Keep(why) => {
                tracing::trace!(why = why.as_str(), "a 401 leaves the OAuth2 token as it is");
                return None;
            }
        }
        let fresh = self.bearer().await.ok()?;
        (fresh != used).then_some(fresh)
    }

    /// A call that carried `used` was answered 2xx: the token is accepted (a
    /// 401 to another call does not drop it while it is young).
    pub(crate) fn accepted(&self, used: &HeaderValue) {
        let mut s = self.lock();
        if let Some(t) = s.token.as_mut() {
            if !t.accepted && t.header == used {
                t.accepted = true;
            }
        }
    }

    /// Fetches a token unless another fetch ended since `generation` was seen.
    async fn fetch_after(&self, generation: u64) {
        let _one = self.fetch.lock().await;
        {
            let mut s = self.lock();
            if s.generation != generation {
                drop(s);
                self.clear_fetching();
                return;
            }
            s.fetching = true;
        }
        // Cleared however this ends (a caller's timeout drops the future).
        let _clear = ClearFetching(self);
        let asked = Instant::now();
        let result = self.exchange().await;
        let mut s = self.lock();
        s.fetching = false;
        s.generation += 1;
        match result {
            Ok((value, expires_in)) => {
                let lifetime = credentials::lifetime(expires_in);
                let mut header = match HeaderValue::from_str(&format!("Bearer {value}")) {
                    Ok(h) => h,
                    Err(_) => {
                        self.failed(
                            &mut s,
                            asked,
                            AuthFailure::Unavailable,
                            "the token holds characters an HTTP header cannot carry".into(),
                        );
                        return;
                    }
                };
                header.set_sensitive(true);
                let expires_ms = now_ms()
                    .saturating_add(i64::try_from(lifetime.as_millis()).unwrap_or(i64::MAX));
                let replaced = s.token.replace(Issued {
                    header,
                    asked,
                    accepted: false,
                    refresh_at: credentials::refresh_at(asked, lifetime, rand::random()),
                    expires_at: credentials::expires_at(asked, lifetime),
                    expires_ms,
                });
                if let Some(old) = replaced {
                    s.previous.insert(0, old.header);
                    s.previous.truncate(super::secret::KEPT_FOR_REDACTION);
                }
                if s.last_error.is_some() {
                    tracing::info!("OAuth2 token endpoint answered with a token again");
                }
                s.failures = 0;
                s.retry_at = None;
                s.last_error = None;
                s.last_refresh_ms = Some(now_ms());
                metrics::counter!(m::AUTH_TOKEN_REQUESTS, "outcome" => "ok").increment(1);
                metrics::gauge!(m::AUTH_TOKEN_EXPIRY).set(expires_ms as f64 / 1000.0);
            }
            Err((failure, detail)) => self.failed(&mut s, asked, failure, detail),
        }
        self.publish(&s);
    }

    fn failed(&self, s: &mut State, asked: Instant, failure: AuthFailure, detail: String) {
        s.failures = s.failures.saturating_add(1);
        s.retry_at = Some(asked + credentials::backoff(s.failures));
        metrics::counter!(m::AUTH_TOKEN_REQUESTS, "outcome" => failure.as_str()).increment(1);
        if s.last_error != Some(failure) {
            tracing::warn!(reason = failure.as_str(), detail = %detail, "the OAuth2 token endpoint gave no token: calls wait (systemic)");
        }
        s.last_error = Some(failure);
        self.publish(s);
    }

    fn publish(&self, s: &State) {
        if let Some(board) = &self.board {
            board.publish_credential(CredentialSnapshot {
                kind: "oauth2".into(),
                valid_until_ms: s.token.as_ref().map(|t| t.expires_ms),
                last_refresh_ms: s.last_refresh_ms,
                last_error: s.last_error.map(|e| e.as_str().to_string()),
            });
        }
    }

    /// One token request: the token and its lifetime, or the failure's reason
    /// and a detail for the log (the endpoint's `error` code and description,
    /// or the transport's failure).
    async fn exchange(&self) -> Result<(String, Option<Duration>), (AuthFailure, String)> {
        let secret = self.secret.get();
        let client = BasicClient::new(self.client_id.clone())
            .set_client_secret(ClientSecret::new(secret.to_string()))
            .set_auth_type(self.auth_type.clone())
            .set_token_uri(self.url.clone());
        let mut req = client
            .exchange_client_credentials()
            .add_scopes(self.scopes.iter().cloned());
        for (k, v) in &self.extra {
            req = req.add_extra_param(k.clone(), v.clone());
        }
        // Owned captures: the crate's client trait is higher-ranked over the
        // borrow, and a future borrowing `self` would not be `Send` for all of it.
        let status = Arc::new(AtomicU16::new(0));
        let (client, seen) = (self.http.clone(), status.clone());
        let http = move |r: oauth2::HttpRequest| send(client.clone(), r, seen.clone());
        match req.request_async(&http).await {
            Ok(t) => Ok((t.access_token().secret().clone(), t.expires_in())),
            Err(e) => {
                let code = status.load(Ordering::Relaxed);
                let refused = (400..500).contains(&code) && code != 408 && code != 429;
                let failure = if refused {
                    AuthFailure::Refused
                } else {
                    AuthFailure::Unavailable
                };
                Err((failure, describe(&e, code)))
            }
        }
    }
}

/// One exchange with the token endpoint; its status goes to `status` (the
/// crate's error does not keep it).
async fn send(
    http: reqwest::Client,
    r: oauth2::HttpRequest,
    status: Arc<AtomicU16>,
) -> Result<oauth2::HttpResponse, ExchangeError> {
    let req = reqwest::Request::try_from(r).map_err(|e| ExchangeError::Transport(e.to_string()))?;
    let resp = http
        .execute(req)
        .await
        .map_err(|e| ExchangeError::Transport(super::error_chain(&e.without_url())))?;
    let code = resp.status().as_u16();
    status.store(code, Ordering::Relaxed);
    if code >= 500 || code == 408 || code == 429 {
        return Err(ExchangeError::Status(code));
    }
    let mut b = http::Response::builder().status(code);
    for (k, v) in resp.headers() {
        b = b.header(k, v);
    }
    let mut body = Vec::new();
    let mut resp = resp;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ExchangeError::Transport(e.to_string()))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(ExchangeError::Transport("the answer is too large".into()));
        }
        body.extend_from_slice(&chunk);
    }
    b.body(body)
        .map_err(|e| ExchangeError::Transport(e.to_string()))
}

/// Clears `fetching` when a fetch ends, however it ends.
struct ClearFetching<'a>(&'a TokenSource);

impl Drop for ClearFetching<'_> {
    fn drop(&mut self) {
        self.0.clear_fetching();
    }
}

impl TokenSource {
    /// No fetch in flight any more: tells the 401s that joined it.
    fn clear_fetching(&self) {
        self.lock().fetching = false;
        self.fetch_done.notify_waiters();
    }

    /// The cached token's text and the last ones it replaced (for redaction
    /// from answers' bodies only).
    pub(crate) fn tokens_to_redact(&self) -> Vec<String> {
        let s = self.lock();
        s.token
            .iter()
            .map(|t| &t.header)
            .chain(&s.previous)
            .filter_map(|h| h.to_str().ok()?.strip_prefix("Bearer ").map(String::from))
            .collect()
    }

    /// The token's state for `/status` (never the token).
    pub(crate) fn snapshot(&self) -> CredentialSnapshot {
        let s = self.lock();
        CredentialSnapshot {
            kind: "oauth2".into(),
            valid_until_ms: s.token.as_ref().map(|t| t.expires_ms),
            last_refresh_ms: s.last_refresh_ms,
            last_error: s.last_error.map(|e| e.as_str().to_string()),
        }
    }
}

/// A failed token request, for the log: the endpoint's error code and its
/// description, or what failed on the way. Never the body of a 200. What
/// the endpoint chose (its `error`, `error_description`, and whatever the
/// OAuth2 library quotes of its answer) is cut and escaped
/// (`core::text::excerpt`, as record text is: I28).
fn describe(
    e: &RequestTokenError<ExchangeError, StandardErrorResponse<BasicErrorResponseType>>,
    status: u16,
) -> String {
    use crate::core::text::{excerpt, LOG_TEXT_MAX};
    match e {
        RequestTokenError::ServerResponse(r) => {
            let mut d = format!("error={}", excerpt(r.error().as_ref(), LOG_TEXT_MAX));
            if let Some(desc) = r.error_description() {
                d.push_str(&format!(" description=\"{}\"", excerpt(desc, LOG_TEXT_MAX)));
            }
            format!("the token endpoint answered {status}: {d}")
        }
        RequestTokenError::Request(e) => excerpt(&e.to_string(), LOG_TEXT_MAX),
        RequestTokenError::Parse(_, _) if status == 200 => {
            "the token endpoint's answer is not a token".into()
        }
        RequestTokenError::Parse(_, _) => {
            format!("the token endpoint answered {status} without an OAuth2 error")
        }
        RequestTokenError::Other(o) => {
            format!("the token endpoint's answer: {}", excerpt(o, LOG_TEXT_MAX))
        }
    }
}

#[cfg(test)]
mod tests;
