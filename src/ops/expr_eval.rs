//! `courier expr eval --config FILE --event FILE`: what the configuration's
//! expressions say of one event, offline (no broker, no API): each filter's
//! answer, the route chosen, and the request it would send (method, URL,
//! headers, body: `event` or `data`). Pure but for the files the binary
//! reads: the event is decoded as the main topic's records are (CloudEvents
//! or `json` input; registry formats need their schema and are refused).

use crate::config::{Config, ConfigError};
use crate::core::expr::{Facts, Scope};
use crate::core::input::{decode_record, BodyType, RecordIn};
use crate::core::mapping::{Attributes, BodyMode};
use std::fmt::Write as _;

#[derive(Debug, thiserror::Error)]
pub enum ExprEvalError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("the event cannot be read as input.format = \"{format}\" reads it: {reason}")]
    Event { format: String, reason: String },
}

/// What `explain` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    /// One line per filter, the route, the request.
    pub text: String,
    /// An expression failed: the event would be parked `expression_failed`.
    pub failed: bool,
}

/// The report for one event (`key`: the record's Kafka key).
pub fn explain(
    config: &Config,
    event: &[u8],
    key: Option<&[u8]>,
) -> Result<Explained, ExprEvalError> {
    let mut out = String::new();
    let failed = report(config, event, key, &mut out)?;
    Ok(Explained { text: out, failed })
}

/// Writes the report to `out`; `true`: an expression failed.
fn report(
    config: &Config,
    event: &[u8],
    key: Option<&[u8]>,
    out: &mut String,
) -> Result<bool, ExprEvalError> {
    let routes = config.api.routes()?;
    let filters = config.filters()?;
    let value = bytes::Bytes::copy_from_slice(event);
    let rec = RecordIn {
        value: Some(&value),
        headers: &[],
        topic: &config.kafka.topic,
        partition: 0,
        offset: 0,
    };
    let format = config.input.format;
    let decoded = decode_record(
        &rec,
        format,
        &config.input.json(),
        &config.pipeline.decode_options(),
    )
    .map_err(|e| ExprEvalError::Event {
        format: format.name().into(),
        reason: e.to_string(),
    })?;
    let ev = &decoded.event;
    let entity = decoded.key.as_deref().or(key);
    let facts =
        Facts::of(ev, decoded.body_type).with_record(entity, key, &[], &config.kafka.topic, 0, 0);
    let mut scope = Scope::new(facts, filters.needs().union(routes.needs()));
    let _ = writeln!(out, "event: id={} type={}", ev.id, ev.event_type);
    if filters.is_empty() {
        let _ = writeln!(out, "filters: none");
    }
    let mut dropped = None;
    for f in filters.iter() {
        let says = match scope.eval_bool(&f.drop) {
            Ok(true) if f.dry_run => "true: would drop (dry run: delivered all the same)".into(),
            Ok(true) => "true: drops it".to_string(),
            Ok(false) => "false: keeps it".into(),
            Err(e) if f.dry_run => format!("fails: {e} (dry run: delivered all the same)"),
            Err(e) => format!("fails: {e} (the event is parked expression_failed)"),
        };
        let _ = writeln!(out, "filter {}: {says}", f.name);
        if dropped.is_none() && !f.dry_run && says.starts_with("true") {
            dropped = Some(f.name.clone());
        }
        if says.starts_with("fails") && !f.dry_run && dropped.is_none() {
            dropped = Some(String::new());
        }
    }
    match dropped.as_deref() {
        Some("") => {
            let _ = writeln!(out, "verdict: parked expression_failed (a filter failed)");
            return Ok(true);
        }
        Some(name) => {
            let _ = writeln!(
                out,
                "verdict: dropped by filter {name} (not delivered, committed)"
            );
            return Ok(false);
        }
        None => {}
    }
    let route = match routes.choose(&ev.event_type, Some(&mut scope)) {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(out, "route: {e}");
            let _ = writeln!(out, "verdict: parked expression_failed");
            return Ok(true);
        }
    };
    let route = route.and_then(|i| routes.get(i));
    let key_text = entity.map(String::from_utf8_lossy).unwrap_or_default();
    let attrs = Attributes {
        event_type: &ev.event_type,
        subject: ev.subject.as_deref().unwrap_or(""),
        id: &ev.id,
        key: &key_text,
    };
    let (method, url, headers, body_mode) = match route {
        Some(r) => {
            let _ = writeln!(out, "route: {} (type {:?})", r.name, r.types);
            let url = r.url.render_url(&attrs).map_err(|e| e.to_string());
            let headers: Vec<(String, String)> = r
                .headers
                .iter()
                .map(|(n, t)| (n.clone(), t.render(&attrs, false)))
                .collect();
            (r.method, url, headers, r.body)
        }
        None => {
            let _ = writeln!(out, "route: none (api.url)");
            (
                crate::core::mapping::Method::Post,
                Ok(config.api.url.clone()),
                Vec::new(),
                BodyMode::Event,
            )
        }
    };
    let url = match url {
        Ok(u) => u,
        Err(e) => {
            let _ = writeln!(out, "verdict: parked request_unbuildable: {e}");
            return Ok(false);
        }
    };
    let _ = writeln!(out, "request: {method:?} {url}");
    for (n, v) in config.api.headers.iter() {
        let _ = writeln!(out, "header: {n}: {v}");
    }
    for (n, v) in &headers {
        let _ = writeln!(out, "header: {n}: {v}");
    }
    let (content_type, body) = match body_mode {
        BodyMode::Data => match crate::core::mapping::structured_data(&ev.raw) {
            Some((data, true)) => (
                "application/json",
                String::from_utf8_lossy(&data).into_owned(),
            ),
            Some((data, false)) => (
                "application/octet-stream",
                format!("({} bytes of data_base64)", data.len()),
            ),
            None => {
                let _ = writeln!(
                    out,
                    "verdict: parked body_unbuildable (data_base64 is not base64)"
                );
                return Ok(false);
            }
        },
        BodyMode::Event => (
            decoded_content_type(decoded.body_type),
            String::from_utf8_lossy(&ev.raw).into_owned(),
        ),
    };
    let _ = writeln!(out, "header: Content-Type: {content_type}");
    let _ = writeln!(out, "header: Idempotency-Key: {}", ev.id);
    let _ = writeln!(out, "body:\n{body}");
    if config.enrichment.enabled {
        let _ = writeln!(
            out,
            "(the body is shown before enrichment: [enrichment] is on)"
        );
    }
    Ok(false)
}

fn decoded_content_type(b: BodyType) -> &'static str {
    b.content_type()
}
