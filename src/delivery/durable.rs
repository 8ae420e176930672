//! Writes to the DLQ and the parking lot that must become durable: retried
//! until the broker acknowledges or refuses for good, but never past the
//! partition's handover. A write retried after its partition was revoked would
//! outlive it (its bytes no longer in any budget) while the next owner writes
//! the same envelope again: one more envelope per rebalance for one event.
//!
//! # Invariant I14: no write outlives its partition
//!
//!
//! *Enforced in* `src/delivery/durable.rs` (`write_durably`). A DLQ or parking-lot write
//! makes no further try once its partition's token is cancelled (revoke, actor end): the try
//! on the wire is waited for, then the task ends without an outcome (errored; the draining
//! machine does not dispatch it again, the next owner writes the envelope). So a write never
//! outlives its partition and its byte budget.
//!
//! *Tested by:* `src/delivery/tests/durable_writes.rs::a_handover_abandons_a_dlq_write_being_retried` (a
//! fake writer refusing every try; the partition is cancelled: no further try, the task's
//! scope is told). The real-broker test
//! `a_revoke_during_a_dlq_outage_abandons_the_old_owners_writes` showed it on its branch (one
//! envelope per event; before: 2 for each of the 8), but it needed a missing DLQ, which is now
//! refused at start. The outage a real broker holds is `message.timestamp.before.max.ms =
//! 0` on the DLQ (`tests/dlq.rs::dlq_accepts_writes`: every record older than the producer's
//! 5 ms linger is answered INVALID_TIMESTAMP, retried); two such records in one produce batch
//! are both answered INVALID_RECORD, and each is then written alone (I9).

use super::peers::{DlqRecord, DlqWriterMsg, Refusal, WriteError};
use super::token::Cancellation;
use crate::core::backoff::persistent_delay;
use crate::handle::Handle;
use ractor::ActorRef;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a delivery task's writes obey: its partition's cancellation, and
/// where a write that gives up says so (the task then ends without an
/// outcome: errored, and the partition, draining, does not dispatch it again).
#[derive(Clone)]
pub(super) struct WriteScope {
    cancel: Cancellation,
    abandoned: Arc<Abandoned>,
}

impl WriteScope {
    pub(super) fn new(cancel: Cancellation) -> WriteScope {
        WriteScope {
            cancel,
            abandoned: Arc::new(Abandoned::default()),
        }
    }

    /// Set once a write of this task was abandoned.
    pub(super) fn abandoned(&self) -> Arc<Abandoned> {
        self.abandoned.clone()
    }
}

/// Runs `work` in a [`WriteScope`] of `cancel`: `None` if a DLQ or
/// parking-lot write deep in it was abandoned because the partition was
/// handed over between its tries (the work ends then, without an outcome:
/// errored; the next owner writes it).
pub(super) async fn in_scope<T>(cancel: Cancellation, work: impl Future<Output = T>) -> Option<T> {
    let scope = WriteScope::new(cancel);
    let abandoned = scope.abandoned();
    let work = SCOPE.scope(scope, work);
    tokio::select! {
        biased;
        o = work => Some(o),
        () = abandoned.wait() => None,
    }
}

/// "A write of this task was abandoned": a flag and the one task that waits
/// for it (`in_scope`). Lock-free:
/// every delivery waits on it, and a `Notify`'s waiter list took a lock to
/// register and another to leave (2.2 % of a batched run's CPU at L = 0).
#[derive(Default)]
pub(super) struct Abandoned {
    set: std::sync::atomic::AtomicBool,
    waker: atomic_waker::AtomicWaker,
}

impl Abandoned {
    fn set(&self) {
        self.set.store(true, std::sync::atomic::Ordering::SeqCst);
        self.waker.wake();
    }

    fn is_set(&self) -> bool {
        self.set.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Ready once set (at once if it already is).
    pub(super) async fn wait(&self) {
        std::future::poll_fn(|cx| {
            if self.is_set() {
                return std::task::Poll::Ready(());
            }
            self.waker.register(cx.waker());
            // Set between the check and the registration: seen here.
            if self.is_set() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }
}

tokio::task_local! {
    /// The scope of the delivery task running (`Deliverer::run`).
    pub(super) static SCOPE: WriteScope;
}

/// One try of a write to the DLQ or the parking lot: `Ok(offset)` once the
/// broker acknowledged it. The seam between the delivery stages and the DLQ
/// writer actor (a fake in the shell's unit tests); [`write_durably`] retries.
pub(crate) trait DlqWrite: Send + Sync + 'static {
    fn write(&self, rec: &DlqRecord) -> impl Future<Output = Result<i64, WriteError>> + Send;
}

/// The DLQ writer actor, whichever incarnation is current.
impl DlqWrite for Handle<ActorRef<DlqWriterMsg>> {
    async fn write(&self, rec: &DlqRecord) -> Result<i64, WriteError> {
        let Some(writer) = self.current() else {
            return Err(WriteError::Retry("DLQ writer not running".into()));
        };
        let r = writer
            .call(
                |reply| DlqWriterMsg::Write(Box::new(rec.clone()), reply),
                Some(Duration::from_secs(60)),
            )
            .await;
        match r {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            Ok(_) => Err(WriteError::Retry("DLQ writer did not answer".into())),
            Err(e) => Err(WriteError::Retry(format!("DLQ writer unreachable: {e}"))),
        }
    }
}

/// How long a write to a topic the broker says does not exist is retried before
/// it counts as refused (a topic being created, a partition being moved).
const UNKNOWN_TOPIC_GRACE: Duration = Duration::from_secs(120);

/// Writes until the broker acknowledges (`Ok`, with the offset it wrote the
/// record at), or until it refuses the record
/// for good (`Err`: too large, not authorized, invalid, or an unknown topic for
/// longer than [`UNKNOWN_TOPIC_GRACE`]). The event's offset waits for this;
/// shutdown abandons it (the token then reports errored and the offset stays
/// unstored), and so does the partition's handover: once it is cancelled, no
/// further try is made (the try on the wire is waited for), the task's
/// [`WriteScope`] is told and this never returns.
pub(super) async fn write_durably(
    writer: &impl DlqWrite,
    rec: &DlqRecord,
) -> Result<i64, (Refusal, String)> {
    let scope = SCOPE.try_with(WriteScope::clone).ok();
    let mut tries = 0u32;
    let mut unknown_since: Option<Instant> = None;
    loop {
        if tries > 0 {
            if let Some(s) = scope.as_ref().filter(|s| s.cancel.cancelled()) {
                tracing::info!(
                    topic = %rec.topic,
                    id = rec.envelope.event_id.as_deref().unwrap_or("-"),
                    origin_partition = rec.envelope.origin.partition,
                    origin_offset = rec.envelope.origin.offset,
                    tries,
                    "partition handed over: the write is abandoned (the next owner makes it)"
                );
                s.abandoned.set();
                return std::future::pending().await;
            }
        }
        tries += 1;
        let err = match writer.write(rec).await {
            Ok(offset) => return Ok(offset),
            Err(e) => e,
        };
        match &err {
            WriteError::Refused(Refusal::UnknownTopic, detail) => {
                let since = *unknown_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= UNKNOWN_TOPIC_GRACE {
                    return Err((Refusal::UnknownTopic, detail.clone()));
                }
            }
            WriteError::Refused(refusal, detail) => return Err((*refusal, detail.clone())),
            WriteError::Retry(_) => {}
        }
        let delay = persistent_delay(tries, Duration::from_millis(200), Duration::from_secs(5));
        tracing::warn!(
            topic = %rec.topic,
            id = rec.envelope.event_id.as_deref().unwrap_or("-"),
            origin_partition = rec.envelope.origin.partition,
            origin_offset = rec.envelope.origin.offset,
            error = %err,
            tries,
            "write not acknowledged; retrying (the offset waits)"
        );
        // A handover ends the wait at once (checked at the top).
        match &scope {
            Some(s) => {
                tokio::select! {
                    biased;
                    _ = s.cancel.until_cancelled() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            None => tokio::time::sleep(delay).await,
        }
    }
}
