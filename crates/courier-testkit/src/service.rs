//! Talking to a helper service (hydra, the webhook receiver): waiting until it
//! answers (polled, with a deadline, given up early when the process exits) and
//! reading its answers.

use super::{ChildGuard, TestkitError};
use std::time::{Duration, Instant};

/// How often [`wait_ready`] asks.
const POLL: Duration = Duration::from_millis(50);

/// Polls `GET url` until it answers 200. Fails with [`TestkitError::Exited`] as
/// soon as `child` exits, and with [`TestkitError::NotReady`] (the child killed)
/// when `timeout` passes first.
pub(crate) async fn wait_ready(
    child: &mut ChildGuard,
    http: &reqwest::Client,
    url: &str,
    timeout: Duration,
) -> Result<(), TestkitError> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(code) = child.exited() {
            return Err(TestkitError::Exited {
                name: child.name().to_string(),
                code,
                log: child.log().to_path_buf(),
            });
        }
        let answer = http.get(url).timeout(POLL * 20).send().await;
        if answer.is_ok_and(|r| r.status() == reqwest::StatusCode::OK) {
            return Ok(());
        }
        if Instant::now() >= until {
            child.kill().await;
            return Err(TestkitError::NotReady {
                name: child.name().to_string(),
                url: url.to_string(),
                timeout,
                log: child.log().to_path_buf(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

/// At most the first 500 characters of a service's answer, for an error message.
pub(crate) fn excerpt(body: &str) -> String {
    match body.char_indices().nth(500) {
        Some((i, _)) => format!("{}…", &body[..i]),
        None => body.to_string(),
    }
}

/// Reads a JSON answer that must have status `expected`.
pub(crate) async fn json_answer(
    what: &'static str,
    url: &str,
    resp: reqwest::Response,
    expected: u16,
) -> Result<serde_json::Value, TestkitError> {
    let status = resp.status().as_u16();
    let body = resp.text().await.map_err(|source| TestkitError::Http {
        what,
        url: url.to_string(),
        source,
    })?;
    if status != expected {
        return Err(TestkitError::Status {
            what,
            url: url.to_string(),
            status,
            body: excerpt(&body),
        });
    }
    serde_json::from_str(&body).map_err(|e| TestkitError::Answer {
        what,
        reason: format!("not JSON ({e})"),
    })
}
