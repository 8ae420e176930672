//! `courier check-config --online`: what start-up would refuse, asked of the
//! brokers and the other services without starting anything, so a team finds
//! out before it deploys.
//!
//! Each check is the one `courier run` makes, called here rather than written
//! again (one path per job); the warnings those checks log at start are logged
//! here too (`check-config --online` logs at WARN to stderr):
//!
//! | what | start-up's own check | at start |
//! |---|---|---|
//! | the brokers answer; the main topic, the DLQ and the parking lot exist and the principal may describe them; main and DLQ have as many partitions | `actors::consumer::check_topics` | refused |
//! | the principal may read the three topics' configs, and neither DLQ nor parking lot compacts | `actors::dlq_writer::HeldTopics` | refused (a compacted one); warned (configs unreadable) |
//! | `pipeline.oversize = "refuse"`: an envelope of `max_event_bytes` fits both | [`super::check_envelopes_fit`] | refused |
//! | the DLQ's `retention.ms` outlasts the DLQ policy's horizon | [`super::warn_dlq_retention`] | warned |
//! | PostgreSQL, when enrichment or a source-of-truth query uses it | `delivery::enrich::check_at_start` | refused (TLS, authentication); warned (unreachable) |
//! | Redis answers `PING` | `redis_conn::redis_client` (the client the health actor uses) | runs on local breakers; a warning here |
//! | the schema registry answers (`input.format` reading one) | `schema_registry::SchemaRegistry` | partitions wait; a problem here |
//! | the OAuth2 token endpoint issues a token (`[api.oauth2]`) | `auth::Auth` | the group pauses; a problem here |
//!
//! A TLS file that cannot be read (`[kafka.properties]`' `ssl.*.location`, the
//! API's, Redis's and PostgreSQL's CA files) is refused before this, by the
//! config's own validation, which `check-config` runs with or without
//! `--online`.

use crate::config::Config;
use std::time::Duration;

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Courier would start, with less than it was configured for.
    Warning,
    /// Start-up would refuse it, or nothing could be delivered.
    Problem,
}

/// What one check found: the service it asked, the verdict, and what it saw.
#[derive(Debug, Clone)]
pub struct Finding {
    pub service: &'static str,
    pub verdict: Verdict,
    pub text: String,
}

impl Finding {
    fn new(service: &'static str, verdict: Verdict, text: impl Into<String>) -> Finding {
        Finding {
            service,
            verdict,
            text: text.into(),
        }
    }
}

/// How long a service that does not answer is waited for.
const ANSWER_WAIT: Duration = Duration::from_secs(15);

/// Every check, in order; the config was validated and its secrets read.
pub async fn check_online(config: &Config) -> Vec<Finding> {
    let mut out = kafka(config).await;
    if config.uses_postgres() {
        out.push(postgres(config).await);
    }
    out.push(redis(config).await);
    if config.input.format.uses_registry() {
        out.push(registry(config).await);
    }
    if config.api.oauth2.is_some() {
        out.push(token_endpoint(config).await);
    }
    out
}

/// The topics (consumer start), their configs (DLQ writer start), the
/// envelopes' fit and the DLQ's retention (app start).
async fn kafka(config: &Config) -> Vec<Finding> {
    use crate::actors::consumer::{check_topics, Topics};
    let mut out = Vec::new();
    let settings = crate::kafka::consumer_config(&config.kafka);
    let topics = Topics {
        main: config.kafka.topic.clone(),
        dlq: config.kafka.dlq_topic(),
        parking: config.kafka.parking_topic(),
    };
    let checked = tokio::task::spawn_blocking(move || {
        let broker = crate::kafka::seams::Broker::new(settings)
            .map_err(|e| format!("cannot create a Kafka client: {e}"))?;
        check_topics(&broker, &topics)
            .map(|n| (n, topics))
            .map_err(|e| e.to_string())
    })
    .await
    .unwrap_or_else(|e| Err(format!("the check did not finish: {e}")));
    match checked {
        Ok((n, t)) => out.push(Finding::new(
            "kafka",
            Verdict::Ok,
            format!(
                "`{}` ({} partitions), `{}` ({}), `{}` ({}): they exist and main p pairs with DLQ p",
                t.main, n.main, t.dlq, n.dlq, t.parking, n.parking
            ),
        )),
        Err(e) => {
            // The other Kafka checks would only say the same again.
            out.push(Finding::new("kafka", Verdict::Problem, e));
            return out;
        }
    }
    let held = crate::actors::dlq_writer::HeldTopics::read(&config.kafka).await;
    let unknown = held.policies_unknown();
    match held.refuse_compacted(&config.kafka) {
        Err(e) => out.push(Finding::new("kafka", Verdict::Problem, e.to_string())),
        Ok(()) if !unknown.is_empty() => out.push(Finding::new(
            "kafka",
            Verdict::Warning,
            format!(
                "the configs of {} could not be read (DescribeConfigs: see the warning above; \
                 the principal needs DescribeConfigs on the topics): a compacted DLQ or \
                 parking lot would not be refused, and the writer assumes the default \
                 max.message.bytes",
                unknown.join(", ")
            ),
        )),
        Ok(()) => out.push(Finding::new(
            "kafka",
            Verdict::Ok,
            "the DLQ and the parking lot keep every record (no compaction)",
        )),
    }
    if config.pipeline.oversize == crate::config::Oversize::Refuse {
        match super::check_envelopes_fit(config).await {
            Ok(()) => out.push(Finding::new(
                "kafka",
                Verdict::Ok,
                "an envelope of pipeline.max_event_bytes fits the DLQ and the parking lot",
            )),
            Err(e) => out.push(Finding::new("kafka", Verdict::Problem, e.to_string())),
        }
    }
    match super::warn_dlq_retention(config).await {
        true => out.push(Finding::new(
            "kafka",
            Verdict::Ok,
            "the DLQ's retention.ms outlasts the DLQ policy's horizon",
        )),
        false => out.push(Finding::new(
            "kafka",
            Verdict::Warning,
            "the DLQ's retention.ms is not known to outlast the DLQ policy's horizon (the warning above says why)",
        )),
    }
    out
}

/// Start-up's PostgreSQL check: what it refuses (TLS, authentication) is a
/// problem; what it only warns about (unreachable) is logged above.
async fn postgres(config: &Config) -> Finding {
    let password = match config.enrichment_password() {
        Ok(p) => p,
        Err(e) => return Finding::new("postgres", Verdict::Problem, e.to_string()),
    };
    let check = crate::delivery::enrich::check_at_start(&config.enrichment, password);
    match tokio::time::timeout(ANSWER_WAIT, check).await {
        Ok(Ok(())) => Finding::new(
            "postgres",
            Verdict::Ok,
            "nothing start-up refuses (a PostgreSQL that did not answer is a warning above)",
        ),
        Ok(Err(e)) => Finding::new("postgres", Verdict::Problem, e.to_string()),
        Err(_) => Finding::new(
            "postgres",
            Verdict::Warning,
            format!("no answer within {ANSWER_WAIT:?}"),
        ),
    }
}

/// Redis with the client Courier's health actor uses: one `PING`.
async fn redis(config: &Config) -> Finding {
    match crate::redis_conn::ping(&config.redis).await {
        Ok(()) => Finding::new("redis", Verdict::Ok, "answered PING"),
        Err(e) => Finding::new(
            "redis",
            Verdict::Warning,
            format!(
                "{e}: Courier starts without it, each instance's breaker deciding alone and \
                 the group's rate limit split locally, until it connects"
            ),
        ),
    }
}

/// The registry with the client the partitions use: one schema id no registry
/// gives (0), so any answer at all — its 404 — shows it answers.
async fn registry(config: &Config) -> Finding {
    let r = crate::schema_registry::SchemaRegistry::new(
        &config.input.schema_registry,
        config.input.format,
    );
    match tokio::time::timeout(ANSWER_WAIT, r.get(0)).await {
        Ok(Ok(_)) => Finding::new("schema registry", Verdict::Ok, "answered"),
        Ok(Err(e)) => Finding::new(
            "schema registry",
            Verdict::Problem,
            format!("{e}: every partition would wait for its first schema"),
        ),
        Err(_) => Finding::new(
            "schema registry",
            Verdict::Problem,
            format!(
                "no answer within {ANSWER_WAIT:?}: every partition would wait for its first schema"
            ),
        ),
    }
}

/// The OAuth2 token endpoint, asked for a token as the first request would.
async fn token_endpoint(config: &Config) -> Finding {
    let auth = match crate::auth::Auth::from_config(&config.api, None) {
        Ok(a) => a,
        Err(e) => return Finding::new("token endpoint", Verdict::Problem, e.to_string()),
    };
    match tokio::time::timeout(ANSWER_WAIT, auth.authorization()).await {
        Ok(Ok(_)) => Finding::new("token endpoint", Verdict::Ok, "issued a token"),
        Ok(Err(e)) => Finding::new(
            "token endpoint",
            Verdict::Problem,
            format!(
                "{} (the warning above says why): the group would pause until it issues one",
                e.as_str()
            ),
        ),
        Err(_) => Finding::new(
            "token endpoint",
            Verdict::Problem,
            format!("no token within {ANSWER_WAIT:?}: the group would pause until it issues one"),
        ),
    }
}
