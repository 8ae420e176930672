//! The webhook receiver verifies with the Standard Webhooks reference library:
//! a request signed here by hand (HMAC-SHA256 with RustCrypto, independent of
//! Courier's signer) is accepted with the right secret, refused with a wrong one,
//! and accepted during a rotation when two signatures are sent and the receiver
//! accepts only one of the secrets. Runs when `COURIER_TEST_PYTHON` names the
//! Python of `scripts/pytools.sh`'s venv; skipped otherwise.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use courier_testkit::webhooks::Receiver;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

/// Two secrets, as a provider would issue them (`whsec_` + base64 of 24 bytes).
const OLD: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const NEW: &str = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";

/// The venv's python, or `None` (the test says it is skipped).
fn python() -> Option<PathBuf> {
    match std::env::var_os("COURIER_TEST_PYTHON") {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => {
            println!("COURIER_TEST_PYTHON is not set (bash scripts/pytools.sh prints it): skipped");
            None
        }
    }
}

/// `v1,<base64 HMAC-SHA256 of "{id}.{ts}.{body}">` with the key after `whsec_`.
fn signature(secret: &str, id: &str, ts: u64, body: &[u8]) -> String {
    let key = B64
        .decode(secret.strip_prefix("whsec_").expect("a whsec_ secret"))
        .expect("base64 after whsec_");
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// POSTs `body` with the Standard Webhooks headers; the status.
async fn send(http: &reqwest::Client, url: &str, id: &str, ts: u64, sig: &str, body: &[u8]) -> u16 {
    http.post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sig)
        .body(body.to_vec())
        .send()
        .await
        .expect("the receiver answers")
        .status()
        .as_u16()
}

#[tokio::test]
async fn hand_signed_requests_are_verified_by_the_reference_library() {
    let Some(python) = python() else { return };
    let dir = std::env::temp_dir().join(format!("courier-testkit-webhooks-{}", std::process::id()));
    let receiver = Receiver::start(&python, &dir, &[OLD])
        .await
        .expect("the receiver starts");
    let http = reqwest::Client::new();
    let url = format!("{}events", receiver.url());
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs();
    let body = br#"{"order":42,"note":"caf\u00e9 \u2603"}"#;

    // The right secret.
    let sig = signature(OLD, "evt-1", ts, body);
    assert_eq!(send(&http, &url, "evt-1", ts, &sig, body).await, 200);
    // The same request again: counted twice under its id.
    assert_eq!(send(&http, &url, "evt-1", ts, &sig, body).await, 200);
    // A wrong secret, a changed body, a changed id: refused.
    let wrong = signature(NEW, "evt-2", ts, body);
    assert_eq!(send(&http, &url, "evt-2", ts, &wrong, body).await, 401);
    assert_eq!(send(&http, &url, "evt-2", ts, &sig, body).await, 401);
    assert_eq!(send(&http, &url, "evt-1", ts, &sig, b"{}").await, 401);

    // Rotation: the sender signs with both; the receiver moves to the new one.
    receiver.set_secrets(&[NEW]).await.expect("secrets set");
    let both = format!(
        "{} {}",
        signature(OLD, "evt-3", ts, body),
        signature(NEW, "evt-3", ts, body)
    );
    assert_eq!(send(&http, &url, "evt-3", ts, &both, body).await, 200);
    let only_old = signature(OLD, "evt-4", ts, body);
    assert_eq!(send(&http, &url, "evt-4", ts, &only_old, body).await, 401);
    // The receiver accepting both: either signature alone passes.
    receiver
        .set_secrets(&[OLD, NEW])
        .await
        .expect("secrets set");
    assert_eq!(send(&http, &url, "evt-4", ts, &only_old, body).await, 200);

    // A malformed secret is refused without being echoed.
    let e = receiver
        .set_secrets(&["whsec_%%%"])
        .await
        .expect_err("refused");
    assert!(!e.to_string().contains("%%%"), "{e}");

    let stats = receiver.stats().await.expect("stats");
    assert_eq!((stats.verified, stats.rejected), (4, 4), "{stats:?}");
    assert_eq!(stats.ids.get("evt-1"), Some(&2));
    assert_eq!(stats.ids.get("evt-3"), Some(&1));
    assert_eq!(stats.ids.get("evt-4"), Some(&1));
    assert_eq!(stats.rejections.len(), 4);
    assert!(
        stats.rejections[0].contains("No matching signature"),
        "{:?}",
        stats.rejections
    );
    let _ = std::fs::remove_dir_all(&dir);
}
