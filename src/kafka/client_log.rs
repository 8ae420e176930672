//! librdkafka's log lines, as tracing events (target `librdkafka`), and the
//! one line Courier acts on: an offset reset after a failed fetch ("offset
//! out of range": the log start passed the read position, so the records
//! between were deleted before Courier read them). librdkafka reports such a
//! reset only as this log line (an error event only with
//! `auto.offset.reset=error`), so it is read here.

use rdkafka::config::RDKafkaLogLevel;

/// An offset reset librdkafka logged: the fetch at `at` of `topic`/`partition`
/// failed and the position was moved (to the log start, with Courier's
/// `auto.offset.reset=earliest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OffsetReset<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub at: i64,
}

/// Reads librdkafka's `OFFSET` line, as `rd_kafka_offset_reset` writes it
/// (2.x): `<topic> [<partition>]: offset reset (at offset <n> (leader epoch
/// <e>), broker <b>) to <where>: <reason>: <error>`. `None` for any other
/// line, and for a reset at a logical offset (no fetch position yet).
pub(crate) fn offset_reset<'a>(fac: &str, message: &'a str) -> Option<OffsetReset<'a>> {
    if fac != "OFFSET" {
        return None;
    }
    let (head, rest) = message.split_once("]: offset reset (at offset ")?;
    // After librdkafka's thread tag (`[thrd:main]: `); a topic name has no
    // spaces.
    let (head, partition) = head.rsplit_once(" [")?;
    let topic = head.rsplit(' ').next()?;
    let digits = rest.split(|c: char| !c.is_ascii_digit()).next()?;
    Some(OffsetReset {
        topic,
        partition: partition.parse().ok()?,
        at: digits.parse().ok()?,
    })
}

/// The line as a tracing event at librdkafka's level (what rdkafka's default
/// `ClientContext::log` does through the `log` crate).
pub(crate) fn emit(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
        RDKafkaLogLevel::Debug => {
            tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_reset_line_of_librdkafka_2() {
        // As librdkafka 2.12 wrote it in tests/dlq.rs's run.
        let line = "[thrd:main]: orders.v1 [3]: offset reset (at offset 41 (leader epoch 0), broker 1) to offset BEGINNING (leader epoch -1): fetch failed due to requested offset not available on the broker: Broker: Offset out of range";
        assert_eq!(
            offset_reset("OFFSET", line),
            Some(OffsetReset {
                topic: "orders.v1",
                partition: 3,
                at: 41
            })
        );
        let cached = "t [0]: offset reset (at offset 7, broker 2) to cached BEGINNING offset offset 9 (leader epoch 1): fetch failed: Broker: Offset out of range";
        assert_eq!(offset_reset("OFFSET", cached).map(|r| r.at), Some(7));
    }

    #[test]
    fn other_lines_are_not_resets() {
        assert_eq!(
            offset_reset("FETCH", "t [0]: offset reset (at offset 1, broker 1)"),
            None
        );
        assert_eq!(
            offset_reset(
                "OFFSET",
                "t [0]: offset reset (at offset BEGINNING (leader epoch -1), broker -1) to END: no offset"
            ),
            None
        );
        assert_eq!(
            offset_reset("OFFSET", "t [x]: offset reset (at offset 1, broker 1)"),
            None
        );
        assert_eq!(offset_reset("OFFSET", "garbage"), None);
    }
}
