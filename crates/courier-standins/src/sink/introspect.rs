//! Bearer tokens checked against an OAuth2 server's introspection endpoint
//! (RFC 7662; `Behaviour::introspect_url`), as an API protected by that server
//! would: a token is accepted while the server said it is active and its `exp`
//! has not passed. Each token is asked about once, then its expiry is cached.
//!
//! The stand-in sends the tokens it receives nowhere but this machine: anyone
//! who can reach `PUT /behaviour` can set `introspect_url`, so only an
//! `http(s)://` URL whose host is a loopback IP address (127.0.0.0/8, ::1) is
//! asked — not a name (`localhost` included: a resolver decides where a name
//! goes) — and a redirect is not followed. Any other URL refuses every token
//! (401), with a warning, without sending it.

use std::collections::HashMap;
use std::sync::Mutex;

pub(super) struct Introspector {
    client: reqwest::Client,
    /// Token → its `exp` (Unix seconds); `None`: the server said inactive.
    seen: Mutex<HashMap<String, Option<i64>>>,
    /// The last refused URL warned about (once per URL in a row).
    refused: Mutex<Option<String>>,
}

impl Default for Introspector {
    fn default() -> Self {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Introspector {
            client,
            seen: Mutex::default(),
            refused: Mutex::default(),
        }
    }
}

/// `url` if a bearer token may be sent there: `http://` or `https://` to a
/// loopback IP address; else why not.
pub(super) fn loopback_only(url: &str) -> Result<reqwest::Url, String> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("not a URL: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("scheme {} (http or https only)", u.scheme()));
    }
    // An IP host is written in its canonical form (IPv6 in brackets).
    let host = u.host_str().unwrap_or("");
    let ip = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let loopback = ip
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(format!(
            "host {} is not a loopback IP address (127.0.0.1, ::1): the stand-in \
             sends the tokens it receives nowhere else",
            u.host_str().unwrap_or("(none)")
        ));
    }
    Ok(u)
}

impl Introspector {
    /// Whether `token` is valid now.
    pub(super) async fn accepts(&self, url: &str, token: &str) -> bool {
        let now = super::now_ms() / 1000;
        let cached = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .copied();
        let exp = match cached {
            Some(exp) => exp,
            None => {
                let url = match loopback_only(url) {
                    Ok(u) => u,
                    Err(why) => {
                        self.warn_refused(url, &why);
                        return false;
                    }
                };
                let exp = self.ask(url, token).await;
                let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                if seen.len() > 10_000 {
                    seen.clear();
                }
                seen.insert(token.to_string(), exp);
                exp
            }
        };
        exp.is_some_and(|exp| now < exp)
    }

    fn warn_refused(&self, url: &str, why: &str) {
        let mut last = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() != Some(url) {
            tracing::warn!(%url, %why, "sink: introspect_url refused: every token is answered 401");
            *last = Some(url.to_string());
        }
    }

    /// The token's `exp` if the server says it is active; `None` otherwise,
    /// and when the server cannot be asked (the API cannot check it either)
    /// or answers anything but a 2xx (a redirect included).
    async fn ask(&self, url: reqwest::Url, token: &str) -> Option<i64> {
        let body: String = token
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let resp = self
            .client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={body}"))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        let v: serde_json::Value = serde_json::from_slice(&resp.bytes().await.ok()?).ok()?;
        if v.get("active").and_then(serde_json::Value::as_bool) != Some(true) {
            return None;
        }
        Some(
            v.get("exp")
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(i64::MAX),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn only_a_loopback_ip_address_is_asked() {
        for ok in [
            "http://127.0.0.1:4445/admin/oauth2/introspect",
            "https://127.0.0.1/introspect",
            "http://127.8.9.10:1/x",
            "http://[::1]:4445/introspect",
        ] {
            assert!(loopback_only(ok).is_ok(), "{ok}");
        }
        for refused in [
            "http://10.0.0.1/introspect",
            "http://attacker.example.com/introspect",
            "http://localhost:4445/introspect",
            "http://127.0.0.1.nip.io/introspect",
            "http://[::ffff:10.0.0.1]/introspect",
            "http://0.0.0.0:4445/introspect",
            "ftp://127.0.0.1/introspect",
            "file:///etc/passwd",
            "not a url",
        ] {
            let e = loopback_only(refused).expect_err(refused);
            assert!(!e.is_empty(), "{refused}");
        }
    }

    /// An introspection endpoint on loopback that redirects elsewhere: the
    /// token is not sent on (before: reqwest's default followed up to 10
    /// redirects, each carrying the token).
    #[tokio::test]
    async fn a_redirect_is_not_followed_and_a_refused_url_is_never_asked() {
        use axum::routing::post;
        let hits = Arc::new(AtomicU64::new(0));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let counted = hits.clone();
        let app = axum::Router::new()
            .route(
                "/introspect",
                post(|| async {
                    (
                        axum::http::StatusCode::TEMPORARY_REDIRECT,
                        [("location", "/elsewhere")],
                    )
                }),
            )
            .route(
                "/elsewhere",
                post(move || {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::Relaxed);
                        axum::Json(serde_json::json!({"active": true}))
                    }
                }),
            );
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let i = Introspector::default();
        // The endpoint itself answers active: accepted (the test's control).
        assert!(
            i.accepts(&format!("http://{addr}/elsewhere"), "t-control")
                .await
        );
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        assert!(
            !i.accepts(&format!("http://{addr}/introspect"), "t-redirected")
                .await,
            "a redirect is no answer"
        );
        assert_eq!(hits.load(Ordering::Relaxed), 1, "the redirect was followed");
        // The same server by a name: refused without asking.
        assert!(
            !i.accepts(
                &format!("http://localhost:{}/elsewhere", addr.port()),
                "t-named"
            )
            .await
        );
        assert_eq!(hits.load(Ordering::Relaxed), 1, "a named host was asked");
        server.abort();
    }
}
