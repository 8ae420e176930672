//! The log: the filter (`RUST_LOG` or the config's level, with ractor and
//! the platform verifier quieted) and the format, with OpenTelemetry's layer
//! when tracing is on.

use courier::config::LogFormat;
use courier::otel::OtelLayer;

/// ractor instruments every actor's processing loop with an INFO span, entered and
/// left on every poll: at `info` that cost ~10 % of Courier's CPU per event
/// (docs/BENCHMARKS.md). Unless a filter names `ractor` itself, its spans and events
/// below WARN are left out (its warnings and errors still show).
///
/// rustls-platform-verifier logs an ERROR for every certificate it refuses, i.e.
/// for every connection attempt to an API with a bad certificate (hundreds at
/// once at full concurrency, then each probe). Courier logs the failure itself,
/// named (`tls_untrusted`, ...), on its first occurrence and then once every
/// 10 s; the verifier's lines are off unless a filter names it.
fn quiet_ractor(spec: &str) -> String {
    let mut out = spec.to_string();
    if !spec.contains("ractor") {
        out.push_str(",ractor=warn");
    }
    if !spec.contains("rustls_platform_verifier") {
        out.push_str(",rustls_platform_verifier=off");
    }
    out
}

pub(crate) fn init_logging(format: LogFormat, level: &str) {
    init_logging_with(format, level, None);
}

pub(crate) fn init_logging_with(format: LogFormat, level: &str, otel: Option<OtelLayer>) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let from_env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
    let spec = quiet_ractor(from_env.as_deref().unwrap_or(level));
    let filter = tracing_subscriber::EnvFilter::try_new(&spec)
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(quiet_ractor(level)))
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("info,ractor=warn,rustls_platform_verifier=off")
        });
    match otel {
        // The OTLP layer sees its own target whatever the level: the filter is
        // the fmt layer's alone.
        Some(otel) => tracing_subscriber::registry()
            .with(otel)
            .with(fmt_layer(format).with_filter(filter))
            .init(),
        // One global filter otherwise: a per-layer filter can drop events
        // after a `log` record it refused left stale state behind
        // (tokio-rs/tracing#2519, #2448).
        None => tracing_subscriber::registry()
            .with(filter)
            .with(fmt_layer(format))
            .init(),
    }
}

/// The log lines' layer, to stderr, for any subscriber it is stacked on.
fn fmt_layer<S>(format: LogFormat) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer as _;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Json => fmt.json().boxed(),
        LogFormat::Human => fmt.boxed(),
    }
}
#[cfg(test)]
mod tests {
    use super::quiet_ractor;

    #[test]
    fn ractor_is_quiet_unless_named() {
        let quiet = ",rustls_platform_verifier=off";
        assert_eq!(quiet_ractor("info"), format!("info,ractor=warn{quiet}"));
        assert_eq!(
            quiet_ractor("debug,librdkafka=warn"),
            format!("debug,librdkafka=warn,ractor=warn{quiet}")
        );
        assert_eq!(
            quiet_ractor("info,ractor=debug"),
            format!("info,ractor=debug{quiet}")
        );
        assert_eq!(
            quiet_ractor("info,rustls_platform_verifier=error"),
            "info,rustls_platform_verifier=error,ractor=warn"
        );
    }
}
