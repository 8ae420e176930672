//! A group's task: forms batches from the events submitted to its group
//! (up to `max_events` or `max_bytes`, or until the oldest waited `linger`;
//! a run whole) and sends each in a task of its own ([`super::send`]).

use super::{leave_out_stopped, Batcher, Entry, GroupKey};
use crate::core::batch::BatchSpec;
use crate::delivery::http::{Api, Outgoing};
use crate::delivery::token;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// A group with no event for this long ends its task.
const IDLE: Duration = Duration::from_secs(5);

impl<A: Api + Clone> Batcher<A> {
    /// A group's task: forms batches from its submissions and sends each.
    pub(super) async fn form(
        self: Arc<Self>,
        key: GroupKey,
        out: Outgoing,
        spec: Arc<BatchSpec>,
        mut rx: mpsc::UnboundedReceiver<Entry>,
    ) {
        let mut carry: Option<Entry> = None;
        loop {
            let first = match carry.take() {
                Some(s) => s,
                None => match tokio::time::timeout(IDLE, rx.recv()).await {
                    Ok(Some(s)) => s,
                    Ok(None) => return,
                    Err(_) => {
                        let mut groups = self.lock();
                        if rx.is_empty() {
                            groups.remove(&key);
                            return;
                        }
                        continue;
                    }
                },
            };
            // A handover while the batch forms leaves its events out at once
            // (an inline one's token reports errored): a partition's drain
            // waits only for requests already on the wire. One before the
            // registration is seen as each event is taken.
            let handover = token::next_handover();
            tokio::pin!(handover);
            handover.as_mut().enable();
            if first.stopped() {
                continue;
            }
            let deadline = tokio::time::Instant::now() + spec.linger;
            let max = self.max_events(&key, &spec);
            // A run goes whole: alone if it does not fit with others.
            let (mut n, mut len) = first.size();
            let mut batch = Vec::with_capacity(n.max(max.min(64)));
            first.into_batch(&mut batch);
            while n < max && spec.format.overhead(n) + len <= spec.max_bytes {
                let next = tokio::select! {
                    biased;
                    () = &mut handover => {
                        handover.set(token::next_handover());
                        handover.as_mut().enable();
                        leave_out_stopped(&mut batch);
                        n = batch.len();
                        len = batch.iter().map(|s| s.body.len()).sum();
                        continue;
                    }
                    next = tokio::time::timeout_at(deadline, rx.recv()) => next,
                };
                match next {
                    Ok(Some(s)) if s.stopped() => {}
                    Ok(Some(s)) => {
                        let (k, l) = s.size();
                        if n + k > max || spec.format.overhead(n + k) + len + l > spec.max_bytes {
                            carry = Some(s);
                            break;
                        }
                        n += k;
                        len += l;
                        s.into_batch(&mut batch);
                    }
                    Ok(None) | Err(_) => break,
                }
            }
            let this = self.clone();
            let (out, spec, key) = (out.clone(), spec.clone(), key.clone());
            tokio::spawn(async move {
                this.bisect(&key, &out, &spec, batch, false).await;
                #[cfg(test)]
                this.ended.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
    }
}
