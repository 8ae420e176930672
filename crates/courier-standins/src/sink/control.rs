//! The control routes a test or a drill drives: `GET /audit`,
//! `GET /audit/delivered`, `GET|PUT /behaviour`, `POST /reset`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::book::{write, Shared, MAX_EXPECT};
use super::deliver::valid_status;
use super::{Audit, Behaviour, DeliveredCount};

pub(super) async fn get_audit(State(shared): State<Arc<Shared>>) -> Json<Audit> {
    Json(shared.audit())
}

pub(super) async fn get_delivered(State(shared): State<Arc<Shared>>) -> Json<DeliveredCount> {
    Json(shared.delivered())
}

pub(super) async fn get_behaviour(State(shared): State<Arc<Shared>>) -> Json<Behaviour> {
    Json(shared.behaviour().redacted())
}

/// Accepts any content type: drills drive this with `curl -d`.
pub(super) async fn put_behaviour(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let behaviour: Behaviour = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(err) => {
            return (
                StatusCode::BAD_REQUEST,
                format!("invalid behaviour: {err}\n"),
            )
                .into_response()
        }
    };
    let statuses = behaviour
        .down_status
        .into_iter()
        .chain([behaviour.fail_status])
        .chain(behaviour.fail_ids.values().map(|rule| rule.status))
        .chain(behaviour.fail_keys.values().map(|rule| rule.status));
    for status in statuses {
        if !valid_status(status) {
            return (
                StatusCode::UNPROCESSABLE_ENTITY,
                format!("status {status} is not a final HTTP status (200..=599)\n"),
            )
                .into_response();
        }
    }
    let shown = behaviour.redacted();
    *write(&shared.behaviour) = Arc::new(behaviour);
    Json(shown).into_response()
}

/// `POST /reset`'s query.
#[derive(Debug, Deserialize)]
pub(super) struct ResetQuery {
    /// Events to reserve room for in the books.
    #[serde(default)]
    expect: usize,
}

pub(super) async fn post_reset(
    State(shared): State<Arc<Shared>>,
    query: Result<axum::extract::Query<ResetQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let expect = match query {
        Ok(q) if q.expect <= MAX_EXPECT => q.expect,
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                format!("expect must be a number of events up to {MAX_EXPECT}\n"),
            )
                .into_response()
        }
    };
    shared.reset(expect);
    StatusCode::NO_CONTENT.into_response()
}
