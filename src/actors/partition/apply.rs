//! The effect interpreter: feeds an input to the machine and carries out the
//! effects it decides (pause/resume and stores on the group consumer, jobs to
//! the delivery pool, timers, metrics and readiness counts); an effect that
//! failed goes back in as an input.

use super::Polled;
use super::{observe, PartitionMsg, PartitionState, Src};
use crate::actors::delivery_pool::DeliveryMsg;
use crate::core::partition::{Commit, Effect, Input, Note, Now, Timer};
use crate::delivery::token::CompletionToken;
use crate::delivery::{Item, Job, Queued, Work};
use crate::kafka::seams::CommitAt;
use crate::runtime::now_ms;
use ractor::ActorRef;
use std::time::Instant;

impl PartitionState {
    /// Feeds one input to the machine and carries out its effects; an effect that
    /// failed goes back in as an input.
    pub(super) fn run(&mut self, myself: &ActorRef<PartitionMsg>, input: Input<Polled>) {
        let mut inputs = vec![input];
        while let Some(input) = inputs.pop() {
            let now = Now {
                mono: Instant::now(),
                wall_ms: now_ms(),
            };
            for effect in self.machine.handle(input, now) {
                inputs.extend(self.apply(myself, effect));
            }
        }
        self.gauges.row.set_progress(
            self.a.shared.stored(Src::Main),
            self.a.shared.held(),
            self.machine.in_flight(),
        );
        let (gauges, partition) = (&mut self.gauges, self.a.partition);
        let pipeline = &self.a.pipeline;
        self.machine.each_held_out(|d, n| {
            gauges.held_out(partition, d.index(), &pipeline.destination(d).name, n);
        });
    }

    /// A job per event of `run`, each with its completion token.
    fn jobs(&self, src: Src, run: Vec<(i64, std::sync::Arc<Item>)>) -> Vec<Job> {
        run.into_iter()
            .map(|(offset, item)| Job {
                item,
                token: CompletionToken::new(self.inbox.clone(), self.a.generation, src, offset),
            })
            .collect()
    }

    fn apply(&mut self, myself: &ActorRef<PartitionMsg>, e: Effect<Item>) -> Option<Input<Polled>> {
        let partition = self.a.partition;
        match e {
            Effect::Dispatch { src, offset, item } => {
                let token =
                    CompletionToken::new(self.inbox.clone(), self.a.generation, src, offset);
                self.send(Job { item, token });
            }
            Effect::Divert { src, run, why } => {
                let jobs = self.jobs(src, run);
                // Dropped when the pool is gone: the tokens report errored,
                // and the machine diverts them again after a back-off.
                if let Some(pool) = self.a.delivery.pool.current() {
                    let _ = pool.send_message(DeliveryMsg::Divert(jobs, why));
                }
            }
            Effect::DispatchRun { src, run } => {
                let jobs = self.jobs(src, run);
                self.enqueue(Queued::Run(jobs));
            }
            Effect::SetReading { src, on } => {
                let topic = self.decoder.topic(src);
                let Some(io) = self.a.io.as_ref() else {
                    return None; // Stopped.
                };
                let r = if on {
                    io.resume(topic, partition)
                } else {
                    io.pause(topic, partition)
                };
                match r {
                    Ok(()) if src == Src::Main => {
                        self.gauges.paused.set(if on { 0.0 } else { 1.0 })
                    }
                    Ok(()) => {}
                    // The DLQ partition may not be assigned (topic created later).
                    Err(e) => {
                        tracing::debug!(partition, ?src, error = %e, on, "pause/resume");
                        return Some(Input::ReadingFailed { src });
                    }
                }
            }
            Effect::Store {
                src,
                offset,
                metadata,
                commit,
            } => {
                let topic = self.decoder.topic(src);
                // librdkafka (≥ 2.1) keeps a stored offset's metadata and its
                // auto-commit sends it; but it commits a partition only when
                // the stored position passed the committed one, so metadata
                // that changed alone is committed here (`Commit::Soon`).
                let Some(io) = self.a.io.as_ref() else {
                    return None; // Stopped: the next owner starts from what was stored.
                };
                let mut r = io.store(topic, partition, offset.get(), &metadata);
                if r.is_ok() {
                    match commit {
                        Commit::No => {}
                        // With the other partitions' (`commits`).
                        Commit::Soon => {
                            self.a
                                .commits
                                .ask(io, topic, partition, offset.get(), metadata.clone())
                        }
                        Commit::Now => {
                            self.a.commits.forget(topic, partition);
                            metrics::counter!(crate::metrics::OFFSET_COMMITS, "kind" => "explicit")
                                .increment(1);
                            r = io.commit(&[CommitAt {
                                topic,
                                partition,
                                offset: offset.get(),
                                metadata: &metadata,
                            }]);
                        }
                    }
                }
                match r {
                    Ok(()) => {
                        self.a.shared.set_stored(src, offset, &metadata);
                        if src == Src::Main {
                            self.gauges.watermark.set(offset.get() as f64);
                        }
                    }
                    // Expected while a rebalance takes the partition away.
                    Err(e) => {
                        tracing::debug!(partition, ?src, error = %e, "store_offsets");
                        return Some(Input::StoreFailed { src, offset });
                    }
                }
            }
            Effect::ForgetWaitingCommits => {
                for src in Src::BOTH {
                    let topic = self.decoder.topic(src);
                    self.a.commits.forget(topic, partition);
                }
            }
            Effect::Schedule { after, timer } => {
                myself.send_after(after, move || PartitionMsg::Input(Input::Timer(timer)));
            }
            Effect::HandedOver => {
                self.inbox.close();
                if let Some(reply) = self.draining.take() {
                    let _ = reply.send(self.a.shared.stored(Src::Main));
                }
            }
            Effect::TakenIn { records, bytes } => {
                self.a
                    .shared
                    .taken_in(records, bytes, &self.a.pipeline.buffered)
            }
            Effect::AwaitBudget => {
                let me = myself.clone();
                self.a.pipeline.in_flight.wait(Box::new(move || {
                    let _ = me.send_message(PartitionMsg::Input(Input::Timer(Timer::Budget)));
                }));
            }
            Effect::Begun { main, dlq } => {
                self.gauges.consumed[Src::Main.index()].increment(main as u64);
                self.gauges.consumed[Src::Dlq.index()].increment(dlq as u64);
                self.a.shared.begun(main + dlq, &self.a.ready)
            }
            Effect::Skipped(n) => {
                metrics::counter!(crate::metrics::OFFSETS_SKIPPED).increment(n as u64)
            }
            Effect::Finished(n) => self.a.shared.finished(n, &self.a.ready),
            Effect::Mode { mode, change } => self.gauges.show_mode(partition, mode, change),
            Effect::Lag { dlq, main } => self.gauges.show_lag(dlq, main),
            Effect::Probe { src, from, to } => self.probe(myself, src, from, to),
            Effect::ReadFromStart { src } => self.read_from_start(myself, src),
            Effect::RewindDlq { to } => self.rewind_dlq(myself, to),
            Effect::Note(Note::PositionReset {
                src,
                from,
                to,
                seen_end,
            }) => self.position_reset(src, from, to, seen_end),
            Effect::Note(Note::DeletedUnread {
                src,
                from,
                to,
                done,
            }) => {
                let topic = self.decoder.topic(src);
                self.a
                    .pipeline
                    .deleted_unread(topic, partition, from, to, done.as_ref());
            }
            Effect::Note(note) => observe::log(partition, note),
        }
        None
    }

    /// Tells the machine that a record began or ended waiting for its schema
    /// (`changed`), before the records the gate hands over: it decides main
    /// p's reading.
    pub(super) fn schema_wait(&mut self, myself: &ActorRef<PartitionMsg>, changed: Option<bool>) {
        if let Some(waiting) = changed {
            self.run(myself, Input::SchemaWait { waiting });
        }
    }

    /// Sends a job to the delivery pool. If the pool is missing or gone, the job is
    /// dropped here and its token reports errored: the machine dispatches it again
    /// after a back-off.
    fn send(&mut self, job: Job) {
        if !matches!(job.item.work, Work::Deliver(_)) {
            if let Some(pool) = self.a.delivery.pool.current() {
                let _ = pool.send_message(DeliveryMsg::Run(job));
            }
            return;
        }
        self.enqueue(Queued::One(job));
    }

    /// Puts deliveries on the pool's queue (see [`Self::send`]).
    fn enqueue(&mut self, queued: Queued) {
        let queued = match &self.queue {
            Some(q) => match q.send(queued) {
                Ok(()) => return,
                Err(failed) => failed.0,
            },
            None => queued,
        };
        // Not known yet, or the pool was re-spawned: take its current queue.
        self.queue = self.a.delivery.queue.current();
        if let Some(q) = &self.queue {
            let _ = q.send(queued);
        }
    }
}
