//! `[kafka]`: the broker, the consumer group and the three topics.

use super::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    pub brokers: String,
    pub group_id: String,
    pub topic: String,
    /// Default: `<topic>.dlq`.
    pub dlq_topic: Option<String>,
    /// Default: `<topic>.parking`.
    pub parking_topic: Option<String>,
    #[serde(with = "humantime_serde")]
    pub session_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub max_poll_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub auto_commit_interval: Duration,
    /// How long a DLQ / parking-lot write may take before it is reported failed
    /// (and retried; the event's offset waits meanwhile).
    #[serde(with = "humantime_serde")]
    pub producer_timeout: Duration,
    /// Name of the environment variable holding the SASL password (with
    /// `"sasl.mechanisms"` and `"sasl.username"` in `properties`).
    pub sasl_password_env: Option<String>,
    /// Extra librdkafka properties, passed through to consumer and producer.
    /// Secrets are refused here: they come from the environment.
    pub properties: BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            group_id: "courier".into(),
            topic: "events".into(),
            dlq_topic: None,
            parking_topic: None,
            session_timeout: Duration::from_secs(45),
            max_poll_interval: Duration::from_secs(300),
            auto_commit_interval: Duration::from_secs(1),
            producer_timeout: Duration::from_secs(30),
            sasl_password_env: None,
            properties: BTreeMap::new(),
        }
    }
}

impl KafkaConfig {
    pub fn dlq_topic(&self) -> String {
        self.dlq_topic
            .clone()
            .unwrap_or_else(|| format!("{}.dlq", self.topic))
    }

    pub fn parking_topic(&self) -> String {
        self.parking_topic
            .clone()
            .unwrap_or_else(|| format!("{}.parking", self.topic))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "must not be empty"));
        }
        if self.group_id.trim().is_empty() {
            return Err(invalid("kafka.group_id", "must not be empty"));
        }
        for (field, name) in [
            ("kafka.topic", self.topic.clone()),
            ("kafka.dlq_topic", self.dlq_topic()),
            ("kafka.parking_topic", self.parking_topic()),
        ] {
            valid_topic(&name).map_err(|r| invalid(field, r))?;
        }
        if self.dlq_topic() == self.topic
            || self.parking_topic() == self.topic
            || self.dlq_topic() == self.parking_topic()
        {
            return Err(invalid(
                "kafka.dlq_topic",
                "main, DLQ and parking-lot topics must be three different topics",
            ));
        }
        for key in self.properties.keys() {
            let lower = key.to_ascii_lowercase();
            if lower.contains("password")
                || lower.contains("secret")
                || lower.ends_with(".jaas.config")
            {
                return Err(invalid(
                    &format!("kafka.properties.{key}"),
                    "secrets do not belong in the config file: put the SASL password in an environment variable named by kafka.sasl_password_env",
                ));
            }
        }
        for key in [
            "enable.auto.offset.store",
            "enable.auto.commit",
            "group.id",
            "bootstrap.servers",
        ] {
            if self.properties.contains_key(key) {
                return Err(invalid(
                    &format!("kafka.properties.{key}"),
                    "is set by Courier itself (it is what keeps offsets safe) and cannot be overridden",
                ));
            }
        }
        if self.session_timeout.is_zero() {
            return Err(invalid("kafka.session_timeout", "must be above 0"));
        }
        if self.auto_commit_interval.is_zero() {
            return Err(invalid("kafka.auto_commit_interval", "must be above 0"));
        }
        if self.producer_timeout.is_zero() {
            return Err(invalid("kafka.producer_timeout", "must be above 0"));
        }
        Ok(())
    }
}

fn valid_topic(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 249 {
        return Err("a topic name is 1 to 249 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(format!("`{name}` has characters other than [a-zA-Z0-9._-]"));
    }
    Ok(())
}
