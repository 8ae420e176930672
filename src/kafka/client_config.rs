//! The librdkafka client settings: the group consumer's (I4, I21), the
//! producer's, the base any other client starts from, and the cap on what a
//! fetched batch may decompress to.

use crate::config::KafkaConfig;
use rdkafka::config::ClientConfig;

/// Consumer configuration. `enable.auto.offset.store=false` is what makes auto
/// commit safe: librdkafka only ever commits offsets Courier stored, and Courier
/// only stores watermarks (see `core::offsets`).
pub(crate) fn consumer_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("group.id", &k.group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set(
            "auto.commit.interval.ms",
            crate::config::millis(k.auto_commit_interval).to_string(),
        )
        .set("auto.offset.reset", "earliest")
        // librdkafka's default, set so it shows: records of aborted transactions
        // are never delivered (`[kafka.properties]` may not change it).
        .set("isolation.level", "read_committed")
        .set(
            "session.timeout.ms",
            crate::config::millis(k.session_timeout).to_string(),
        )
        .set(
            "max.poll.interval.ms",
            crate::config::millis(k.max_poll_interval).to_string(),
        )
        // Main p and DLQ p must land on the same member: `range` assigns equal
        // indices of co-subscribed topics together.
        .set("partition.assignment.strategy", "range")
        .set("enable.partition.eof", "false")
        // Notice a DLQ topic created after start within seconds, not minutes.
        .set("topic.metadata.refresh.interval.ms", "10000")
        // A bounded prefetch (librdkafka's defaults are 64 MB and 100,000 messages
        // per partition): everything polled becomes pipeline memory, and the
        // pipeline's own limits, not the prefetch, should bound it. Under a backlog
        // this queue sits full (the poll thread stops while `pipeline.max_buffered`
        // records wait), so it is pure memory: 4 MB is ~0.2 s of work at 35,000
        // events/s and measured as fast as 16 MB (docs/BENCHMARKS.md). With a
        // bounded queue the fetcher hits its thresholds often, and librdkafka then
        // postpones the partition's next fetch by `fetch.queue.backoff.ms` (1 s by
        // default), which caps throughput at about one queue per second: keep that
        // short.
        .set("queued.max.messages.kbytes", "4096")
        .set("queued.min.messages", "2000")
        .set("fetch.queue.backoff.ms", "20")
        // The queue limits above apply to the consumer's one queue (librdkafka
        // 2.12 checks them against the forwarded queue, whatever the number of
        // partitions), but each fetch response may overshoot them: it carries up
        // to `max.partition.fetch.bytes` (1 MB) per partition, capped by
        // `fetch.max.bytes` (50 MB by default). Capped here, the prefetch stays
        // flat in the number of assigned partitions (docs/BENCHMARKS.md).
        .set("fetch.max.bytes", "8388608");
    // Static membership (`kafka.instance_id`): a restarted process with the same
    // id gets its partitions back at once (KIP-345).
    if let Some(id) = k.instance_id() {
        c.set("group.instance.id", id);
    }
    with_user_settings(c, k)
}

/// Caps what one fetched batch may decompress to, from the fetch budget
/// (`pipeline.max_buffered_bytes`), through `receive.message.max.bytes`.
/// librdkafka's fetch sizes (`fetch.max.bytes`, `max.partition.fetch.bytes`)
/// and `queued.max.messages.kbytes` are checked before a fetch and count a
/// batch as the broker sends it, compressed: a zstd batch of 10 KB can hold
/// 40 MB, decompressed whole into librdkafka's queue before any of Courier's
/// budgets sees a record. librdkafka decompresses zstd into a buffer of at
/// most `receive.message.max.bytes` and refuses a larger batch (a
/// `BadCompression` error, retried at each fetch: its partition waits, logged
/// as an ERROR, until the limit is raised). When the frame does not say its
/// size (librdkafka's own producer's do not) it starts at twice the compressed
/// size and triples the buffer per try, so a batch of B bytes may need a
/// buffer of up to 3B: the cap is three times the budget, so every batch
/// within the budget is read, none larger than three times it is, and one
/// batch never holds more than that (default 48 MB, librdkafka's own default
/// is 100 MB). Never below `fetch.max.bytes` + 512, which librdkafka requires.
/// lz4, gzip and snappy batches librdkafka decompresses whole, whatever their
/// size: no setting bounds those. A `receive.message.max.bytes` set in
/// `[kafka.properties]` wins.
pub(crate) fn cap_decompression(
    mut c: ClientConfig,
    k: &KafkaConfig,
    max_buffered_bytes: usize,
) -> ClientConfig {
    if k.properties.contains_key("receive.message.max.bytes") {
        return c;
    }
    let fetch = c
        .get("fetch.max.bytes")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(52_428_800);
    let cap = max_buffered_bytes
        .saturating_mul(3)
        .max(fetch.saturating_add(512))
        .min(i32::MAX as usize);
    c.set("receive.message.max.bytes", cap.to_string());
    c
}

/// `[kafka.properties]` last, so they override Courier's defaults, then the
/// secrets from the environment.
fn with_user_settings(mut c: ClientConfig, k: &KafkaConfig) -> ClientConfig {
    for (key, v) in &k.properties {
        c.set(key, v);
    }
    set_secrets(&mut c, k);
    c
}

/// The SASL password, the OIDC client secret and the TLS key's passphrase come
/// from the environment, never from the file (`KafkaConfig::secret_properties`).
/// librdkafka treats these properties as sensitive and never prints them. A
/// missing variable was reported at start (`Config::check_secrets`); here it
/// leaves the property unset, and librdkafka's own error says what is missing.
fn set_secrets(c: &mut ClientConfig, k: &KafkaConfig) {
    for (property, value) in k.secret_properties().unwrap_or_default() {
        c.set(property, value);
    }
}

/// What any client of the cluster needs and nothing role-specific: the brokers,
/// `[kafka.properties]` (TLS, SASL, …) and the SASL password from the environment,
/// as [`consumer_config`] passes them. The operator commands' admin clients and
/// readers start from it (`kafka::admin`).
pub(crate) fn client_base(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers);
    with_user_settings(c, k)
}

/// Idempotent producer (acks=all, safe retries) for DLQ and parking-lot writes.
pub fn producer_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &k.brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        .set("compression.type", k.producer_compression.as_str())
        // A write that cannot be acknowledged within this time is reported as
        // failed and retried by Courier; the event's offset waits meanwhile.
        .set(
            "message.timeout.ms",
            crate::config::millis(k.producer_timeout).to_string(),
        );
    for (key, v) in &k.properties {
        // Consumer-only properties would make the producer refuse to start.
        if !key.starts_with("fetch.")
            && !key.starts_with("max.poll")
            && !key.starts_with("session.")
        {
            c.set(key, v);
        }
    }
    // Never has the broker create a topic it writes to (set after
    // `[kafka.properties]`, so it cannot be turned on): a missing DLQ would be
    // created with the broker's default partition count, pairing main p with
    // the wrong DLQ partition or none. Missing topics are refused at start.
    c.set("allow.auto.create.topics", "false");
    set_secrets(&mut c, k);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch may decompress to three times the fetch budget and no further;
    /// the limit never falls below what librdkafka requires, and the user's
    /// own wins.
    #[test]
    fn decompression_is_capped_at_the_fetch_budget() {
        let k = KafkaConfig::default();
        let get = |c: &ClientConfig| c.get("receive.message.max.bytes").map(str::to_string);
        let c = cap_decompression(consumer_config(&k), &k, 16 << 20);
        assert_eq!(get(&c), Some((48u64 << 20).to_string()));
        let c = cap_decompression(consumer_config(&k), &k, 1 << 20);
        assert_eq!(
            get(&c),
            Some((8_388_608 + 512).to_string()),
            "fetch.max.bytes + 512 at least"
        );
        let mut own = KafkaConfig::default();
        own.properties
            .insert("receive.message.max.bytes".into(), "99999999".into());
        let c = cap_decompression(consumer_config(&own), &own, 16 << 20);
        assert_eq!(get(&c).as_deref(), Some("99999999"));
        // librdkafka takes each of them.
        for budget in [1 << 20, 16 << 20] {
            let c = cap_decompression(consumer_config(&k), &k, budget);
            assert!(c.create_native_config().is_ok());
        }
    }

    /// The producer never asks the broker to create a topic, whatever
    /// `[kafka.properties]` says.
    #[test]
    fn the_producer_never_auto_creates_topics() {
        let mut k = KafkaConfig::default();
        k.properties
            .insert("allow.auto.create.topics".into(), "true".into());
        let c = producer_config(&k);
        assert_eq!(c.get("allow.auto.create.topics"), Some("false"));
    }
}
