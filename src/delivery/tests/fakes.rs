//! The fakes the shell's tests run against: an API whose answers are
//! scripted and which records every request, and a DLQ writer whose answers
//! are scripted per topic and which keeps every record it was asked to write.

use super::super::durable::DlqWrite;
use super::super::http::{Answer, Api, Outgoing, TransportError};
use super::super::peers::{DlqRecord, Refusal, WriteError};
use crate::core::classify::TransportFailure;
use bytes::Bytes;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};

/// One scripted answer of the fake API.
#[derive(Clone, Copy)]
pub(super) enum Reply {
    Status(u16),
    Transport(TransportFailure),
    /// This status, once [`FakeApi::release`] was called (a call still on
    /// the wire).
    Held(u16),
}

/// Answers from a script in order (the last answer repeats); records each
/// request's event id.
#[derive(Clone, Default)]
pub(super) struct FakeApi(Arc<FakeApiState>);

#[derive(Default)]
struct FakeApiState {
    script: Mutex<VecDeque<Reply>>,
    calls: Mutex<Vec<String>>,
    released: Released,
}

/// Held calls wait for a permit; the test adds them.
struct Released(tokio::sync::Semaphore);

impl Default for Released {
    fn default() -> Self {
        Released(tokio::sync::Semaphore::new(0))
    }
}

impl FakeApi {
    pub(super) fn answering(script: &[Reply]) -> FakeApi {
        let api = FakeApi::default();
        api.0.script.lock().unwrap().extend(script.iter().copied());
        api
    }

    pub(super) fn calls(&self) -> usize {
        self.0.calls.lock().unwrap().len()
    }

    /// The event id of each request, in order.
    pub(super) fn called(&self) -> Vec<String> {
        self.0.calls.lock().unwrap().clone()
    }

    /// Lets the held calls answer.
    pub(super) fn release(&self) {
        self.0
            .released
            .0
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }
}

impl Api for FakeApi {
    fn send(
        &self,
        _out: &Outgoing,
        event_id: &str,
        _body: Bytes,
        _redelivery: Option<u32>,
    ) -> impl Future<Output = Result<Answer, TransportError>> + Send {
        self.0.calls.lock().unwrap().push(event_id.to_string());
        let mut script = self.0.script.lock().unwrap();
        let reply = match script.len() {
            0 => Reply::Status(200),
            1 => script[0],
            _ => script.pop_front().unwrap_or(Reply::Status(200)),
        };
        let state = self.0.clone();
        async move {
            let status = |status| {
                Ok(Answer {
                    status,
                    retry_after: None,
                    body: None,
                    full: None,
                    no_result: None,
                    per_item: false,
                })
            };
            match reply {
                Reply::Status(s) => status(s),
                Reply::Transport(kind) => Err(TransportError::new(kind, "scripted")),
                Reply::Held(s) => {
                    // Never closed: the wait ends when the test releases it.
                    let _ = state.released.0.acquire().await;
                    status(s)
                }
            }
        }
    }
}

/// One scripted answer of the fake DLQ writer, per topic.
#[derive(Clone, Copy)]
pub(super) enum WriteReply {
    Ack,
    NotNow,
    Refuse(Refusal),
}

/// Answers each write from its topic's script (the last answer repeats;
/// none: acknowledged) and keeps every record it was asked to write.
#[derive(Clone, Default)]
pub(super) struct FakeDlq(Arc<FakeDlqState>);

#[derive(Default)]
struct FakeDlqState {
    scripts: Mutex<std::collections::HashMap<String, VecDeque<WriteReply>>>,
    asked: Mutex<Vec<(DlqRecord, bool)>>,
}

impl FakeDlq {
    pub(super) fn answering(topic: &str, script: &[WriteReply]) -> FakeDlq {
        let w = FakeDlq::default();
        w.0.scripts
            .lock()
            .unwrap()
            .insert(topic.into(), script.iter().copied().collect());
        w
    }

    /// Every write asked for, and whether it was acknowledged.
    pub(super) fn asked(&self) -> Vec<(DlqRecord, bool)> {
        self.0.asked.lock().unwrap().clone()
    }

    /// The records acknowledged on `topic`.
    pub(super) fn written(&self, topic: &str) -> Vec<DlqRecord> {
        self.asked()
            .into_iter()
            .filter(|(r, ok)| *ok && r.topic == topic)
            .map(|(r, _)| r)
            .collect()
    }
}

impl DlqWrite for FakeDlq {
    fn write(&self, rec: &DlqRecord) -> impl Future<Output = Result<i64, WriteError>> + Send {
        let reply = {
            let mut scripts = self.0.scripts.lock().unwrap();
            match scripts.get_mut(&rec.topic) {
                Some(s) if s.len() > 1 => s.pop_front().unwrap_or(WriteReply::Ack),
                Some(s) => s.front().copied().unwrap_or(WriteReply::Ack),
                None => WriteReply::Ack,
            }
        };
        let mut asked = self.0.asked.lock().unwrap();
        asked.push((rec.clone(), matches!(reply, WriteReply::Ack)));
        let r = match reply {
            WriteReply::Ack => Ok(asked.len() as i64),
            WriteReply::NotNow => Err(WriteError::Retry("scripted: not now".into())),
            WriteReply::Refuse(r) => Err(WriteError::Refused(r, "scripted".into())),
        };
        async move { r }
    }
}
