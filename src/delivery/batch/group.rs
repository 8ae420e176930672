//! What a batch is formed of and by: the entries a group's task receives,
//! the key events must share to share a request, and a group's state.

use super::Submission;
use crate::core::batch::BatchSpec;
use crate::core::mapping::Method;
use crate::delivery::http::Outgoing;
use bytes::Bytes;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// What a group's task receives: an event, or an ordered run, which joins
/// one batch whole and in order (`delivery::ordered`).
pub(in crate::delivery) enum Entry {
    One(Submission),
    Run(Vec<Submission>),
}

impl Entry {
    /// Events, and the bytes of their bodies.
    pub(super) fn size(&self) -> (usize, usize) {
        match self {
            Entry::One(s) => (1, s.body.len()),
            Entry::Run(run) => (run.len(), run.iter().map(|s| s.body.len()).sum()),
        }
    }

    /// An event that stopped waiting before it joined a batch (a run's
    /// task watches for itself; its batch checks before it leaves).
    pub(super) fn stopped(&self) -> bool {
        match self {
            Entry::One(s) => s.reply.stopped(),
            Entry::Run(_) => false,
        }
    }

    pub(super) fn into_batch(self, batch: &mut Vec<Submission>) {
        match self {
            Entry::One(s) => batch.push(s),
            Entry::Run(run) => batch.extend(run),
        }
    }
}

/// What events must share to share a request.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct GroupKey {
    pub(super) url: Option<String>,
    pub(super) method: Method,
    pub(super) content_type: Option<std::borrow::Cow<'static, str>>,
    pub(super) headers: Vec<(String, Bytes)>,
    /// The route's batch settings (by identity: one `Arc` per route).
    pub(super) spec: usize,
    pub(super) redelivery: bool,
}

impl GroupKey {
    pub(super) fn of(out: &Outgoing, spec: &Arc<BatchSpec>, redelivery: bool) -> GroupKey {
        // A batch carries no per-event trace context.
        let headers: Vec<(String, Bytes)> = out
            .headers
            .iter()
            .filter(|(n, _)| {
                !n.eq_ignore_ascii_case("traceparent") && !n.eq_ignore_ascii_case("tracestate")
            })
            .cloned()
            .collect();
        GroupKey {
            url: out.url.clone(),
            method: out.method,
            // A `Cow`: the usual Content-Type is static, and cloning it
            // allocates nothing (a key is made per event).
            content_type: out.content_type.clone(),
            headers,
            spec: Arc::as_ptr(spec) as usize,
            redelivery,
        }
    }
}

pub(super) struct Group {
    pub(super) tx: mpsc::UnboundedSender<Entry>,
    /// After a 413: batches hold at most this many events until the instant.
    pub(super) shrunk: Option<(usize, Instant)>,
}
