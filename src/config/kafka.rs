//! `[kafka]`: the broker, the consumer group and the three topics.

use super::{invalid, secret, ConfigError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port` separated by commas.
    pub brokers: String,
    /// The consumer group: every instance of one deployment shares it (the partitions are divided among them).
    pub group_id: String,
    /// The main topic: the events to deliver.
    pub topic: String,
    /// The DLQ topic (it must exist), with as many partitions as the main topic
    /// (checked at start and at every assignment). Default: `<topic>.dlq`.
    pub dlq_topic: Option<String>,
    /// The parking lot (it must exist). Default: `<topic>.parking`.
    pub parking_topic: Option<String>,
    /// The consumer's session timeout: a member not heard from for this long loses its partitions.
    #[serde(with = "humantime_serde")]
    pub session_timeout: Duration,
    /// librdkafka's `max.poll.interval.ms`.
    #[serde(with = "humantime_serde")]
    pub max_poll_interval: Duration,
    /// How often stored watermarks (and the offsets done above them, as commit
    /// metadata) are committed while progress is made; after a crash the next owner
    /// re-delivers what was in flight plus what finished since the last commit
    /// (docs/DRILLS.md, crash-cost).
    #[serde(with = "humantime_serde")]
    pub auto_commit_interval: Duration,
    /// Events finished on a partition since its last commit that make Courier
    /// commit it at once, rather than wait for the next auto-commit: commits
    /// follow progress, so what a crash redelivers stays near the concurrency.
    /// Unset: an eighth of `pipeline.concurrency` (at least 1); `0`: off
    /// (auto-commit alone). At most one such commit per partition per 10 ms.
    pub commit_after: Option<usize>,
    /// How long a DLQ / parking-lot write may take before it is reported failed
    /// (and retried; the event's offset waits meanwhile).
    #[serde(with = "humantime_serde")]
    pub producer_timeout: Duration,
    /// Name of the environment variable holding the SASL password (with
    /// `"sasl.mechanisms"` and `"sasl.username"` in `properties`).
    pub sasl_password_env: Option<String>,
    /// Name of the environment variable holding the OIDC client secret for
    /// SASL/OAUTHBEARER with `"sasl.oauthbearer.method" = "oidc"` (client
    /// credentials; the client id and token endpoint go in `properties`).
    pub oauth_client_secret_env: Option<String>,
    /// Name of the environment variable holding the passphrase of the private
    /// key in `"ssl.key.location"` (TLS client authentication).
    pub ssl_key_password_env: Option<String>,
    /// Compression of the DLQ and parking-lot producers' batches (and of
    /// `courier dlq replay`'s). Consumers read every codec whatever this says.
    /// zstd measured: an outage's burst of envelopes at 0.19 of their size (lz4
    /// 0.29) for ~3 µs more CPU per record (`cargo bench --bench compression`,
    /// docs/BENCHMARKS.md); other readers of the DLQ — and of the main topic,
    /// where `dlq replay` writes — need a zstd-capable client (Kafka ≥ 2.1),
    /// else `lz4`.
    pub producer_compression: Compression,
    /// Static group membership (KIP-345, `group.instance.id`): a process that
    /// restarts with the same id takes its partitions back at once, without a
    /// rebalance and without waiting for `session_timeout`. Unset: taken from
    /// the environment, `POD_NAME`, then `HOSTNAME` (see [`Self::instance_id`]);
    /// `""`: off (dynamic membership). Two live processes must never share one:
    /// the broker fences the older.
    pub instance_id: Option<String>,
    /// On a graceful shutdown (SIGTERM), leave the group so the partitions move
    /// to the other members at once. A static member otherwise stays in the
    /// group until `session_timeout` ends (KIP-345): right only when the same
    /// id comes back quickly (a StatefulSet pod restarting).
    pub leave_on_shutdown: bool,
    /// Extra librdkafka properties (TLS, SASL, OAUTHBEARER, tuning), for the
    /// pipeline's clients and `courier dlq`. What keeps offsets and co-location
    /// safe is refused, naming the key (`enable.auto.commit`,
    /// `enable.auto.offset.store`, `partition.assignment.strategy`,
    /// `group.protocol`, `group.remote.assignor`, `group.instance.id`, `acks`,
    /// `enable.idempotence`, `isolation.level`, `auto.offset.reset` other than
    /// `earliest`), as are `compression.*`, secrets and key contents
    /// (`ssl.key.pem`): secrets come from the environment.
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
            auto_commit_interval: Duration::from_millis(100),
            commit_after: None,
            producer_timeout: Duration::from_secs(30),
            sasl_password_env: None,
            oauth_client_secret_env: None,
            ssl_key_password_env: None,
            producer_compression: Compression::default(),
            instance_id: None,
            leave_on_shutdown: true,
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

    /// A `group_id` left at its default: every deployment that leaves it so
    /// joins the same consumer group (`courier demo` sets its own).
    pub(crate) fn default_group_notice(&self) -> Option<String> {
        let default = KafkaConfig::default().group_id;
        (self.group_id == default).then(|| {
            format!(
                "kafka.group_id is left at its default, \"{default}\": every deployment that \
                 leaves it so joins the same consumer group — two of them on one topic split \
                 its events between them, and each one's restarts rebalance the others; give \
                 this deployment a group of its own (e.g. \"courier-{}\")",
                self.topic
            )
        })
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
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
        for (key, value) in &self.properties {
            if let Some(reason) = refused_property(key).or_else(|| refused_value(key, value)) {
                return Err(invalid(&format!("kafka.properties.{key}"), reason));
            }
        }
        self.validate_oidc()?;
        self.check_tls_files()?;
        if let Some(id) = self.instance_id.as_deref().filter(|id| !id.is_empty()) {
            valid_topic(id).map_err(|r| {
                invalid(
                    "kafka.instance_id",
                    r.replace("a topic name", "an instance id"),
                )
            })?;
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

/// The `[kafka.properties]` that name files librdkafka reads when it creates a
/// client: each must be readable, or Courier would start and fail at its first
/// connection with librdkafka's words (a CA file's contents are checked by
/// librdkafka itself, when the client is created).
const TLS_FILE_PROPERTIES: [&str; 5] = [
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.crl.location",
    "ssl.keystore.location",
];

impl KafkaConfig {
    /// Every file (or, for `ssl.ca.location`, directory) `[kafka.properties]`
    /// names can be read; `ssl.ca.location = "probe"` (librdkafka looks in the
    /// system's usual places) names none.
    fn check_tls_files(&self) -> Result<(), ConfigError> {
        for key in TLS_FILE_PROPERTIES {
            let Some(path) = self.property(key) else {
                continue;
            };
            if key == "ssl.ca.location" && path == "probe" {
                continue;
            }
            let p = std::path::Path::new(path);
            let read = if p.is_dir() {
                std::fs::read_dir(p).map(|_| ())
            } else {
                std::fs::File::open(p).map(|_| ())
            };
            read.map_err(|e| {
                invalid(
                    &format!("kafka.properties.{key}"),
                    format!("cannot read `{path}`: {e}"),
                )
            })?;
        }
        Ok(())
    }
}

/// Where [`KafkaConfig::instance_id`] comes from when unset, in order: the pod
/// name (set it from the downward API, `metadata.name`), then the host name.
pub(crate) const INSTANCE_ID_ENV: [&str; 2] = ["POD_NAME", "HOSTNAME"];

impl KafkaConfig {
    /// The static member id (`group.instance.id`), `None` for dynamic membership.
    pub(crate) fn instance_id(&self) -> Option<String> {
        self.instance_id_from(|name| std::env::var(name).ok())
    }

    fn instance_id_from(&self, env: impl Fn(&str) -> Option<String>) -> Option<String> {
        match self.instance_id.as_deref() {
            Some("") => None,
            Some(id) => Some(id.to_string()),
            None => INSTANCE_ID_ENV
                .iter()
                .filter_map(|name| env(name))
                .map(|v| v.trim().to_string())
                .find(|v| !v.is_empty()),
        }
    }

    fn property(&self, key: &str) -> Option<&str> {
        self.properties.get(key).map(|v| v.trim())
    }

    /// OIDC client credentials need the client id and the token endpoint (in
    /// `properties`) and the client secret (from the environment).
    fn validate_oidc(&self) -> Result<(), ConfigError> {
        let oidc = self
            .property("sasl.oauthbearer.method")
            .is_some_and(|m| m.eq_ignore_ascii_case("oidc"));
        if !oidc {
            return Ok(());
        }
        for key in [
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.token.endpoint.url",
        ] {
            if self.property(key).is_none_or(str::is_empty) {
                return Err(invalid(
                    &format!("kafka.properties.{key}"),
                    "is required with \"sasl.oauthbearer.method\" = \"oidc\"",
                ));
            }
        }
        if self.oauth_client_secret_env.is_none() {
            return Err(invalid(
                "kafka.oauth_client_secret_env",
                "is required with \"sasl.oauthbearer.method\" = \"oidc\": name the environment variable holding the client secret",
            ));
        }
        Ok(())
    }

    /// The librdkafka properties whose values come from the environment
    /// variables this section names; a named variable that is missing is an
    /// error naming the field and the variable.
    pub fn secret_properties(&self) -> Result<Vec<(&'static str, String)>, ConfigError> {
        let mut out = Vec::new();
        for (field, name, property) in [
            (
                "kafka.sasl_password_env",
                &self.sasl_password_env,
                "sasl.password",
            ),
            (
                "kafka.oauth_client_secret_env",
                &self.oauth_client_secret_env,
                "sasl.oauthbearer.client.secret",
            ),
            (
                "kafka.ssl_key_password_env",
                &self.ssl_key_password_env,
                "ssl.key.password",
            ),
        ] {
            if let Some(v) = secret(field, name.as_deref())? {
                out.push((property, v));
            }
        }
        Ok(out)
    }
}

/// Why a `[kafka.properties]` key is refused: secrets (they come from the
/// environment), a key's content (its path only), what Courier sets itself.
fn refused_property(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    if lower.contains("oauthbearer.client.secret") {
        return Some("secrets do not belong in the config file: put the OIDC client secret in an environment variable named by kafka.oauth_client_secret_env");
    }
    if lower == "ssl.key.password" {
        return Some("secrets do not belong in the config file: put the key's passphrase in an environment variable named by kafka.ssl_key_password_env");
    }
    if lower.contains("password") || lower.contains("secret") || lower.ends_with(".jaas.config") {
        return Some("secrets do not belong in the config file: put the SASL password in an environment variable named by kafka.sasl_password_env");
    }
    if lower == "ssl.key.pem" {
        return Some("a private key does not belong in the config file: give its path in \"ssl.key.location\" (and its passphrase through kafka.ssl_key_password_env)");
    }
    if lower == "compression.type" || lower == "compression.codec" {
        return Some("is set through kafka.producer_compression");
    }
    if [
        "enable.auto.offset.store",
        "enable.auto.commit",
        "group.id",
        "bootstrap.servers",
    ]
    .contains(&lower.as_str())
    {
        return Some(
            "is set by Courier itself (it is what keeps offsets safe) and cannot be overridden",
        );
    }
    unsafe_override(&lower)
}

/// Keys whose override would break a guarantee, and why (issue 13).
fn unsafe_override(lower: &str) -> Option<&'static str> {
    Some(match lower {
        // An incremental (cooperative) protocol hands over single partitions:
        // main p and DLQ p may land on different members, and an assignment may
        // name a partition already owned, whose actor (and in-flight set) the
        // new one would replace: its watermark would pass unfinished events.
        "partition.assignment.strategy" => {
            "is set by Courier (`range`, eager): main partition p and DLQ partition p must be read by the same member, and an incremental assignor breaks that"
        }
        "group.protocol" | "group.remote.assignor" => {
            "is set by Courier (the classic protocol with `range`): with the consumer protocol (KIP-848) the assignor is chosen by the broker and does not keep main p and DLQ p together"
        }
        "group.instance.id" => {
            "is set through kafka.instance_id (static membership)"
        }
        "acks" | "request.required.acks" | "enable.idempotence" => {
            "is set by Courier (idempotent producer, acks=all): a DLQ or parking-lot write is acknowledged only once every in-sync replica has it, and only then is the event's offset stored"
        }
        "isolation.level" => {
            "is set by Courier (read_committed): records of aborted transactions must never be delivered"
        }
        _ => return None,
    })
}

/// Values refused for a key otherwise allowed.
fn refused_value(key: &str, value: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    let v = value.trim().to_ascii_lowercase();
    if lower == "auto.offset.reset" && !["earliest", "smallest", "beginning"].contains(&v.as_str())
    {
        // `latest` skips everything produced before the group's first commit
        // (or after a committed offset fell out of retention); `error` stops
        // the partition with nothing but a consumer error to show for it.
        return Some("only \"earliest\" is allowed: another value skips events (\"latest\") or stalls the partition (\"error\") when the group has no valid committed offset");
    }
    None
}

/// A producer's `compression.type`.
///
/// Default `zstd`, measured on envelope-sized records (`cargo bench --bench
/// compression`, docs/BENCHMARKS.md): in an outage's burst of DLQ writes it
/// sends 0.19 of the uncompressed bytes (lz4 0.29, snappy 0.31) for ~3 µs more
/// CPU per record than none (lz4 ~0, gzip ~26); records written one at a time
/// cost it tens of µs more, at rates where that is noise. A DLQ kept for days
/// and re-read during the drain is smaller by a third than with lz4. Other
/// readers of the DLQ need a zstd-capable client (Kafka ≥ 2.1); else `lz4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    #[default]
    Zstd,
}

impl Compression {
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// librdkafka's name for the codec.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn with(key: &str, value: &str) -> KafkaConfig {
        let mut k = KafkaConfig::default();
        k.properties.insert(key.into(), value.into());
        k
    }

    fn refused_field(k: &KafkaConfig) -> Option<String> {
        match k.validate() {
            Err(ConfigError::Invalid { field, .. }) => Some(field),
            _ => None,
        }
    }

    /// A group id left at its default is worth a warning (issue 59: the guide's
    /// environment-only example joined group `courier`); any other is not.
    #[test]
    fn a_default_group_id_is_named() {
        let k = KafkaConfig::default();
        let notice = k
            .default_group_notice()
            .expect("the default group is named");
        assert!(notice.starts_with("kafka.group_id is left at its default, \"courier\""));
        let own = KafkaConfig {
            group_id: "courier-orders".into(),
            ..KafkaConfig::default()
        };
        assert_eq!(own.default_group_notice(), None);
    }

    /// A TLS file `[kafka.properties]` names that cannot be read is refused,
    /// naming the key and the path (issue 59: `check-config` said "config ok"
    /// and librdkafka failed at start).
    #[test]
    fn unreadable_kafka_tls_files_are_refused_naming_the_key() {
        let missing = "/nonexistent/courier/kafka-ca.pem";
        for key in TLS_FILE_PROPERTIES {
            let k = with(key, missing);
            let e = k.validate().expect_err(key).to_string();
            assert!(
                e.contains(&format!("kafka.properties.{key}")) && e.contains(missing),
                "{e}"
            );
        }
        let file = std::env::temp_dir().join(format!("courier-ca-{}.pem", std::process::id()));
        std::fs::write(&file, "not checked here").expect("temp file");
        let path = file.display().to_string();
        assert!(with("ssl.ca.location", &path).validate().is_ok());
        let _ = std::fs::remove_file(&file);
        let dir = std::env::temp_dir().display().to_string();
        assert!(with("ssl.ca.location", &dir).validate().is_ok());
        assert!(with("ssl.ca.location", "probe").validate().is_ok());
    }

    /// Each of these would break a guarantee (issue 13): the key is refused,
    /// named in the error (`check-config` prints it).
    #[test]
    fn unsafe_overrides_are_refused_naming_the_key() {
        for (key, value) in [
            // Main p and DLQ p on one member, and `Assigned` never for a
            // partition already owned (incremental assignment would replace
            // its actor): `range`, eager.
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("partition.assignment.strategy", "roundrobin"),
            ("partition.assignment.strategy", "range"),
            ("enable.auto.offset.store", "true"),
            ("enable.auto.commit", "false"),
            ("auto.offset.reset", "latest"),
            ("auto.offset.reset", "largest"),
            ("auto.offset.reset", "end"),
            ("auto.offset.reset", "error"),
            ("auto.offset.reset", "none"),
            ("acks", "1"),
            ("request.required.acks", "0"),
            ("enable.idempotence", "false"),
            ("isolation.level", "read_uncommitted"),
            ("group.protocol", "consumer"),
            ("group.remote.assignor", "uniform"),
            ("group.instance.id", "pod-0"),
            ("Enable.Idempotence", "false"),
        ] {
            let field = refused_field(&with(key, value));
            assert_eq!(
                field.as_deref(),
                Some(format!("kafka.properties.{key}").as_str()),
                "{key} = {value}"
            );
        }
        // Reading from the beginning when nothing is committed is what
        // Courier does anyway: allowed, in each spelling.
        for v in ["earliest", "smallest", "beginning", " EARLIEST "] {
            assert_eq!(refused_field(&with("auto.offset.reset", v)), None, "{v}");
        }
        // Unrelated tuning stays allowed.
        assert_eq!(refused_field(&with("fetch.wait.max.ms", "100")), None);
    }

    #[test]
    fn the_instance_id_comes_from_the_config_then_the_pod_name_then_the_host() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let mut k = KafkaConfig::default();
        let both: &[(&str, &str)] = &[("POD_NAME", "courier-1"), ("HOSTNAME", "node")];
        assert_eq!(k.instance_id_from(env(both)).as_deref(), Some("courier-1"));
        let host: &[(&str, &str)] = &[("POD_NAME", " "), ("HOSTNAME", "node")];
        assert_eq!(k.instance_id_from(env(host)).as_deref(), Some("node"));
        assert_eq!(k.instance_id_from(env(&[])), None);
        k.instance_id = Some("fixed-0".into());
        assert_eq!(k.instance_id_from(env(both)).as_deref(), Some("fixed-0"));
        k.instance_id = Some(String::new());
        assert_eq!(k.instance_id_from(env(both)), None, "\"\" turns it off");
        k.instance_id = Some("a b".into());
        assert_eq!(refused_field(&k).as_deref(), Some("kafka.instance_id"));
    }
}
