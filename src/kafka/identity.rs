//! What identifies a log, and what the broker allows a commit to carry.
//!
//! - Topic ids (Kafka ≥ 2.8 gives every topic a UUID; a topic deleted and
//!   recreated under the same name gets a new one). rdkafka 0.39 exposes none
//!   of them in its safe API (its metadata has no topic id, its admin client
//!   has no DescribeTopics), so this asks librdkafka 2.12 directly
//!   (`rd_kafka_DescribeTopics`, `rd_kafka_TopicDescription_topic_id`,
//!   `rd_kafka_Uuid_base64str`: Kafka's own base64 spelling) on a client
//!   Courier already has.
//! - `offset.metadata.max.bytes` of the brokers (DescribeConfigs): the most a
//!   commit's metadata may hold; a longer one makes the broker refuse the whole
//!   commit of that partition.
//! - Whether a stretch of a partition holds anything to deliver (a probe read
//!   with `read_committed`: transaction markers and aborted records are never
//!   handed to a consumer).

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::bindings as rd;
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::time::{Duration, Instant};

/// The ids of `topics` (as Kafka prints them), for those the broker
/// describes without error. Blocking: call off the async runtime.
pub fn topic_ids<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topics: &[&str],
    timeout: Duration,
) -> HashMap<String, String> {
    let names: Vec<CString> = topics
        .iter()
        .filter_map(|t| CString::new(*t).ok())
        .collect();
    let mut ptrs: Vec<*const std::os::raw::c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut out = HashMap::new();
    if ptrs.is_empty() {
        return out;
    }
    // Not the controller when the cluster names one it does not have (the
    // mock cluster of `courier demo`): see `admin::controller_detour`.
    let detour = super::admin::controller_detour(consumer.client(), topics[0], timeout);
    let rk = consumer.client().native_ptr();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: every pointer handed to librdkafka is valid for the call (the
    // names outlive the collection, which copies them); each object created
    // here is destroyed once, after its last use; the result's strings are
    // read before the event that owns them is destroyed.
    unsafe {
        let collection = rd::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len());
        let options = rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        );
        let mut errstr = [0 as std::os::raw::c_char; 256];
        rd::rd_kafka_AdminOptions_set_request_timeout(
            options,
            ms,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        if let Some(broker) = detour {
            rd::rd_kafka_AdminOptions_set_broker(
                options,
                broker,
                errstr.as_mut_ptr(),
                errstr.len(),
            );
        }
        let queue = rd::rd_kafka_queue_new(rk);
        rd::rd_kafka_DescribeTopics(rk, collection, options, queue);
        let until = Instant::now() + timeout + Duration::from_secs(1);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let event = rd::rd_kafka_queue_poll(queue, left.as_millis().min(1_000) as i32);
            if event.is_null() {
                continue;
            }
            if rd::rd_kafka_event_type(event) == rd::RD_KAFKA_EVENT_DESCRIBETOPICS_RESULT
                && rd::rd_kafka_event_error(event)
                    == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                let result = rd::rd_kafka_event_DescribeTopics_result(event);
                let mut n = 0usize;
                let described = rd::rd_kafka_DescribeTopics_result_topics(result, &mut n);
                for i in 0..n {
                    let d = *described.add(i);
                    let error = rd::rd_kafka_TopicDescription_error(d);
                    if !error.is_null()
                        && rd::rd_kafka_error_code(error)
                            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                    {
                        continue;
                    }
                    let name = rd::rd_kafka_TopicDescription_name(d);
                    let id = rd::rd_kafka_TopicDescription_topic_id(d);
                    if name.is_null() || id.is_null() {
                        continue;
                    }
                    let text = rd::rd_kafka_Uuid_base64str(id);
                    if text.is_null() {
                        continue;
                    }
                    let name = CStr::from_ptr(name).to_string_lossy().into_owned();
                    let text = CStr::from_ptr(text).to_string_lossy().into_owned();
                    // The all-zero UUID: the broker knows no id.
                    if text.bytes().any(|b| b != b'A') {
                        out.insert(name, text);
                    }
                }
            }
            rd::rd_kafka_event_destroy(event);
            break;
        }
        rd::rd_kafka_queue_destroy(queue);
        rd::rd_kafka_AdminOptions_destroy(options);
        rd::rd_kafka_TopicCollection_destroy(collection);
    }
    out
}

/// The smallest `offset.metadata.max.bytes` among the brokers (a partition's
/// coordinator may be any of them); `None` when it cannot be read.
pub(crate) async fn metadata_max_bytes(base: &ClientConfig, timeout: Duration) -> Option<usize> {
    let admin: AdminClient<DefaultClientContext> = base.create().ok()?;
    let ids: Vec<i32> = {
        let md = admin.inner().fetch_metadata(None, timeout).ok()?;
        md.brokers().iter().map(|b| b.id()).collect()
    };
    let specs: Vec<ResourceSpecifier> = ids
        .iter()
        .map(|id| ResourceSpecifier::Broker(*id))
        .collect();
    let opts = AdminOptions::new().request_timeout(Some(timeout));
    let results = admin.describe_configs(&specs, &opts).await.ok()?;
    results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .filter_map(|r| r.get("offset.metadata.max.bytes"))
        .filter_map(|e| e.value.as_deref()?.parse::<usize>().ok())
        .min()
}

/// Whether `[from, to)` of `topic`/`partition` holds nothing to deliver:
/// read with `read_committed` (the settings of `base`), no record there is
/// handed over and the read position reaches `to`. `false` when a record is
/// found, or when it cannot tell within `timeout`. Blocking.
pub(crate) fn nothing_to_deliver<C: ClientContext + ConsumerContext>(
    reader: &BaseConsumer<C>,
    topic: &str,
    partition: i32,
    from: i64,
    to: i64,
    timeout: Duration,
) -> bool {
    let mut tpl = TopicPartitionList::new();
    if tpl
        .add_partition_offset(topic, partition, Offset::Offset(from))
        .is_err()
        || reader.assign(&tpl).is_err()
    {
        return false;
    }
    let until = Instant::now() + timeout;
    let clean = loop {
        if Instant::now() >= until {
            break false;
        }
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => break m.offset() >= to,
            Some(Err(_)) => break false,
            None => {}
        }
        // Control records are never handed over, but reading them moves the
        // position past them.
        let reached = reader.position().ok().and_then(|p| {
            p.find_partition(topic, partition)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                })
        });
        if reached.is_some_and(|o| o >= to) {
            break true;
        }
    };
    let _ = reader.unassign();
    clean
}
