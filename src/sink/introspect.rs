//! Bearer tokens checked against an OAuth2 server's introspection endpoint
//! (RFC 7662; `Behaviour::introspect_url`), as an API protected by that server
//! would: a token is accepted while the server said it is active and its `exp`
//! has not passed. Each token is asked about once, then its expiry is cached.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub(super) struct Introspector {
    client: reqwest::Client,
    /// Token → its `exp` (Unix seconds); `None`: the server said inactive.
    seen: Mutex<HashMap<String, Option<i64>>>,
}

impl Introspector {
    /// Whether `token` is valid now.
    pub(super) async fn accepts(&self, url: &str, token: &str) -> bool {
        let now = crate::clock::now_ms() / 1000;
        let cached = self
            .seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .copied();
        let exp = match cached {
            Some(exp) => exp,
            None => {
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

    /// The token's `exp` if the server says it is active; `None` otherwise,
    /// and when the server cannot be asked (the API cannot check it either).
    async fn ask(&self, url: &str, token: &str) -> Option<i64> {
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
