//! `[api]`: the external HTTP API, its client and the in-place retry policy.

use super::{invalid, ConfigError};
use crate::core::backoff::InPlaceRetry;
use crate::core::batch::BatchSpec;
use crate::core::destination::{self, DestinationId, Destinations};
use crate::core::expr::Expr;
use crate::core::mapping::{BodyMode, Method, OnError, Route, Routes, Template};
use crate::core::status_policy::{StatusAction, StatusPolicy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    /// Where events are POSTed (no credentials in the URL), unless a route says otherwise.
    pub url: String,
    /// Total deadline of one request (connect, send, answer).
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Connection setup deadline.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Tries per event on the main path, the first included.
    pub max_attempts: u32,
    /// First in-place backoff (doubles each try, equal jitter).
    #[serde(with = "humantime_serde")]
    pub retry_base: Duration,
    /// Cap of that backoff.
    #[serde(with = "humantime_serde")]
    pub retry_max_delay: Duration,
    /// No in-place retry starts later than this after the first try.
    #[serde(with = "humantime_serde")]
    pub retry_budget: Duration,
    /// Name of the environment variable holding a bearer token (never the token).
    pub token_env: Option<String>,
    /// A file holding the bearer token, re-read when it changes (a Kubernetes
    /// Secret volume); instead of `token_env`.
    pub token_file: Option<PathBuf>,
    /// `[api.oauth2]`: the bearer token from the client credentials grant.
    pub oauth2: Option<super::OAuth2Config>,
    /// `[api.signing]`: a Standard Webhooks signature on every request.
    pub signing: Option<super::SigningConfig>,
    /// `[api.batch]`: many events per request (`max_events = 1`: one each).
    pub batch: super::BatchConfig,
    /// What `rate_limit_per_sec` counts: requests (a batch is one) or events.
    pub rate_limit_unit: super::RateLimitUnit,
    /// Extra request headers (not secrets: those come from `token_env`).
    pub headers: BTreeMap<String, String>,
    /// Speak HTTP/2 without negotiation (h2c) to an `http://` API.
    pub http2_prior_knowledge: bool,
    /// Over `https://`: offer HTTP/2 in ALPN (the server chooses HTTP/2 or
    /// HTTP/1.1). Off by default: reqwest keeps one HTTP/2 connection per host,
    /// so the server's stream limit (often 100-250) would cap the calls in
    /// flight below `pipeline.concurrency` (docs/BENCHMARKS.md).
    pub http2: bool,
    /// Allow `http://` to a host other than loopback (the token and the events
    /// would cross the network in clear).
    pub allow_plaintext: bool,
    /// Idle connections kept to the API.
    pub pool_max_idle_per_host: usize,
    /// TLS to an `https://` API.
    pub tls: ApiTlsConfig,
    // --- Status policy, request mapping, trace context (issue 14 items 3-5) ---
    /// `[api.status]`: codes (`"404"`) or ranges (`"500-599"`) mapped to
    /// `ok | transient | permanent | systemic` over the defaults; the narrowest
    /// rule wins.
    pub status: BTreeMap<String, StatusAction>,
    /// How much of a non-2xx answer's body (bytes, control characters
    /// replaced) goes into the DLQ / parking-lot envelope's `last_error.message`.
    pub error_body_bytes: usize,
    /// `[[api.routes]]`: per CloudEvents type, the URL, method, headers and
    /// body; the first match wins, no match: `api.url`.
    pub routes: Vec<RouteConfig>,
    /// Kafka header names copied onto the request (never `Authorization`,
    /// `Idempotency-Key`, `Content-Type` or hop-by-hop headers).
    pub forward_headers: Vec<String>,
    /// Let the calls in flight follow the API (AIMD on 429/503/timeouts and
    /// the round-trip time), with `pipeline.concurrency` as the upper bound.
    /// `false`: always `pipeline.concurrency`.
    pub adaptive_concurrency: bool,
    /// Calls per second toward the API for the whole consumer group (Redis);
    /// 0: no limit.
    pub rate_limit_per_sec: u32,
    /// Calls the group may make at once above the steady rate (after an idle
    /// spell); 0: one second's worth divided by 20, at least 1.
    pub rate_limit_burst: u32,
    /// Systemic answers (401, 403, TLS, statuses made systemic) an event may
    /// get once a call sent after its first refused one was delivered (the API
    /// refuted "it refuses everything"); at the budget the event is parked with
    /// its reason (`core::systemic`). Attempts, at least 1.
    pub systemic_budget: u32,
}

/// One `[[api.routes]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// The route's name in metric labels and `/status` rows (e.g.
    /// `courier_batch_split_singles_ratio{route}`): A-Z, a-z, 0-9, `.`,
    /// `_`, `-`, at most 64 bytes, unique among the routes; unset: its index
    /// in `[[api.routes]]` (`0`, `1`, …). Never a value an event chose: a
    /// route whose URL takes `{key}` still has one label.
    #[serde(default)]
    pub name: Option<String>,
    /// The CloudEvents type: exact, or a glob (`*`, `?`).
    #[serde(rename = "type")]
    pub event_type: String,
    /// A CEL expression that yields a bool, beside `type`: the route matches
    /// an event when both do (docs/guide: "Filters and routes by
    /// expression"). Checked at start (`courier check-config` names the
    /// route, line and column of an error).
    #[serde(default)]
    pub when: Option<String>,
    /// What a `when` that fails for an event (a missing field, a division by
    /// zero, over its bound) means.
    #[serde(default)]
    pub on_error: OnError,
    /// With `{type}`, `{subject}`, `{id}`, `{key}` in the path and query
    /// (percent-encoded).
    pub url: String,
    #[serde(default)]
    pub method: Method,
    /// Header values with placeholders (inserted as they are; a value HTTP
    /// refuses parks the event `request_unbuildable`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub body: BodyMode,
    /// Batching for this route: any `[api.batch]` field, over the section.
    #[serde(default)]
    pub batch: Option<super::BatchOverride>,
    /// Where this route sends: a name several routes may share (A-Z, a-z,
    /// 0-9, `.`, `_`, `-`), or, unset, the origin of its URL
    /// (`https://host:port`). Each destination has its own circuit breaker,
    /// Redis marker, adaptive limit and rate limit: one API's outage holds
    /// only its own events, and the partition keeps delivering the others'.
    #[serde(default)]
    pub destination: Option<String>,
}

/// Headers Courier sets itself or that belong to one connection: never taken
/// from config or forwarded from Kafka.
pub(crate) const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "idempotency-key",
    "content-type",
    "content-length",
    "host",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "courier-redelivery",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "traceparent",
    "tracestate",
];

/// The most `api.error_body_bytes` may be: the message around it must still fit
/// the envelope's 1 KB limit.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 768;

/// `[api.tls]`: whom to trust, and the client certificate for mTLS. Paths to
/// PEM files (read at start; never their contents in the config).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiTlsConfig {
    /// CA certificates (PEM bundle) that may sign the API's certificate.
    pub ca_file: Option<PathBuf>,
    /// What `ca_file` does to the platform's roots.
    pub ca_mode: CaMode,
    /// Client certificate chain (PEM, leaf first), for an API that requires mTLS.
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1, not encrypted).
    pub key_file: Option<PathBuf>,
}

/// Whether `api.tls.ca_file` replaces the platform's root certificates or is
/// added to them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CaMode {
    /// Trust only `ca_file` (the default): naming a CA file means "the API's
    /// certificate comes from this CA", and no public CA can then vouch for
    /// another server under the API's name. Same meaning as curl's `--cacert`,
    /// librdkafka's `ssl.ca.location` and libpq's `sslrootcert`.
    #[default]
    Replace,
    /// Trust `ca_file` and the platform's roots (e.g. while an API moves from a
    /// public CA to a private one).
    Add,
}

impl ApiTlsConfig {
    /// The files, read and checked (errors name the field).
    pub(crate) fn load(&self) -> Result<crate::tls::ClientFiles, ConfigError> {
        crate::tls::ClientFiles::load(
            "api.tls",
            self.ca_file.as_deref(),
            self.cert_file.as_deref(),
            self.key_file.as_deref(),
        )
        .map_err(|e| invalid(&e.field, e.to_string()))
    }
}

impl CaMode {
    #[cfg(test)]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CaMode::Replace => "replace",
            CaMode::Add => "add",
        }
    }
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            url: "http://127.0.0.1:8080/events".into(),
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(1),
            max_attempts: 3,
            retry_base: Duration::from_millis(100),
            retry_max_delay: Duration::from_secs(1),
            retry_budget: Duration::from_secs(2),
            token_env: None,
            token_file: None,
            oauth2: None,
            signing: None,
            batch: super::BatchConfig::default(),
            rate_limit_unit: super::RateLimitUnit::Requests,
            headers: BTreeMap::new(),
            http2_prior_knowledge: false,
            http2: false,
            allow_plaintext: false,
            pool_max_idle_per_host: 4096,
            tls: ApiTlsConfig::default(),
            status: BTreeMap::new(),
            error_body_bytes: 256,
            routes: Vec::new(),
            forward_headers: Vec::new(),
            adaptive_concurrency: true,
            rate_limit_per_sec: 0,
            rate_limit_burst: 0,
            systemic_budget: 3,
        }
    }
}

impl ApiConfig {
    pub(crate) fn retry_policy(&self) -> InPlaceRetry {
        InPlaceRetry {
            max_attempts: self.max_attempts,
            base_delay: self.retry_base,
            max_delay: self.retry_max_delay,
            total_budget: self.retry_budget,
        }
    }

    /// The status-code policy (`[api.status]` over the defaults).
    pub(crate) fn status_policy(&self) -> Result<StatusPolicy, ConfigError> {
        StatusPolicy::new(&self.status).map_err(|e| invalid("api.status", e.to_string()))
    }

    /// The destinations (`core::destination`): `api.url`'s origin first, then
    /// each route's, in order; with each route's.
    fn destination_plan(&self) -> Result<(Destinations, Vec<DestinationId>), ConfigError> {
        let mut all = Destinations::new(destination::origin(&self.url));
        let mut ids = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.iter().enumerate() {
            let field = format!("api.routes[{i}].destination");
            let name = match &r.destination {
                Some(n) => {
                    destination::check_name(n).map_err(|e| invalid(&field, e.to_string()))?;
                    n.clone()
                }
                None => destination::origin(&r.url),
            };
            ids.push(all.add(&name).map_err(|e| invalid(&field, e.to_string()))?);
        }
        Ok((all, ids))
    }

    /// The destinations, by name (index = `DestinationId`). A configuration
    /// that failed validation has only the default one.
    pub(crate) fn destinations(&self) -> Destinations {
        self.destination_plan()
            .map(|(d, _)| d)
            .unwrap_or_else(|_| Destinations::new(destination::origin(&self.url)))
    }

    /// Each route's name (`api.routes[i].name`, else its index), checked:
    /// well-formed and unique.
    fn route_names(&self) -> Result<Vec<String>, ConfigError> {
        let mut names: Vec<String> = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.iter().enumerate() {
            let field = format!("api.routes[{i}].name");
            let name = match &r.name {
                Some(n) => {
                    destination::check_name(n).map_err(|e| invalid(&field, e.to_string()))?;
                    n.clone()
                }
                None => i.to_string(),
            };
            if let Some(j) = names.iter().position(|n| *n == name) {
                return Err(invalid(
                    &field,
                    format!("\"{name}\" is the name of api.routes[{j}] too (unset, a route is named by its index): route names must be unique"),
                ));
            }
            names.push(name);
        }
        Ok(names)
    }

    /// The routes, parsed (`[[api.routes]]`).
    pub(crate) fn routes(&self) -> Result<Routes, ConfigError> {
        let (destinations, ids) = self.destination_plan()?;
        let names = self.route_names()?;
        let mut out = Vec::with_capacity(self.routes.len());
        for (i, r) in self.routes.iter().enumerate() {
            let field = |f: &str| format!("api.routes[{i}].{f}");
            let url =
                Template::parse_url(&r.url).map_err(|e| invalid(&field("url"), e.to_string()))?;
            let mut headers = Vec::new();
            for (name, value) in &r.headers {
                check_header_name(&field(&format!("headers.{name}")), name)?;
                let t = Template::parse(value)
                    .map_err(|e| invalid(&field(&format!("headers.{name}")), e.to_string()))?;
                headers.push((name.clone(), t));
            }
            if r.event_type.is_empty() {
                return Err(invalid(&field("type"), "must name a type or a glob"));
            }
            let batch = match &r.batch {
                Some(o) => self.batch.with(o).spec(&field("batch"))?,
                None => self.batch.spec("api.batch")?,
            }
            .map(|spec| BatchSpec {
                route: names[i].clone(),
                ..spec
            });
            let when = match &r.when {
                Some(w) => Some(std::sync::Arc::new(Expr::compile(w).map_err(|e| {
                    invalid(
                        &format!("api.routes[{i}].when (route \"{}\")", names[i]),
                        e.to_string(),
                    )
                })?)),
                None => None,
            };
            out.push(Route {
                name: names[i].clone(),
                when,
                on_error: r.on_error,
                types: r.event_type.clone(),
                url,
                method: r.method,
                headers,
                body: r.body,
                batch: batch.map(std::sync::Arc::new),
                destination: ids[i],
            });
        }
        Routes::new(out, destinations).map_err(|e| invalid("api.routes", e.to_string()))
    }

    /// Checks what depends on the input format: `body = "data"` needs CloudEvents.
    pub(crate) fn validate_for_input(
        &self,
        format: crate::core::input::InputFormat,
    ) -> Result<(), ConfigError> {
        if format.is_plain_json() {
            if let Some(i) = self.routes.iter().position(|r| r.body == BodyMode::Data) {
                return Err(invalid(
                    &format!("api.routes[{i}].body"),
                    "\"data\" needs CloudEvents input: with input.format = \"json\" the event has no data member (use \"event\")",
                ));
            }
        }
        Ok(())
    }

    /// Batching of the events no route matches (`[api.batch]`).
    pub(crate) fn batch_spec(
        &self,
    ) -> Result<Option<std::sync::Arc<super::BatchSpec>>, ConfigError> {
        Ok(self.batch.spec("api.batch")?.map(std::sync::Arc::new))
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        self.status_policy()?;
        self.batch_spec()?;
        self.routes()?;
        let https = self.url.starts_with("https://");
        for (i, r) in self.routes.iter().enumerate() {
            let field = format!("api.routes[{i}].url");
            // The URL with every placeholder filled: the same rules as api.url.
            let sample = Template::parse_url(&r.url)
                .map_err(|e| invalid(&field, e.to_string()))?
                .render(&crate::core::mapping::Attributes::default(), true);
            let url = reqwest::Url::parse(&sample).map_err(|e| invalid(&field, e.to_string()))?;
            self.check_url(&field, &url)?;
            if https && url.scheme() != "https" {
                return Err(invalid(
                    &field,
                    "is http:// while api.url is https://: every route must use https:// too",
                ));
            }
        }
        for name in &self.forward_headers {
            check_header_name(&format!("api.forward_headers ({name})"), name)?;
        }
        if self.error_body_bytes > MAX_ERROR_BODY_BYTES {
            return Err(invalid(
                "api.error_body_bytes",
                format!("must be at most {MAX_ERROR_BODY_BYTES} (the envelope's message is cut at 1 KB)"),
            ));
        }
        let url = reqwest::Url::parse(&self.url).map_err(|e| invalid("api.url", e.to_string()))?;
        self.check_url("api.url", &url)?;
        self.validate_transport(&url)?;
        if self.max_attempts == 0 {
            return Err(invalid("api.max_attempts", "must be at least 1"));
        }
        if self.request_timeout.is_zero() {
            return Err(invalid("api.request_timeout", "must be above 0"));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid("api.connect_timeout", "must be above 0"));
        }
        for name in self.headers.keys() {
            check_header_name(&format!("api.headers.{name}"), name)?;
        }
        if self.systemic_budget == 0 {
            return Err(invalid(
                "api.systemic_budget",
                "must be at least 1 (systemic answers an event may get after other calls succeeded)",
            ));
        }
        if self.rate_limit_burst > 0 && self.rate_limit_per_sec == 0 {
            return Err(invalid(
                "api.rate_limit_burst",
                "needs api.rate_limit_per_sec (0 means no limit)",
            ));
        }
        self.validate_auth()
    }

    /// http or https, no credentials, plain HTTP only to loopback unless allowed.
    fn check_url(&self, field: &str, url: &reqwest::Url) -> Result<(), ConfigError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(field, "scheme must be http or https"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                field,
                "must not carry credentials: use api.token_env",
            ));
        }
        if url.scheme() != "https" && !self.allow_plaintext && !is_loopback(url) {
            return Err(invalid(
                field,
                format!(
                    "is plain http:// to {}, which is not loopback: the token and the \
                     events would cross the network in clear. Use https://, or set \
                     api.allow_plaintext = true if the network is trusted",
                    url.host_str().unwrap_or("?")
                ),
            ));
        }
        Ok(())
    }

    /// TLS settings only with https.
    fn validate_transport(&self, url: &reqwest::Url) -> Result<(), ConfigError> {
        let https = url.scheme() == "https";
        let tls = &self.tls;
        if !https {
            let set = [
                ("api.tls.ca_file", tls.ca_file.is_some()),
                ("api.tls.cert_file", tls.cert_file.is_some()),
                ("api.tls.key_file", tls.key_file.is_some()),
            ];
            if let Some((field, _)) = set.iter().find(|(_, on)| *on) {
                return Err(invalid(
                    field,
                    "is set but api.url is http://: TLS settings apply to https:// only",
                ));
            }
        }
        match (&tls.cert_file, &tls.key_file) {
            (Some(_), None) => {
                return Err(invalid(
                    "api.tls.key_file",
                    "is missing: mTLS needs both api.tls.cert_file and key_file",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "api.tls.cert_file",
                    "is missing: mTLS needs both api.tls.cert_file and key_file",
                ))
            }
            _ => {}
        }
        if https && self.http2_prior_knowledge {
            return Err(invalid(
                "api.http2_prior_knowledge",
                "applies to http:// (h2c) only: over https:// set api.http2 = true, and \
                 HTTP/2 is negotiated by ALPN",
            ));
        }
        Ok(())
    }

    /// Reads the TLS files the config names and checks them: present, readable,
    /// PEM, and the key belonging to the certificate. I/O, so not part of
    /// `validate`: `check-config` and `run` call it (through
    /// `Config::check_secrets`); the API client loads the same files itself.
    pub(crate) fn check_tls_files(&self) -> Result<(), ConfigError> {
        self.tls.load().map(|_| ())
    }
}

/// A header name Courier may set from config or copy from Kafka: valid, and not
/// one Courier sets itself or one that belongs to the connection.
fn check_header_name(field: &str, name: &str) -> Result<(), ConfigError> {
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(invalid(field, "is not a valid header name"));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) {
        return Err(invalid(
            field,
            "is set by Courier or belongs to the connection (use api.token_env for the token; \
             traceparent/tracestate are forwarded by themselves)",
        ));
    }
    Ok(())
}

/// Loopback: `localhost` (and `*.localhost`, RFC 6761), 127.0.0.0/8 and ::1.
pub(super) fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<std::net::IpAddr>() {
        return ip.is_loopback();
    }
    let d = host.trim_end_matches('.').to_ascii_lowercase();
    d == "localhost" || d.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_url(url: &str) -> ApiConfig {
        ApiConfig {
            url: url.into(),
            ..ApiConfig::default()
        }
    }

    fn field(r: Result<(), ConfigError>) -> String {
        match r {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("expected an invalid field, got {other:?}"),
        }
    }

    #[test]
    fn a_burst_needs_a_rate() {
        let mut c = with_url("http://127.0.0.1:8080/events");
        c.rate_limit_burst = 10;
        assert_eq!(field(c.validate()), "api.rate_limit_burst");
        c.rate_limit_per_sec = 500;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_systemic_budget_is_at_least_one() {
        let mut c = with_url("http://127.0.0.1:8080/events");
        assert_eq!(c.systemic_budget, 3);
        c.systemic_budget = 0;
        assert_eq!(field(c.validate()), "api.systemic_budget");
        c.systemic_budget = 1;
        assert!(c.validate().is_ok());
    }

    #[test]
    fn plain_http_only_to_loopback_unless_allowed() {
        for ok in [
            "http://127.0.0.1:8080/events",
            "http://127.8.9.10/e",
            "http://localhost:1/e",
            "http://LOCALHOST./e",
            "http://api.localhost/e",
            "http://[::1]:8080/e",
            "https://api.example.com/e",
            "https://10.1.2.3/e",
        ] {
            assert!(with_url(ok).validate().is_ok(), "{ok}");
        }
        for refused in [
            "http://10.1.2.3:8080/events",
            "http://api.example.com/e",
            "http://localhost.example.com/e",
            "http://[::2]/e",
            "http://0.0.0.0/e",
        ] {
            assert_eq!(field(with_url(refused).validate()), "api.url", "{refused}");
            let allowed = ApiConfig {
                allow_plaintext: true,
                ..with_url(refused)
            };
            assert!(allowed.validate().is_ok(), "{refused} with allow_plaintext");
        }
    }

    #[test]
    fn tls_settings_need_https_and_come_in_pairs() {
        let tls = |t: ApiTlsConfig, url: &str| ApiConfig {
            tls: t,
            ..with_url(url)
        };
        let ca = ApiTlsConfig {
            ca_file: Some("/ca.pem".into()),
            ..ApiTlsConfig::default()
        };
        assert_eq!(
            field(tls(ca.clone(), "http://127.0.0.1/e").validate()),
            "api.tls.ca_file"
        );
        assert!(tls(ca, "https://x/e").validate().is_ok());
        // Certificate and key go together: the missing one is named.
        for (cert, key, missing) in [
            (Some("/c.pem"), None, "api.tls.key_file"),
            (None, Some("/k.pem"), "api.tls.cert_file"),
        ] {
            let half = ApiTlsConfig {
                cert_file: cert.map(Into::into),
                key_file: key.map(Into::into),
                ..ApiTlsConfig::default()
            };
            assert_eq!(field(tls(half, "https://x/e").validate()), missing);
        }
        let h2c = ApiConfig {
            http2_prior_knowledge: true,
            ..with_url("https://x/e")
        };
        assert_eq!(field(h2c.validate()), "api.http2_prior_knowledge");
    }

    #[test]
    fn status_rules_are_checked() {
        let cfg = |toml: &str| crate::config::Config::from_toml(toml);
        let ok = cfg("[api.status]\n\"404\" = \"systemic\"\n\"500-599\" = \"transient\"\n\"409\" = \"ok\"\n\"422\" = \"permanent\"")
            .expect("valid rules");
        assert_eq!(ok.api.status.len(), 4);
        for (bad, field) in [
            ("[api.status]\n\"4o4\" = \"ok\"", "api.status"),
            ("[api.status]\n\"700\" = \"ok\"", "api.status"),
            (
                "[api.status]\n\"500-549\" = \"ok\"\n\"520-569\" = \"systemic\"",
                "api.status",
            ),
            ("[api]\nerror_body_bytes = 100000", "api.error_body_bytes"),
        ] {
            match cfg(bad) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{bad}"),
                other => panic!("{bad}: expected {field} refused, got {other:?}"),
            }
        }
        // An unknown action is refused when the config is read.
        assert!(cfg("[api.status]\n\"404\" = \"maybe\"").is_err());
    }

    #[test]
    fn routes_are_named_uniquely_by_name_or_index() {
        let cfg = |toml: &str| crate::config::Config::from_toml(toml);
        let route = |extra: &str| {
            format!(
                "[[api.routes]]\ntype = \"t{}\"\nurl = \"http://127.0.0.1/x/{{key}}\"\n{extra}\n",
                extra.len()
            )
        };
        let batched = format!(
            "[api.batch]\nmax_events = 10\n{}{}",
            route("name = \"orders\""),
            route("")
        );
        let ok = cfg(&batched).expect("valid");
        let routes = ok.api.routes().expect("parsed");
        let names: Vec<String> = ["t15", "t0"]
            .iter()
            .map(|t| {
                let r = routes.find(t).expect("a route");
                r.batch.as_ref().expect("batched").route.clone()
            })
            .collect();
        assert_eq!(names, ["orders", "1"], "a name, else the index");
        assert_eq!(
            ok.api.batch_spec().expect("ok").expect("batched").route,
            crate::core::batch::UNROUTED
        );
        for (toml, field) in [
            (
                format!("{}{}", route("name = \"a\""), route("name = \"a\"")),
                "api.routes[1].name",
            ),
            (
                format!("{}{}", route(""), route("name = \"0\"")),
                "api.routes[1].name",
            ),
            (route("name = \"a b\""), "api.routes[0].name"),
            (route("name = \"\""), "api.routes[0].name"),
        ] {
            match cfg(&toml) {
                Err(ConfigError::Invalid { field: f, .. }) => assert_eq!(f, field, "{toml}"),
                other => panic!("{toml}: expected {field} refused, got {other:?}"),
            }
        }
    }

    #[test]
    fn routes_and_forwarded_headers_are_checked() {
        let cfg = |toml: &str| crate::config::Config::from_toml(toml);
        let field_of = |toml: &str| match cfg(toml) {
            Err(ConfigError::Invalid { field, .. }) => field,
            other => panic!("{toml}: expected a refusal, got {other:?}"),
        };
        let ok = cfg(r#"
[api]
forward_headers = ["X-Tenant"]
[[api.routes]]
type = "order.*"
url = "http://127.0.0.1:1/orders/{subject}?key={key}"
method = "PUT"
body = "data"
headers = { "X-Type" = "{type}" }
"#)
        .expect("valid routes");
        assert_eq!(
            ok.api
                .routes()
                .expect("parsed")
                .find("order.paid")
                .map(|r| r.method),
            Some(Method::Put)
        );
        for (toml, field) in [
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/{tenant}\"", "api.routes[0].url"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://{subject}/x\"", "api.routes[0].url"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://api.example.com/x\"", "api.routes[0].url"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://u:p@127.0.0.1/x\"", "api.routes[0].url"),
            ("[[api.routes]]\ntype = \"\"\nurl = \"http://127.0.0.1/x\"", "api.routes[0].type"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"\nheaders = { \"Authorization\" = \"x\" }", "api.routes[0].headers.Authorization"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"\nheaders = { \"X\" = \"{nope}\" }", "api.routes[0].headers.X"),
            ("[api]\nurl = \"https://api.example.com/e\"\n[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"", "api.routes[0].url"),
            ("[input]\nformat = \"json\"\n[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"\nbody = \"data\"", "api.routes[0].body"),
            ("[api]\nforward_headers = [\"Idempotency-Key\"]", "api.forward_headers (Idempotency-Key)"),
            ("[api]\nforward_headers = [\"transfer-encoding\"]", "api.forward_headers (transfer-encoding)"),
            ("[api]\nforward_headers = [\"bad header\"]", "api.forward_headers (bad header)"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"\ndestination = \"crm eu\"", "api.routes[0].destination"),
            ("[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"\ndestination = \"\"", "api.routes[0].destination"),
        ] {
            assert_eq!(field_of(toml), field, "{toml}");
        }
        // An unknown method is refused when the config is read.
        assert!(cfg(
            "[[api.routes]]\ntype = \"a\"\nurl = \"http://127.0.0.1/x\"\nmethod = \"DELETE\""
        )
        .is_err());
    }

    #[test]
    fn routes_send_to_destinations_by_name_or_origin() {
        let c = crate::config::Config::from_toml(
            r#"
[api]
url = "http://127.0.0.1:9000/events"
[[api.routes]]
type = "a.*"
url = "http://127.0.0.1:9001/a/{type}"
[[api.routes]]
type = "b.*"
url = "http://127.0.0.1:9002/b"
destination = "crm"
[[api.routes]]
type = "c.*"
url = "http://127.0.0.1:9003/c"
destination = "crm"
[[api.routes]]
type = "d.*"
url = "http://127.0.0.1:9000/d"
"#,
        )
        .expect("valid");
        let names = c.api.destinations();
        assert_eq!(
            names.names(),
            ["http://127.0.0.1:9000", "http://127.0.0.1:9001", "crm"],
            "api.url's origin first; a named destination shared; a route to api.url's origin is its destination"
        );
        let r = c.api.routes().expect("parsed");
        let id = |t: &str| r.destination(t).index();
        assert_eq!(
            [id("a.x"), id("b.x"), id("c.x"), id("d.x"), id("z")],
            [1, 2, 2, 0, 0]
        );
        assert_eq!(r.reachable(), crate::core::destination::DestSet::first(3));
        // A route that takes every type leaves api.url's destination unreachable.
        let c = crate::config::Config::from_toml(
            "[api]\nurl = \"http://127.0.0.1:9000/e\"\n[[api.routes]]\ntype = \"*\"\nurl = \"http://127.0.0.1:9001/x\"\n",
        )
        .expect("valid");
        let r = c.api.routes().expect("parsed");
        let mut only = crate::core::destination::DestSet::default();
        only.insert(r.destination("any"));
        assert_eq!((r.reachable(), r.destination("any").index()), (only, 1));
    }

    #[test]
    fn ca_mode_defaults_to_replace() {
        assert_eq!(ApiTlsConfig::default().ca_mode, CaMode::Replace);
        assert_eq!(CaMode::Add.as_str(), "add");
    }
}
