//! The stand-in's schema registry: `GET /schemas/ids/{id}`, the one read of the
//! Confluent Schema Registry API Courier makes (`input.format = "avro"`), from
//! [`Behaviour::schemas`](super::Behaviour). For the demo, which has no real
//! registry to run; the tests use a real one (Apicurio Registry).

use super::Shared;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use std::sync::Arc;

/// `{"schema": text}` (an Avro schema: no `schemaType`), or the registry's 404.
pub(super) async fn get_schema(
    State(shared): State<Arc<Shared>>,
    Path(id): Path<u32>,
) -> (StatusCode, Json<serde_json::Value>) {
    match shared.behaviour().schemas.get(&id) {
        Some(text) => (StatusCode::OK, Json(serde_json::json!({ "schema": text }))),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({
                "error_code": 40403,
                "message": format!("Schema {id} not found"),
            })),
        ),
    }
}
