//! `/status` and `/status.json`, merged into the metrics listener's router.

use super::{page, Probe, Snapshot, StatusBoard};
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Json};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// What the listener knows at the moment of a request: the time and the
/// results of `/readyz` and `/healthz`.
pub(crate) struct Probes {
    pub now_ms: i64,
    pub ready: Probe,
    pub live: Probe,
}

pub(crate) type ProbeFn = Arc<dyn Fn() -> Probes + Send + Sync>;

#[derive(Clone)]
struct StatusState {
    board: Arc<StatusBoard>,
    probes: ProbeFn,
}

impl StatusState {
    fn snapshot(&self) -> Snapshot {
        let p = (self.probes)();
        self.board.snapshot(p.now_ms, p.ready, p.live)
    }
}

pub(crate) fn routes(board: Arc<StatusBoard>, probes: ProbeFn) -> Router {
    Router::new()
        .route("/status", get(html))
        .route("/status.json", get(json))
        .with_state(StatusState { board, probes })
}

const NO_STORE: (header::HeaderName, &str) = (header::CACHE_CONTROL, "no-store");

async fn html(State(s): State<StatusState>) -> impl IntoResponse {
    ([NO_STORE], Html(page::render(&s.snapshot())))
}

async fn json(State(s): State<StatusState>) -> impl IntoResponse {
    ([NO_STORE], Json(s.snapshot()))
}

/// Samples the error counts into the window every [`super::ERROR_STEP`] until
/// the task is dropped; `now_ms` is the wall clock.
pub(crate) async fn sample_errors(board: Arc<StatusBoard>, now_ms: fn() -> i64) {
    let mut tick = tokio::time::interval(super::ERROR_STEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        board.sample_errors(now_ms());
    }
}
