//! `/status` as HTML: the [`Snapshot`] of `/status.json`, formatted. Pure (no I/O,
//! the snapshot carries its own time), so it is tested without a server. The page
//! refreshes itself every [`REFRESH_SECONDS`] with a meta refresh; no script.
//!
//! Elements a test or a scraper may rely on carry ids or `data-*` attributes:
//! `#verdict[data-api-unavailable]`, `#breaker-state[data-state]`,
//! `#breaker-transition`, `#marker-state[data-state]`, `#marker-transition`,
//! `#health-source[data-source]`, `#ready[data-ok]`, `#live[data-ok]`,
//! `tr.partition[data-partition][data-mode]`, `tr.error[data-class][data-reason]`.

use super::{Snapshot, StateSnapshot, TransitionSnapshot};
use std::fmt::Write;

pub(crate) const REFRESH_SECONDS: u32 = 5;

/// Escapes text for HTML element content and double-quoted attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `1h 02m 03s`, `4m 05s`, `6s`.
pub(crate) fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s:02}s"),
        (0, _, _) => format!("{h}h {m:02}m {s:02}s"),
        _ => format!("{d}d {h:02}h {m:02}m"),
    }
}

/// An epoch-ms time in UTC (`2026-11-30 18:39:19 UTC`) and how long before `now_ms`.
fn when(at_ms: i64, now_ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    let utc = humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace('T', " ")
        .replace('Z', " UTC");
    let ago = u64::try_from((now_ms - at_ms).max(0) / 1000).unwrap_or(0);
    format!("{utc} ({} ago)", duration(ago))
}

/// A time ahead (or just past): `2026-12-02 05:00:00 UTC (in 42s)`.
fn until_text(at_ms: i64, now_ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(at_ms).unwrap_or(0));
    let utc = humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace('T', " ")
        .replace('Z', " UTC");
    if at_ms >= now_ms {
        let left = u64::try_from((at_ms - now_ms) / 1000).unwrap_or(0);
        format!("{utc} (in {})", duration(left))
    } else {
        let ago = u64::try_from((now_ms - at_ms) / 1000).unwrap_or(0);
        format!("{utc} ({} ago)", duration(ago))
    }
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "–".into(), |v| v.to_string())
}

fn transition(t: &Option<TransitionSnapshot>, now_ms: i64) -> String {
    match t {
        Some(t) => format!(
            "{} → {} <span class=\"reason\">{}</span> at {}",
            esc(&t.from),
            esc(&t.to),
            esc(&t.reason),
            esc(&when(t.at_ms, now_ms))
        ),
        None => "none since start".into(),
    }
}

fn state_rows(out: &mut String, name: &str, id: &str, s: &StateSnapshot, now_ms: i64) {
    let _ = write!(
        out,
        "<tr><th>{name}</th><td><span id=\"{id}-state\" class=\"badge s-{st}\" data-state=\"{st}\">{st}</span></td></tr>\
         <tr><th>last transition</th><td id=\"{id}-transition\">{tr}</td></tr>",
        st = esc(&s.state),
        tr = transition(&s.last, now_ms),
    );
}

fn probe(out: &mut String, id: &str, name: &str, p: &super::Probe) {
    let text = match (&p.reason, p.ok) {
        (_, true) => "ok".to_string(),
        (Some(r), false) => format!("failing: {r}"),
        (None, false) => "failing".to_string(),
    };
    let _ = write!(
        out,
        "<tr><th>{name}</th><td id=\"{id}\" class=\"{cls}\" data-ok=\"{ok}\">{text}</td></tr>",
        cls = if p.ok { "good" } else { "bad" },
        ok = p.ok,
        text = esc(&text),
    );
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
table{border-collapse:collapse}th,td{padding:.25em .7em;border-bottom:1px solid #ddd;text-align:left}\
td.num{text-align:right;font-variant-numeric:tabular-nums}\
.badge{padding:.1em .5em;border-radius:.3em;font-weight:600}\
.s-closed,.s-absent,.s-normal,.good{color:#0a6d2c}.s-closed,.s-absent,.s-normal{background:#dff5e5}\
.s-open,.s-present,.s-paused,.s-unreachable,.bad{color:#a4161a}.s-open,.s-present,.s-paused,.s-unreachable{background:#fde2e2}\
.s-half_open,.s-drain_dlq,.s-unknown{color:#8a5a00;background:#fff1cc}\
#verdict{font-size:1.1em;padding:.4em .8em;display:inline-block;border-radius:.3em}\
.reason{font-family:monospace}.meta{color:#666}";

/// The page for `s`.
/// The API credential's rows: its kind, an OAuth2 token's expiry, last
/// refresh and last failure (never the token).
fn credential_rows(o: &mut String, c: &super::CredentialSnapshot, now: i64) {
    let state = match (&c.last_error, c.valid_until_ms) {
        (Some(e), _) => e.as_str(),
        (None, Some(until)) if until > now => "valid",
        (None, Some(_)) => "expired",
        (None, None) if c.kind == "oauth2" => "none yet",
        (None, None) => "static",
    };
    let _ = write!(
        o,
        "<tr><th>API credential</th><td id=\"credential\" data-kind=\"{k}\" data-state=\"{st}\">{k}: {st}</td></tr>",
        k = esc(&c.kind),
        st = esc(state)
    );
    if let Some(until) = c.valid_until_ms {
        let _ = write!(
            o,
            "<tr><th>token valid until</th><td id=\"credential-until\">{}</td></tr>",
            esc(&until_text(until, now))
        );
    }
    if let Some(at) = c.last_refresh_ms {
        let _ = write!(
            o,
            "<tr><th>token last refreshed</th><td>{}</td></tr>",
            esc(&when(at, now))
        );
    }
}

pub(crate) fn render(s: &Snapshot) -> String {
    let now = s.now_ms;
    let mut o = String::with_capacity(8 * 1024);
    let _ = write!(
        o,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>Courier {inst} — status</title><style>{STYLE}</style></head><body>\
         <h1>Courier <span id=\"instance\">{inst}</span></h1>\
         <p class=\"meta\">group <b id=\"group\">{group}</b> · version <span id=\"version\">{ver}</span>{commit} · \
         refreshes every {REFRESH_SECONDS}s · <a href=\"status.json\">status.json</a> · <a href=\"metrics\">metrics</a></p>",
        inst = esc(&s.instance),
        group = esc(&s.group),
        ver = esc(&s.version),
        commit = s
            .commit
            .as_deref()
            .map(|c| format!(" (<span id=\"commit\">{}</span>)", esc(c)))
            .unwrap_or_default(),
    );
    // With several destinations: paused only when every one is down; one
    // down holds its own events.
    let down: Vec<&str> = s
        .destinations
        .iter()
        .filter(|d| d.health.api_unavailable)
        .map(|d| d.name.as_str())
        .collect();
    let some_down;
    let (cls, text) = if s.destinations.is_empty() {
        if s.health.api_unavailable {
            ("s-paused", "API unavailable: partitions paused")
        } else {
            ("s-normal", "API available")
        }
    } else if down.len() == s.destinations.len() {
        (
            "s-paused",
            "every destination unavailable: partitions paused",
        )
    } else if !down.is_empty() {
        some_down = format!(
            "unavailable: {} (its events held; the others flow)",
            down.join(", ")
        );
        ("s-half_open", some_down.as_str())
    } else {
        ("s-normal", "every destination available")
    };
    let _ = write!(
        o,
        "<p id=\"verdict\" class=\"{cls}\" data-api-unavailable=\"{}\">{}</p>",
        s.health.api_unavailable,
        esc(text)
    );

    o.push_str("<h2>Instance</h2><table>");
    let _ = write!(
        o,
        "<tr><th>topics</th><td>main <b>{}</b> · DLQ <b>{}</b> · parking lot <b>{}</b></td></tr>\
         <tr><th>started</th><td>{}</td></tr><tr><th>uptime</th><td id=\"uptime\">{}</td></tr>",
        esc(&s.topics.main),
        esc(&s.topics.dlq),
        esc(&s.topics.parking),
        esc(&when(s.started_at_ms, now)),
        duration(s.uptime_s),
    );
    probe(&mut o, "ready", "readiness (/readyz)", &s.ready);
    probe(&mut o, "live", "liveness (/healthz)", &s.live);
    o.push_str("</table>");

    o.push_str("<h2>Health</h2><table>");
    let source = match s.health.source.as_str() {
        "breaker+marker" => "breaker + Redis marker",
        "breaker_only" => "breaker only (Redis unreachable)",
        other => other,
    };
    let _ = write!(
        o,
        "<tr><th>verdict rests on</th><td id=\"health-source\" data-source=\"{}\">{}</td></tr>",
        esc(&s.health.source),
        esc(source)
    );
    state_rows(&mut o, "circuit breaker", "breaker", &s.health.breaker, now);
    state_rows(&mut o, "Redis marker", "marker", &s.health.marker, now);
    // With more than one destination: each one's verdict, breaker and marker.
    for (i, d) in s.destinations.iter().enumerate() {
        let _ = write!(
            o,
            "<tr><th>destination</th><td id=\"destination-{i}\" data-api-unavailable=\"{}\"><b>{}</b>: {}</td></tr>",
            d.health.api_unavailable,
            esc(&d.name),
            if d.health.api_unavailable { "unavailable: its events are held" } else { "available" }
        );
        state_rows(
            &mut o,
            "· circuit breaker",
            &format!("breaker-{i}"),
            &d.health.breaker,
            now,
        );
        state_rows(
            &mut o,
            "· Redis marker",
            &format!("marker-{i}"),
            &d.health.marker,
            now,
        );
    }
    if let Some(at) = s.health.evaluated_at_ms {
        let _ = write!(
            o,
            "<tr><th>evaluated</th><td>{}</td></tr>",
            esc(&when(at, now))
        );
    }
    if let Some(c) = &s.credential {
        credential_rows(&mut o, c, now);
    }
    for b in &s.batch_splits {
        let share = (b.alone_after_split * 100)
            .checked_div(b.events)
            .unwrap_or(0);
        let _ = write!(
            o,
            "<tr><th>batches split to single events</th><td class=\"batch-splits\" data-mostly-singles=\"{}\">{}: {share} % of {} events answered alone after a split (last 10 s){}</td></tr>",
            b.mostly_singles,
            esc(&b.route),
            b.events,
            if b.mostly_singles {
                " — the endpoint may take single events only"
            } else {
                ""
            }
        );
    }
    o.push_str("</table>");

    let _ = write!(
        o,
        "<h2>Partitions (<span id=\"partition-count\">{}</span>)</h2>",
        s.partitions.len()
    );
    if s.partitions.is_empty() {
        o.push_str("<p id=\"no-partitions\">No partition assigned.</p>");
    } else {
        o.push_str(
            "<table id=\"partitions\"><tr><th>partition</th><th>mode</th><th>watermark</th>\
             <th>lag</th><th>in flight (held)</th><th>dispatched</th><th>DLQ lag</th></tr>",
        );
        for p in &s.partitions {
            let _ = write!(
                o,
                "<tr class=\"partition\" data-partition=\"{n}\" data-mode=\"{m}\"><td class=\"num\">{n}</td>\
                 <td><span class=\"badge s-{m}\">{m}</span></td><td class=\"num\">{wm}</td><td class=\"num\">{lag}</td>\
                 <td class=\"num\">{held}</td><td class=\"num\">{fl}</td><td class=\"num\">{dl}</td></tr>",
                n = p.partition,
                m = esc(&p.mode),
                wm = opt(p.watermark),
                lag = opt(p.lag),
                held = p.held,
                fl = p.dispatched,
                dl = opt(p.dlq_lag),
            );
        }
        o.push_str("</table>");
    }

    let _ = write!(
        o,
        "<h2>Delivery errors, last {}</h2>",
        duration(s.errors.span_s.min(s.errors.window_s))
    );
    if s.errors.by_reason.is_empty() {
        o.push_str("<p id=\"no-errors\">None since start.</p>");
    } else {
        o.push_str(
            "<table id=\"errors\"><tr><th>class</th><th>reason</th><th>recent</th><th>since start</th></tr>",
        );
        for e in &s.errors.by_reason {
            let _ = write!(
                o,
                "<tr class=\"error\" data-class=\"{c}\" data-reason=\"{r}\"><td>{c}</td><td class=\"reason\">{r}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                e.recent,
                e.total,
                c = esc(&e.class),
                r = esc(&e.reason),
            );
        }
        o.push_str("</table>");
    }
    let _ = write!(
        o,
        "<p class=\"meta\">as of {}</p></body></html>",
        esc(&when(now, now))
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status_page::{
        ErrorRow, ErrorsSnapshot, HealthSnapshot, PartitionSnapshot, Probe, Topics,
    };

    fn snapshot() -> Snapshot {
        let json = r#"{
          "instance": "pod-<1>", "group": "g&h",
          "topics": {"main": "t", "dlq": "t.dlq", "parking": "t.parking"},
          "version": "0.1.0", "commit": "abc123",
          "started_at_ms": 1764527959000, "now_ms": 1764531661000, "uptime_s": 3702,
          "ready": {"ok": true, "reason": null},
          "live": {"ok": false, "reason": "wedged: events held"},
          "health": {
            "api_unavailable": true, "source": "breaker+marker", "evaluated_at_ms": 1764531660900,
            "breaker": {"state": "open", "last": {"from": "closed", "to": "open",
                        "reason": "consecutive_failures", "at_ms": 1764531649000}},
            "marker": {"state": "present", "last": null}
          },
          "partitions": [
            {"partition": 0, "mode": "paused", "watermark": 120, "lag": 880, "held": 12, "dispatched": 4, "dlq_lag": 0},
            {"partition": 1, "mode": "paused", "watermark": null, "lag": null, "held": 0, "dispatched": 0, "dlq_lag": null}
          ],
          "errors": {"window_s": 300, "span_s": 300, "by_reason": [
            {"class": "transient", "reason": "http_503", "recent": 37, "total": 40}
          ]}
        }"#;
        serde_json::from_str(json).expect("the JSON of /status.json parses")
    }

    #[test]
    fn the_page_shows_what_the_json_says() {
        let html = render(&snapshot());
        for needle in [
            "<meta http-equiv=\"refresh\" content=\"5\">",
            "id=\"instance\">pod-&lt;1&gt;</span>",
            "id=\"group\">g&amp;h</b>",
            "id=\"commit\">abc123</span>",
            "data-api-unavailable=\"true\">API unavailable: partitions paused",
            "id=\"breaker-state\" class=\"badge s-open\" data-state=\"open\">open</span>",
            "closed → open <span class=\"reason\">consecutive_failures</span> at 2025-11-30 19:40:49 UTC (12s ago)",
            "id=\"marker-state\" class=\"badge s-present\" data-state=\"present\"",
            "id=\"marker-transition\">none since start",
            "data-source=\"breaker+marker\">breaker + Redis marker",
            "id=\"ready\" class=\"good\" data-ok=\"true\">ok",
            "id=\"live\" class=\"bad\" data-ok=\"false\">failing: wedged: events held",
            "id=\"uptime\">1h 01m 42s",
            "<tr class=\"partition\" data-partition=\"0\" data-mode=\"paused\"><td class=\"num\">0</td>",
            "<td class=\"num\">120</td><td class=\"num\">880</td><td class=\"num\">12</td><td class=\"num\">4</td><td class=\"num\">0</td>",
            "data-partition=\"1\" data-mode=\"paused\"",
            "id=\"partition-count\">2<",
            "Delivery errors, last 5m 00s",
            "data-class=\"transient\" data-reason=\"http_503\"",
            "<td class=\"num\">37</td><td class=\"num\">40</td>",
        ] {
            assert!(html.contains(needle), "missing {needle:?} in\n{html}");
        }
        assert!(!html.contains("<script"), "no script on the page");
        assert!(!html.contains("pod-<1>"), "text is escaped");
    }

    #[test]
    fn each_destination_shows_its_verdict_breaker_and_marker() {
        let mut s = snapshot();
        let mut up = s.health.clone();
        up.api_unavailable = false;
        up.breaker.state = "closed".into();
        s.destinations = vec![
            super::super::DestinationSnapshot {
                name: "http://crm<1>".into(),
                health: up,
            },
            super::super::DestinationSnapshot {
                name: "search".into(),
                health: s.health.clone(),
            },
        ];
        let html = render(&s);
        for needle in [
            "unavailable: search (its events held; the others flow)",
            "id=\"destination-0\" data-api-unavailable=\"false\"><b>http://crm&lt;1&gt;</b>: available",
            "id=\"destination-1\" data-api-unavailable=\"true\"><b>search</b>: unavailable",
            "id=\"breaker-0-state\" class=\"badge s-closed\"",
            "id=\"breaker-1-state\" class=\"badge s-open\"",
            "id=\"marker-1-state\"",
        ] {
            assert!(html.contains(needle), "missing {needle:?} in\n{html}");
        }
    }

    #[test]
    fn the_api_credential_shows_its_state_and_never_a_token() {
        let base = snapshot();
        let now = base.now_ms;
        let s = Snapshot {
            credential: Some(super::super::CredentialSnapshot {
                kind: "oauth2".into(),
                valid_until_ms: Some(now + 42_000),
                last_refresh_ms: Some(now - 3_000),
                last_error: None,
            }),
            ..base.clone()
        };
        let html = render(&s);
        assert!(
            html.contains("id=\"credential\" data-kind=\"oauth2\" data-state=\"valid\""),
            "{html}"
        );
        assert!(html.contains("(in 42s)"), "{html}");
        assert!(
            html.contains("token last refreshed</th><td>2025-11-30 19:40:58 UTC (3s ago)"),
            "{html}"
        );
        let failing = Snapshot {
            credential: Some(super::super::CredentialSnapshot {
                kind: "oauth2".into(),
                valid_until_ms: Some(now - 1_000),
                last_refresh_ms: None,
                last_error: Some("auth_token_refused".into()),
            }),
            ..base.clone()
        };
        let html = render(&failing);
        assert!(
            html.contains("data-state=\"auth_token_refused\">oauth2: auth_token_refused"),
            "{html}"
        );
        assert!(
            !render(&base).contains("id=\"credential\""),
            "no credential, no row"
        );
    }

    #[test]
    fn empty_states_are_said_not_left_blank() {
        let s = Snapshot {
            partitions: Vec::new(),
            errors: ErrorsSnapshot {
                window_s: 300,
                span_s: 7,
                by_reason: Vec::new(),
            },
            health: HealthSnapshot {
                api_unavailable: false,
                source: "breaker_only".into(),
                evaluated_at_ms: None,
                ..snapshot().health
            },
            commit: None,
            ..snapshot()
        };
        let html = render(&s);
        assert!(html.contains("id=\"no-partitions\">No partition assigned."));
        assert!(html.contains("Delivery errors, last 7s"));
        assert!(html.contains("id=\"no-errors\">None since start."));
        assert!(html.contains("breaker only (Redis unreachable)"));
        assert!(html.contains("data-api-unavailable=\"false\">API available"));
        assert!(!html.contains("id=\"commit\""));
    }

    #[test]
    fn snapshot_round_trips_through_json() {
        let s = Snapshot {
            topics: Topics {
                main: "a".into(),
                dlq: "a.dlq".into(),
                parking: "a.parking".into(),
            },
            ready: Probe::of(Err("not assigned")),
            partitions: vec![PartitionSnapshot {
                partition: 3,
                mode: "drain_dlq".into(),
                watermark: Some(1),
                lag: Some(2),
                held: 3,
                dispatched: 4,
                dlq_lag: Some(5),
            }],
            errors: ErrorsSnapshot {
                window_s: 300,
                span_s: 300,
                by_reason: vec![ErrorRow {
                    class: "systemic".into(),
                    reason: "http_401".into(),
                    recent: 1,
                    total: 2,
                }],
            },
            ..snapshot()
        };
        let json = serde_json::to_string(&s).expect("serialize");
        let back: Snapshot = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, s);
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(65), "1m 05s");
        assert_eq!(duration(3_600), "1h 00m 00s");
        assert_eq!(duration(90_061), "1d 01h 01m");
    }
}
