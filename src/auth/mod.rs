//! What a request to the API carries to prove who sends it: the bearer token
//! (`api.token_env`, `api.token_file`, or `[api.oauth2]`), and the Standard
//! Webhooks signature (`[api.signing]`). The HTTP client
//! (`delivery::http`) asks for both for each request and tells this module when
//! the API answered 401.
//!
//! # Layout
//!
//! * `secret` — a secret from the environment or from a file re-read when it
//!   changes (a Kubernetes Secret volume's symlink swap included).
//! * `oauth2` — the client credentials grant: the token cache and its refresh
//!   (`core::credentials` decides when).
//! * this file — [`Auth`], the credentials of one API client, and
//!   [`AuthFailure`], why a request has no credential to send.
//!
//! Secrets never reach a log line, a metric, an envelope or `/status`: header
//! values are marked sensitive, and the client redacts the current values and
//! the last two each replaced from every answer's excerpt. Secret files are
//! read up to 64 KiB; one every user may read is warned about once.
//!
//! A 401 from the API: a token file is re-read; an OAuth2 token is refreshed at
//! most once per `api.oauth2.unauthorized_refresh_interval` for 401s, and not
//! at all while other calls are answered 2xx with a young one
//! (`core::credentials::unauthorized`).
//!
//! # Invariant I33: credentials
//!
//! *Enforced in* `src/auth/` (`Auth`, `oauth2::TokenSource`, `secret::Watched`),
//! `src/core/credentials.rs` (when to fetch), `src/delivery/http.rs` (the 401 retry),
//! `src/delivery/systemic.rs`. A request without a credential to send — the OAuth2 token
//! endpoint unreachable or answering no token (`auth_token_unavailable`), or refusing the
//! client (`auth_token_refused`) — fails as a systemic transport failure: the breaker hears
//! of it and the group pauses, and `core::systemic`'s hypothesis is not kept for it (no
//! later delivered call can make it the event's fault: never parked, never dead-lettered).
//! A call waits for a token at most `api.request_timeout`. One fetch is in flight for the
//! process (a lock; a caller that waited for it sees the generation moved and uses its
//! token); the cached token is refreshed in the background 10–20 % of its lifetime before
//! it expires, and a failed fetch backs off 1 s doubling to 30 s (`core::credentials::step`
//! decides `Use | UseAndRefresh | Fetch | WaitUntil`). A 401 to a request that carried a
//! token makes at most one more send, with a new credential only (a refreshed token, a
//! token file that changed): not a try of the event. Secret files are re-read every second
//! and after a 401, opened anew by path (a Kubernetes Secret volume's `..data` swap
//! included); a file that turns empty, unreadable or malformed keeps the last good value.
//! Secrets are sensitive header values, redacted from answers' excerpts (the current values
//! at each answer), and are never in logs, metrics, envelopes, `/status` or `check-config`.
//!
//! *Tested by* `core::credentials` unit and property tests (never a token past its expiry,
//! never a fetch during a back-off nobody fetches in, the refresh inside its margin);
//! `auth::secret` unit (a swapped volume is seen, a bad value keeps the last good);
//! `core::webhook_signature` unit (the spec's published vector); `tests/auth.rs` (hydra:
//! tokens of 3 s, the endpoint down 10 s, a refused client secret, a rotated token file);
//! `tests/signing.rs` (the Standard Webhooks reference library verifies every request
//! through a secret rotation).

pub(crate) mod oauth2;
pub(crate) mod secret;

use crate::config::{ApiConfig, ConfigError};
use crate::core::credentials::unauthorized;
use crate::core::webhook_signature;
use crate::status_page::{CredentialSnapshot, StatusBoard};
use reqwest::header::HeaderValue;
use secret::Watched;
use std::sync::Arc;

/// Why a request has no credential to send: systemic (the group pauses at
/// the breaker; never an event's fault, never parked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum AuthFailure {
    /// The token endpoint could not be asked, or gave no usable answer.
    Unavailable,
    /// The token endpoint refused the client's credentials (a 4xx).
    Refused,
}

impl AuthFailure {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            AuthFailure::Unavailable => "auth_token_unavailable",
            AuthFailure::Refused => "auth_token_refused",
        }
    }
}

/// The bearer token's source.
enum Bearer {
    /// `api.token_env` (fixed) or `api.token_file` (re-read).
    Static(Arc<Watched<HeaderValue>>),
    OAuth2(Arc<oauth2::TokenSource>),
}

/// The credentials of one API client.
#[derive(Default)]
pub struct Auth {
    bearer: Option<Bearer>,
    signing: Option<Arc<Watched<Vec<Vec<u8>>>>>,
}

/// `Bearer <token>` as a sensitive header value.
fn bearer_header(token: &str) -> Result<HeaderValue, String> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "holds characters an HTTP header cannot carry".to_string())?;
    v.set_sensitive(true);
    Ok(v)
}

fn signing_keys(text: &str) -> Result<Vec<Vec<u8>>, String> {
    webhook_signature::parse_secrets(text)
        .map_err(|e| format!("is not a Standard Webhooks secret: {e}"))
}

fn plain(text: &str) -> Result<String, String> {
    Ok(text.to_string())
}

impl Auth {
    /// No credentials.
    pub fn none() -> Auth {
        Auth::default()
    }

    /// A fixed bearer token (tests and tools).
    pub fn static_token(token: &str) -> Result<Auth, String> {
        Ok(Auth {
            bearer: Some(Bearer::Static(Arc::new(Watched::fixed(
                "api.token_env",
                token,
                bearer_header,
            )?))),
            signing: None,
        })
    }

    /// The credentials `[api]` configures, read now (an error names the field).
    /// Secret files are watched on the current Tokio runtime; `board` shows
    /// the OAuth2 token's state on `/status`.
    pub(crate) fn from_config(
        cfg: &ApiConfig,
        board: Option<Arc<StatusBoard>>,
    ) -> Result<Auth, ConfigError> {
        let bearer = if let Some(o) = &cfg.oauth2 {
            let spec = o.secret_spec()?.ok_or_else(|| {
                crate::config::invalid(
                    "api.oauth2.client_secret_env",
                    "or api.oauth2.client_secret_file must name the client secret",
                )
            })?;
            let secret = Watched::start(&spec, plain)?;
            let source = oauth2::TokenSource::new(
                o,
                secret,
                cfg.request_timeout,
                cfg.connect_timeout,
                board.clone(),
            )?;
            if let Some(b) = &board {
                b.publish_credential(source.snapshot());
            }
            Some(Bearer::OAuth2(Arc::new(source)))
        } else if let Some(spec) = cfg.token_spec()? {
            if let Some(b) = &board {
                b.publish_credential(CredentialSnapshot {
                    kind: match spec {
                        crate::config::SecretSpec::Env { .. } => "token_env".into(),
                        crate::config::SecretSpec::File { .. } => "token_file".into(),
                    },
                    valid_until_ms: None,
                    last_refresh_ms: None,
                    last_error: None,
                });
            }
            Some(Bearer::Static(Watched::start(&spec, bearer_header)?))
        } else {
            None
        };
        let signing = match cfg
            .signing
            .as_ref()
            .map(|s| s.spec())
            .transpose()?
            .flatten()
        {
            Some(spec) => Some(Watched::start(&spec, signing_keys)?),
            None => None,
        };
        Ok(Auth { bearer, signing })
    }

    /// The `Authorization` value for the next request (`None`: none is sent).
    pub(crate) async fn authorization(&self) -> Result<Option<HeaderValue>, AuthFailure> {
        match &self.bearer {
            None => Ok(None),
            Some(Bearer::Static(w)) => Ok(Some((*w.get()).clone())),
            Some(Bearer::OAuth2(t)) => t.bearer().await.map(Some),
        }
    }

    /// The API answered 401 to a request that carried `used`, with
    /// `www_authenticate` (RFC 6750 §3): the different credential to send the
    /// same request once more with (a token file that changed, another OAuth2
    /// token), or `None` (the 401 stands). An OAuth2 token is refreshed at
    /// most once per `api.oauth2.unauthorized_refresh_interval` for 401s.
    pub(crate) async fn unauthorized(
        &self,
        used: &HeaderValue,
        www_authenticate: Option<&HeaderValue>,
    ) -> Option<HeaderValue> {
        match &self.bearer {
            None => None,
            Some(Bearer::Static(w)) => {
                w.reload().await;
                let now = (*w.get()).clone();
                (now != *used).then_some(now)
            }
            Some(Bearer::OAuth2(t)) => {
                let challenge =
                    unauthorized::challenge(www_authenticate.map(HeaderValue::as_bytes));
                t.unauthorized(used, challenge).await
            }
        }
    }

    /// A request that carried `used` was answered 2xx (the OAuth2 token is
    /// accepted: a 401 to another route does not drop it while it is young).
    pub(crate) fn accepted(&self, used: &HeaderValue) {
        if let Some(Bearer::OAuth2(t)) = &self.bearer {
            t.accepted(used);
        }
    }

    /// The Standard Webhooks headers for a request of event `id` with `body`
    /// (`None`: no signing configured): `webhook-id`, `webhook-timestamp`,
    /// `webhook-signature` (one `v1,` signature per configured secret).
    pub(crate) fn signature(&self, id: &str, body: &[u8]) -> Option<[(&'static str, String); 3]> {
        let keys = self.signing.as_ref()?.get();
        let ts = crate::clock::now_ms().div_euclid(1000);
        let sig = webhook_signature::signature(&keys, id, ts, body);
        Some([
            ("webhook-id", id.to_string()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", sig),
        ])
    }

    /// The secrets' texts, for redaction from answers: the current values and
    /// the last ones they replaced (a request sent just before a rotation may
    /// be answered, and echoed, after it) — the static token, the OAuth2
    /// tokens, the signing secrets.
    pub(crate) fn current_secrets(&self) -> Vec<String> {
        let mut out = Vec::new();
        match &self.bearer {
            Some(Bearer::Static(w)) => out.extend(w.texts()),
            Some(Bearer::OAuth2(t)) => out.extend(t.tokens_to_redact()),
            None => {}
        }
        if let Some(s) = &self.signing {
            for text in s.texts() {
                out.extend(text.split_whitespace().map(String::from));
            }
        }
        out
    }
}

/// An error's chain of causes, innermost last, without reqwest's URL.
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push_str(": ");
        out.push_str(&s.to_string());
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 42: only the current credential was redacted from answers'
    /// excerpts; an API echoing a request sent just before a rotation put the
    /// replaced token in the DLQ record.
    #[tokio::test]
    async fn a_rotated_token_stays_in_the_redaction_set() {
        let dir = std::env::temp_dir().join(format!("courier-auth-redact-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("token");
        std::fs::write(&path, "token-old-1111\n").expect("write");
        let cfg = ApiConfig {
            token_file: Some(path.clone()),
            ..ApiConfig::default()
        };
        let auth = Auth::from_config(&cfg, None).expect("auth");
        assert_eq!(auth.current_secrets(), ["token-old-1111"]);
        std::fs::write(&path, "token-new-2222\n").expect("rotate");
        // The file is re-read every second: wait for the new value.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !auth.current_secrets().iter().any(|s| s == "token-new-2222") {
            assert!(
                std::time::Instant::now() < deadline,
                "the rotation was not seen"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let secrets = auth.current_secrets();
        assert!(
            secrets.iter().any(|s| s == "token-old-1111"),
            "the replaced token is no longer redacted: {secrets:?}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
