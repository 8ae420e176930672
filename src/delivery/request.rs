//! Stage 2, the request: what an event's call carries — the route chosen
//! for it when it was decoded (URL, method, headers, body = event or data), the Content-Type of
//! its input format, the enrichment, the Kafka headers `api.forward_headers`
//! names and its trace context — or why it cannot be sent.

use super::enrich::{EnrichError, Enricher};
use super::http::Outgoing;
use crate::config::OnMissing;
use crate::core::batch::BatchSpec;
use crate::core::classify::{FailureReason, TransportFailure};
use crate::core::event::Event;
use crate::core::input::{BodyType, Header};
use crate::core::mapping::{Attributes, BodyMode, RouteIndex, Routes};
use crate::core::trace;
use crate::runtime::Pipeline;
use bytes::Bytes;
use reqwest::header::HeaderValue;
use std::sync::Arc;

/// What an event's request turned out to be.
pub(super) enum Body {
    Send {
        body: Bytes,
        out: Outgoing,
    },
    /// The event cannot be sent (no enrichment row and the config says park, or
    /// the body cannot be built): parked with this reason, never retried.
    Park {
        reason: FailureReason,
        message: String,
    },
}

/// Where an event's request is built from: its record (or, on a DLQ round,
/// the origin record the envelope carries).
pub(super) struct Source<'a> {
    pub(super) headers: Option<&'a [Header]>,
    /// The entity key (enrichment, `{key}`).
    pub(super) key: Option<&'a [u8]>,
    pub(super) body_type: BodyType,
    pub(super) payload: Option<&'a Bytes>,
    /// The route chosen when it was decoded (`core::mapping::Routes::choose`;
    /// none: `api.url`).
    pub(super) route: Option<RouteIndex>,
}

impl<'a> Source<'a> {
    /// An event's own record.
    pub(super) fn of(item: &'a super::Item) -> Source<'a> {
        Source {
            headers: item.headers.as_deref(),
            key: item.entity_key(),
            body_type: item.body_type,
            payload: item.payload.as_ref(),
            route: item.target.route,
        }
    }
}

/// Stage 2's parts: what an event's request is built from.
pub(super) struct Builder {
    /// `[[api.routes]]`, parsed.
    pub(super) routes: Routes,
    /// `[api.batch]`: the batching of events no route matches.
    pub(super) batch: Option<Arc<BatchSpec>>,
    /// `api.forward_headers`.
    forward_headers: Vec<String>,
    enricher: Option<Arc<Enricher>>,
    pipeline: Arc<Pipeline>,
}

impl Builder {
    pub(super) fn new(
        routes: Routes,
        batch: Option<Arc<BatchSpec>>,
        enricher: Option<Arc<Enricher>>,
        pipeline: Arc<Pipeline>,
    ) -> Builder {
        Builder {
            routes,
            batch,
            forward_headers: pipeline.config.api.forward_headers.clone(),
            enricher,
            pipeline,
        }
    }

    /// The request for an event: the route its type matches (URL, method,
    /// headers, body = event or data), the Content-Type of its input format,
    /// the Kafka headers `api.forward_headers` names and its trace context.
    pub(super) async fn request(&self, src: &Source<'_>, ev: &Event) -> Result<Body, EnrichError> {
        let route = src.route.and_then(|i| self.routes.get(i));
        let mut out = Outgoing {
            content_type: Some(src.body_type.content_type().into()),
            batch: route.map_or_else(|| self.batch.clone(), |r| r.batch.clone()),
            ..Outgoing::default()
        };
        // Whether the body is a JSON text already: the event as decoded (its
        // whole text validated) or Courier's rendering of it; its data member
        // may be anything.
        let mut known_json = true;
        let body = match route {
            Some(r) if r.body == BodyMode::Data => match data_of(src, ev) {
                Some((data, ct)) => {
                    out.content_type = Some(ct);
                    known_json = false;
                    data
                }
                None => {
                    return Ok(Body::Park {
                        reason: FailureReason::BodyUnbuildable,
                        message: "the event's data_base64 is not base64".into(),
                    })
                }
            },
            _ => match self.body(src.key, ev).await? {
                Body::Send { body, .. } => body,
                park => return Ok(park),
            },
        };
        if let Some(r) = route {
            let key = src.key.map(String::from_utf8_lossy).unwrap_or_default();
            let attrs = Attributes {
                event_type: &ev.event_type,
                subject: ev.subject.as_deref().unwrap_or(""),
                id: &ev.id,
                key: &key,
            };
            // A value that would change the route's path (`..`, `.`, empty
            // segment) parks the event: the request is never sent.
            match r.url.render_url(&attrs) {
                Ok(url) => out.url = Some(url),
                Err(e) => {
                    return Ok(Body::Park {
                        reason: FailureReason::Transport(TransportFailure::Request),
                        message: e.to_string(),
                    })
                }
            }
            out.method = r.method;
            for (name, t) in &r.headers {
                out.headers
                    .push((name.clone(), Bytes::from(t.render(&attrs, false))));
            }
        }
        let headers = src.headers.unwrap_or_default();
        for name in &self.forward_headers {
            let value = headers
                .iter()
                .rev()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .and_then(|(_, v)| v.clone());
            // A value HTTP cannot carry is left out, not the event's failure.
            if let Some(v) = value.filter(|v| HeaderValue::from_bytes(v).is_ok()) {
                out.headers.push((name.clone(), v));
            }
        }
        // A body a batch cannot hold (not JSON) is sent alone, as itself —
        // or parked on a route with per-item results, where only a result
        // proves an event done; for ndjson, one line for every line reader.
        let mut body = body;
        if let Some(spec) = &out.batch {
            use crate::core::batch::Placement;
            match crate::core::batch::place(spec, &body, known_json) {
                Placement::Alone => out.batch = None,
                Placement::Refused => {
                    return Ok(Body::Park {
                        reason: FailureReason::BodyUnbuildable,
                        message: "the event's body is not JSON, and its route has per-item results (api.batch.results): only its result in a batch answer proves it delivered, and a batch holds JSON only".into(),
                    })
                }
                Placement::Item(std::borrow::Cow::Owned(line)) => body = Bytes::from(line),
                Placement::Item(std::borrow::Cow::Borrowed(_)) => {}
            }
        }
        if out.batch.is_some() {
            // A batch carries no per-event trace context: none to look for.
            return Ok(Body::Send { body, out });
        }
        // With OTLP on, the API's parent is Courier's delivery span (itself a
        // child of the event's context); otherwise the event's context as it is.
        let exported = crate::otel::enabled()
            .then(|| crate::otel::headers_of(&tracing::Span::current()))
            .flatten();
        if let Some(tc) = exported.or_else(|| trace::extract(&ev.raw, src.headers)) {
            out.headers
                .push(("traceparent".into(), Bytes::from(tc.traceparent)));
            if let Some(ts) = tc.tracestate {
                out.headers.push(("tracestate".into(), Bytes::from(ts)));
            }
        }
        Ok(Body::Send { body, out })
    }

    /// The body to POST: the original bytes, or the event with its enrichment
    /// (looked up by the entity `key`).
    pub(super) async fn body(&self, key: Option<&[u8]>, ev: &Event) -> Result<Body, EnrichError> {
        let send = |body: Bytes| Body::Send {
            body,
            out: Outgoing::default(),
        };
        let (Some(enricher), Some(key)) = (&self.enricher, key) else {
            return Ok(send(ev.raw.clone()));
        };
        let cfg = &self.pipeline.config.enrichment;
        let key = String::from_utf8_lossy(key);
        // Boxed: the lookup (moka + deadpool + tokio-postgres) is a large future,
        // and unboxed it would size every delivery's state machine, enrichment or not.
        match Box::pin(enricher.lookup(&key)).await? {
            Some(doc) => Ok(
                match crate::core::event::with_attribute(&ev.raw, &cfg.field, &doc) {
                    Ok(body) => send(body),
                    Err(e) => Body::Park {
                        reason: FailureReason::BodyUnbuildable,
                        message: e.to_string(),
                    },
                },
            ),
            None => Ok(match cfg.on_missing {
                OnMissing::Deliver => send(ev.raw.clone()),
                OnMissing::Park => Body::Park {
                    reason: FailureReason::EnrichmentMissing,
                    message: "no enrichment row for the event's key".into(),
                },
            }),
        }
    }
}

/// An event's data, for `body = "data"`, with its Content-Type: a binary-mode
/// event's record value (its `content-type` header), or a structured event's
/// `data` member (JSON) or `data_base64` bytes. `None`: not base64.
fn data_of(src: &Source<'_>, ev: &Event) -> Option<(Bytes, std::borrow::Cow<'static, str>)> {
    let headers = src.headers.unwrap_or_default();
    let header = |name: &str| {
        headers
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    if header("ce_specversion").is_some() {
        let ct = header("content-type")
            .flatten()
            .and_then(|v| String::from_utf8(v.to_vec()).ok())
            .filter(|v| HeaderValue::from_str(v).is_ok())
            .map_or("application/octet-stream".into(), Into::into);
        return Some((src.payload.cloned().unwrap_or_default(), ct));
    }
    let (data, json) = crate::core::mapping::structured_data(&ev.raw)?;
    let ct = if json {
        "application/json"
    } else {
        "application/octet-stream"
    };
    Some((Bytes::from(data), ct.into()))
}
