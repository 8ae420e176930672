//! Leaving the consumer group on a graceful shutdown (a static member's
//! LeaveGroup: see the module doc of `kafka`, "Group membership").

use super::KafkaConsumer;
use rdkafka::consumer::Consumer;
use std::time::Duration;

/// Leaves the consumer group now, waiting (up to `within`, polling) until the
/// LeaveGroup request is on its way. Closing the consumer does not do it for a
/// static member (KIP-345: librdkafka sends no LeaveGroup on termination), but
/// unsubscribing does: then the other members take the partitions at once
/// instead of after `session.timeout.ms`. Call it after the final commit, with
/// no other thread polling. Returns whether the member left in time.
pub(crate) fn leave_group(c: &KafkaConsumer, within: Duration) -> bool {
    c.unsubscribe();
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        // Serves the revoke callback (which commits) and the group's events.
        let _ = c.poll(Duration::from_millis(50));
        if !has_member_id(c) {
            return true;
        }
    }
    false
}

/// Whether the consumer holds a group member id: librdkafka clears it as it
/// sends LeaveGroup (`rd_kafka_cgrp_leave`).
fn has_member_id(c: &KafkaConsumer) -> bool {
    let rk = c.client().native_ptr();
    // SAFETY: `rk` is the live handle `c` borrows; `rd_kafka_memberid` returns
    // a copy of the id (or NULL), which is freed here with `rd_kafka_mem_free`.
    unsafe {
        let id = rdkafka::bindings::rd_kafka_memberid(rk);
        if id.is_null() {
            return false;
        }
        let empty = *id == 0;
        rdkafka::bindings::rd_kafka_mem_free(rk, id.cast());
        !empty
    }
}
