//! The token source against a token endpoint on loopback: the lifetime's
//! clamp and the 401s.

use super::*;
use std::sync::atomic::AtomicU64;

/// A token endpoint on loopback answering `tok-<n>` (n from 1) with
/// `expires_in`; the count of its requests.
async fn endpoint(expires_in: u64) -> (String, Arc<AtomicU64>) {
    let count = Arc::new(AtomicU64::new(0));
    let counted = count.clone();
    let app = axum::Router::new().route(
        "/token",
        axum::routing::post(move || {
            let n = counted.fetch_add(1, Ordering::Relaxed) + 1;
            async move {
                axum::Json(serde_json::json!({
                    "access_token": format!("tok-{n}"),
                    "token_type": "Bearer",
                    "expires_in": expires_in,
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/token"), count)
}

fn source(url: &str, interval: Duration) -> Arc<TokenSource> {
    let cfg = OAuth2Config {
        token_url: url.into(),
        client_id: "courier".into(),
        unauthorized_refresh_interval: interval,
        ..OAuth2Config::default()
    };
    let secret = Watched::fixed("api.oauth2.client_secret_env", "s3cret", |t| {
        Ok(t.to_string())
    })
    .expect("secret");
    let t = TokenSource::new(
        &cfg,
        Arc::new(secret),
        Duration::from_secs(5),
        Duration::from_secs(1),
        None,
    )
    .expect("token source");
    Arc::new(t)
}

fn bearer(n: u32) -> HeaderValue {
    HeaderValue::from_str(&format!("Bearer tok-{n}")).expect("header")
}

/// Issue 42: `expires_in` near 2^63 overflowed `Instant + Duration` and
/// panicked the fetch.
#[tokio::test]
async fn an_expires_in_near_2_pow_63_is_used_for_a_day() {
    let (url, count) = endpoint(i64::MAX as u64).await;
    let t = source(&url, Duration::from_secs(10));
    assert_eq!(t.bearer().await, Ok(bearer(1)));
    assert_eq!(t.bearer().await, Ok(bearer(1)), "cached");
    assert_eq!(count.load(Ordering::Relaxed), 1);
    let until = t.snapshot().valid_until_ms.expect("valid until");
    let day = 24 * 3600 * 1000;
    assert!(until > now_ms() && until <= now_ms() + day, "{until}");
}

/// Twenty calls answered 401 at once with the same token: one refresh,
/// each sent again with the new token; a 401 to the new one within the
/// interval is kept (no request), and the old token stays redacted.
#[tokio::test]
async fn concurrent_401s_cause_one_refresh_and_then_a_quiet_time() {
    let (url, count) = endpoint(300).await;
    let t = source(&url, Duration::from_secs(10));
    assert_eq!(t.bearer().await, Ok(bearer(1)));
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move { t.unauthorized(&bearer(1), Challenge::Unknown).await })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.expect("task"), Some(bearer(2)));
    }
    assert_eq!(count.load(Ordering::Relaxed), 2, "one refresh for 20 401s");
    // Other routes deliver with the new token; one route refuses it.
    t.accepted(&bearer(2));
    for challenge in [Challenge::Unknown, Challenge::InvalidToken] {
        assert_eq!(t.unauthorized(&bearer(2), challenge).await, None);
    }
    assert_eq!(count.load(Ordering::Relaxed), 2, "quiet: no request");
    assert_eq!(t.bearer().await, Ok(bearer(2)), "the token was not dropped");
    assert_eq!(t.tokens_to_redact(), ["tok-2", "tok-1"]);
}

/// Issue 54, item 16: what the token endpoint chose reaches the log cut and
/// escaped. Seen failing on 45109fa: its `error` went into the log as sent
/// (a newline, a terminal escape, 100 kB).
#[test]
fn the_endpoints_error_reaches_the_log_cut_and_escaped() {
    let hostile = format!("bad\n\u{1b}[31mforged\u{202e}{}", "x".repeat(100_000));
    let e: RequestTokenError<ExchangeError, StandardErrorResponse<BasicErrorResponseType>> =
        RequestTokenError::ServerResponse(StandardErrorResponse::new(
            BasicErrorResponseType::Extension(hostile.clone()),
            Some(hostile.clone()),
            None,
        ));
    let d = describe(&e, 400);
    assert!(d.len() < 700, "{} bytes", d.len());
    assert!(
        !d.contains('\n') && !d.contains('\u{1b}') && !d.contains('\u{202e}'),
        "{d}"
    );
    assert!(d.contains("error=bad\\n\\u{1b}[31mforged\\u{202e}x"), "{d}");
    let e: RequestTokenError<ExchangeError, StandardErrorResponse<BasicErrorResponseType>> =
        RequestTokenError::Other(hostile);
    let d = describe(&e, 400);
    assert!(d.len() < 400 && !d.contains('\n'), "{d}");
}
