//! Lints `dashboards/` without any service: every metric a dashboard panel, a dashboard
//! variable or an alert rule uses must be one Courier registers (`courier::metrics::ALL`),
//! histograms only through their `_bucket`/`_sum`/`_count` series; dashboard queries use
//! the template variables (`$group`, `$instance`, `$partition`, `$__rate_interval`,
//! `$__range`) and the `datasource` variable; every alert has a severity, a summary, a
//! description and a `runbook_url` whose anchor exists in dashboards/README.md, every
//! selector of a rule carries `group!=""` (the Helm chart scopes it to its release's
//! group), and every alert fires in at least one case of alerts_test.yml.
//! `scripts/check-dashboards.sh` runs promtool and the Grafana schema/lint check on the
//! same files; `tests/observability.rs` runs them against a real Prometheus.
//!
//! No YAML parser here (no new dependency): alert expressions are taken from the `expr:`
//! lines textually; `promtool check rules` (in the observability test) parses them properly.

use courier::metrics::{ALL, DELIVERY_LATENCY, EVENT_AGE};
use serde_json::Value;
use std::path::{Path, PathBuf};

const HISTOGRAMS: &[&str] = &[DELIVERY_LATENCY, EVENT_AGE];

/// The alerts the operators rely on (dashboards/README.md explains each).
const REQUIRED_ALERTS: &[&str] = &[
    "CourierApiUnavailable",
    "CourierDlqGrowing",
    "CourierDlqDropped",
    "CourierApiRejectedEvents",
    "CourierParkFlood",
    "CourierLagGrowing",
    "CourierFreshnessSlo",
    "CourierBreakerOpenTooLong",
    "CourierRedisUnreachable",
    "CourierActorRestarts",
    "CourierInstanceDown",
    "CourierNotConsuming",
    "CourierGroupGone",
    "CourierAbsent",
    "CourierDlqWriteFailing",
];

/// The matcher every selector of a Courier series in alerts.yml carries; the Helm chart
/// replaces it with `group="<the release's group>"`.
const GROUP_MATCHER: &str = "group!=\"\"";

/// Template variables a dashboard query may use.
const KNOWN_VARIABLES: &[&str] = &[
    "$group",
    "${group}",
    "$instance",
    "${instance}",
    "$partition",
    "${partition}",
    "$__rate_interval",
    "$__range",
    "$__interval",
];

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards")
}

/// Every `*.json` under `dashboards/`.
fn dashboard_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "json") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboards_dir(), &mut out);
    out.sort();
    out
}

/// Every panel of a dashboard, rows' nested panels included.
fn panels(dash: &Value) -> Vec<&Value> {
    fn walk<'a>(list: &'a Value, out: &mut Vec<&'a Value>) {
        for p in list.as_array().into_iter().flatten() {
            out.push(p);
            if let Some(nested) = p.get("panels") {
                walk(nested, out);
            }
        }
    }
    let mut out = Vec::new();
    if let Some(list) = dash.get("panels") {
        walk(list, &mut out);
    }
    out
}

/// (panel title, expr) of every query target of a dashboard.
fn panel_exprs(dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(dash) {
        let title = p["title"].as_str().unwrap_or("?").to_string();
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((title.clone(), t["expr"].as_str().unwrap_or("").to_string()));
        }
    }
    out
}

/// (variable name, query) of every query variable of a dashboard.
fn variable_queries(dash: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for v in dash["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] != "query" {
            continue;
        }
        let name = v["name"].as_str().unwrap_or("?").to_string();
        let q = match &v["query"] {
            Value::String(s) => s.clone(),
            q => q["query"].as_str().unwrap_or("").to_string(),
        };
        out.push((name.clone(), q));
        if let Some(d) = v["definition"].as_str() {
            out.push((name, d.to_string()));
        }
    }
    out
}

/// The rules' `expr:` values (block scalars `>-`, `|` ... joined into one line), with the
/// name of the alert or recording rule they belong to.
fn alert_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out = Vec::new();
    let mut alert = String::from("?");
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start().trim_start_matches("- ");
        if let Some(name) = t
            .strip_prefix("alert:")
            .or_else(|| t.strip_prefix("record:"))
        {
            alert = name.trim().to_string();
        }
        if let Some(v) = t.strip_prefix("expr:") {
            let v = v.trim();
            if matches!(v, ">" | ">-" | ">+" | "|" | "|-" | "|+") {
                let base = indent(l);
                let mut parts = Vec::new();
                while i + 1 < lines.len()
                    && (lines[i + 1].trim().is_empty() || indent(lines[i + 1]) > base)
                {
                    i += 1;
                    parts.push(lines[i].trim());
                }
                out.push((alert.clone(), parts.join(" ").trim().to_string()));
            } else {
                out.push((
                    alert.clone(),
                    v.trim_matches(|c| c == '"' || c == '\'').into(),
                ));
            }
        }
        i += 1;
    }
    out
}

/// Every `courier_*` metric name in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = expr[i..].find("courier_") {
        let start = i + off;
        let mut end = start;
        while end < b.len() && ident(b[end]) {
            end += 1;
        }
        if start == 0 || !ident(b[start - 1]) {
            out.push(expr[start..end].to_string());
        }
        i = end.max(start + 1);
    }
    out
}

/// Why `name` is not a series Courier exposes, if it is not.
fn unknown_metric(name: &str) -> Option<String> {
    let known = |n: &str| ALL.iter().any(|(m, _)| *m == n);
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if HISTOGRAMS.contains(&base) {
                return None;
            }
            if known(base) {
                return Some(format!("{base} is not a histogram: there is no {name}"));
            }
        }
    }
    if HISTOGRAMS.contains(&name) {
        return Some(format!(
            "{name} is a histogram: Prometheus has only {name}_bucket/_sum/_count"
        ));
    }
    if known(name) {
        None
    } else {
        Some(format!("{name} is not in courier::metrics::ALL"))
    }
}

/// Problems with the metrics used by `(where, expr)` pairs.
fn unknown_metrics(exprs: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (at, expr) in exprs {
        let names = metric_names(expr);
        if names.is_empty() && !expr.contains("up{") {
            bad.push(format!("{at}: no courier_* metric in `{expr}`"));
        }
        for n in names {
            if let Some(why) = unknown_metric(&n) {
                bad.push(format!("{at}: {why} (in `{expr}`)"));
            }
        }
    }
    bad
}

/// Every selector of a courier metric in `expr` that lacks one of the `required`
/// matchers (a bare metric name has none).
fn selector_problems(title: &str, expr: &str, required: &[&str]) -> Vec<String> {
    let mut bad = Vec::new();
    let names: std::collections::BTreeSet<String> = metric_names(expr).into_iter().collect();
    for n in names {
        let mut from = 0;
        while let Some(off) = expr[from..].find(n.as_str()) {
            let at = from + off + n.len();
            let rest = &expr[at..];
            let next_is_ident = rest
                .bytes()
                .next()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_');
            let prev_is_ident = expr[..from + off]
                .bytes()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':');
            if !next_is_ident && !prev_is_ident {
                let sel = rest
                    .strip_prefix('{')
                    .and_then(|r| r.split_once('}'))
                    .map(|(s, _)| s);
                for m in required {
                    if !sel.is_some_and(|s| s.contains(m)) {
                        bad.push(format!("{title}: `{n}` without {m} in `{expr}`"));
                    }
                }
            }
            from = at;
        }
    }
    bad
}

/// Dashboard-only rules: queries use the variables, and only known ones.
fn query_style_problems(title: &str, expr: &str) -> Vec<String> {
    let mut bad = Vec::new();
    if expr.trim().is_empty() {
        bad.push(format!("{title}: empty expr"));
        return bad;
    }
    // Every selector of a courier metric filters on the group and instance variables.
    bad.extend(selector_problems(
        title,
        expr,
        &["group=~\"$group\"", "instance=~\"$instance\""],
    ));
    // Range selectors use Grafana's intervals, never a fixed window.
    let mut rest = expr;
    while let Some(i) = rest.find('[') {
        let after = &rest[i + 1..];
        let Some(j) = after.find(']') else {
            bad.push(format!("{title}: unbalanced [ in `{expr}`"));
            break;
        };
        let window = &after[..j];
        if !matches!(window, "$__rate_interval" | "$__range" | "$__interval") {
            bad.push(format!(
                "{title}: range [{window}] should be $__rate_interval or $__range in `{expr}`"
            ));
        }
        rest = &after[j..];
    }
    // Only variables Grafana (or this dashboard) defines.
    let mut rest = expr;
    while let Some(i) = rest.find('$') {
        let var = &rest[i..];
        if !KNOWN_VARIABLES.iter().any(|v| {
            var.starts_with(v)
                && !var[v.len()..]
                    .bytes()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
        }) {
            let end = var[1..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '{' || c == '}'))
                .map_or(var.len(), |e| e + 1);
            bad.push(format!(
                "{title}: unknown variable {} in `{expr}`",
                &var[..end]
            ));
        }
        rest = &rest[i + 1..];
    }
    bad
}

fn load(p: &Path) -> Value {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", p.display()))
}

#[test]
fn dashboards_use_only_courier_metrics() {
    let files = dashboard_files();
    assert!(
        files.iter().any(|p| p.ends_with("courier-overview.json")),
        "dashboards/courier-overview.json is missing (found {files:?})"
    );
    let mut bad = Vec::new();
    let mut count = 0;
    for f in &files {
        let dash = load(f);
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let mut exprs: Vec<(String, String)> = panel_exprs(&dash)
            .into_iter()
            .map(|(t, e)| (format!("{name} panel \"{t}\""), e))
            .collect();
        exprs.extend(
            variable_queries(&dash)
                .into_iter()
                .map(|(v, q)| (format!("{name} variable ${v}"), q)),
        );
        count += exprs.len();
        bad.extend(unknown_metrics(&exprs));
    }
    assert!(bad.is_empty(), "unknown metrics:\n{}", bad.join("\n"));
    println!(
        "{count} dashboard queries in {} file(s) use only Courier's metrics",
        files.len()
    );
}

#[test]
fn alert_rules_use_only_courier_metrics() {
    let yaml = std::fs::read_to_string(dashboards_dir().join("alerts.yml")).expect("alerts.yml");
    let exprs = alert_exprs(&yaml);
    assert!(exprs.len() >= REQUIRED_ALERTS.len(), "exprs: {exprs:?}");
    let bad = unknown_metrics(&exprs);
    assert!(bad.is_empty(), "unknown metrics:\n{}", bad.join("\n"));
}

#[test]
fn alert_rules_are_complete() {
    let yaml = std::fs::read_to_string(dashboards_dir().join("alerts.yml")).expect("alerts.yml");
    assert!(
        yaml.contains("- name: courier"),
        "the rule group is named courier"
    );
    // Split into one block per rule.
    let blocks: Vec<&str> = yaml.split("- alert:").skip(1).collect();
    let names: Vec<&str> = blocks
        .iter()
        .map(|b| b.lines().next().unwrap_or("").trim())
        .collect();
    let mut bad = Vec::new();
    for want in REQUIRED_ALERTS {
        if !names.contains(want) {
            bad.push(format!("missing alert {want}"));
        }
    }
    for (name, block) in names.iter().zip(&blocks) {
        for key in [
            "expr:",
            "severity:",
            "summary:",
            "description:",
            "runbook_url:",
        ] {
            if !block.contains(key) {
                bad.push(format!("{name}: no {key}"));
            }
        }
        let severity = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("severity:"))
            .map(str::trim);
        if !matches!(severity, Some("critical" | "warning" | "info")) {
            bad.push(format!("{name}: severity {severity:?}"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn overview_dashboard_structure() {
    let dash = load(&dashboards_dir().join("courier-overview.json"));
    let mut bad = Vec::new();
    if dash["uid"].as_str().is_none_or(str::is_empty) {
        bad.push("no uid".to_string());
    }
    if dash["schemaVersion"].as_i64().is_none_or(|v| v < 36) {
        bad.push(format!("schemaVersion {}", dash["schemaVersion"]));
    }
    let vars = dash["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let var = |n: &str| vars.iter().find(|v| v["name"] == n).cloned();
    match var("datasource") {
        Some(v) if v["type"] == "datasource" && v["query"] == "prometheus" => {}
        v => bad.push(format!(
            "variable datasource (type datasource, prometheus): {v:?}"
        )),
    }
    let qs: Vec<(String, String)> = variable_queries(&dash);
    let query_of = |n: &str| {
        qs.iter()
            .find(|(v, _)| v == n)
            .map(|(_, q)| q.clone())
            .unwrap_or_default()
    };
    for (name, want) in [
        ("group", "label_values(courier_assigned_partitions, group)"),
        (
            "instance",
            "label_values(courier_assigned_partitions{group=~\"$group\"}, instance)",
        ),
        (
            "partition",
            "label_values(courier_commit_watermark{group=~\"$group\"",
        ),
    ] {
        match var(name) {
            Some(v) if v["multi"] == true && v["includeAll"] == true => {
                if !query_of(name).starts_with(want) {
                    bad.push(format!("variable {name}: query {}", query_of(name)));
                }
                if v["allValue"] != ".*" {
                    bad.push(format!("variable {name}: allValue should be .* (for =~)"));
                }
            }
            v => bad.push(format!("variable {name} (multi, include All): {v:?}")),
        }
    }
    let mut ids = std::collections::HashSet::new();
    for p in panels(&dash) {
        let title = p["title"].as_str().unwrap_or("?");
        if !ids.insert(p["id"].as_i64()) {
            bad.push(format!("{title}: duplicate panel id {}", p["id"]));
        }
        if p["type"] == "row" {
            continue;
        }
        if p["datasource"]["uid"] != "${datasource}" {
            bad.push(format!("{title}: datasource {}", p["datasource"]));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            bad.push(format!("{title}: no query"));
        }
        for t in &targets {
            if t["datasource"]["uid"] != "${datasource}" {
                bad.push(format!("{title}: target datasource {}", t["datasource"]));
            }
            bad.extend(query_style_problems(
                title,
                t["expr"].as_str().unwrap_or(""),
            ));
        }
    }
    // The panels the issue asks for, by the metric each one shows.
    let all_exprs: String = panel_exprs(&dash)
        .into_iter()
        .map(|(_, e)| e)
        .collect::<Vec<_>>()
        .join("\n");
    for m in [
        "courier_consumed_total",
        "courier_delivered_total",
        "courier_delivery_latency_seconds_bucket",
        "courier_event_age_seconds_bucket",
        "courier_in_flight",
        "courier_consumer_lag",
        "courier_commit_watermark",
        "courier_partition_mode",
        "courier_breaker_state",
        "courier_marker_alive",
        "courier_health_source",
        "courier_api_unavailable",
        "courier_dlq_written_total",
        "courier_dlq_retried_total",
        "courier_dlq_dropped_total",
        "courier_dlq_lag",
        "courier_parked_total",
        "courier_reconciliation_total",
        "courier_actor_restarts_total",
        "courier_enrichment_cache_total",
        "courier_delivery_errors_total",
        "courier_memory_budget_used_bytes",
    ] {
        if !all_exprs.contains(m) {
            bad.push(format!("no panel shows {m}"));
        }
    }
    // DLQ drops are first-class: a stat panel over the dashboard's time range.
    if !panels(&dash).iter().any(|p| {
        p["type"] == "stat"
            && p["targets"].as_array().into_iter().flatten().any(|t| {
                let e = t["expr"].as_str().unwrap_or("");
                e.contains("courier_dlq_dropped_total") && e.contains("$__range")
            })
    }) {
        bad.push("no stat panel with the DLQ drops over $__range".into());
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Alerts and recording rules with the name of each, split at `- alert:` / `- record:`.
fn rule_blocks(yaml: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in yaml.lines() {
        let t = line.trim_start().trim_start_matches("- ");
        if line.trim_start().starts_with("- ") {
            if let Some(name) = t
                .strip_prefix("alert:")
                .or_else(|| t.strip_prefix("record:"))
            {
                out.push((name.trim().to_string(), String::new()));
                continue;
            }
        }
        if let Some((_, block)) = out.last_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    out
}

/// Problems with the group scoping of rule expressions: every selector of a courier
/// series carries `group!=""`.
fn group_scope_problems(exprs: &[(String, String)]) -> Vec<String> {
    exprs
        .iter()
        .flat_map(|(name, e)| selector_problems(name, e, &[GROUP_MATCHER]))
        .collect()
}

/// The `runbook_url` of each alert, and whether dashboards/README.md has its anchor
/// (a `### Heading` whose GitHub-style anchor is the URL's fragment).
fn runbook_problems(yaml: &str, readme: &str) -> Vec<String> {
    let anchors: Vec<String> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| {
            h.trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == '-' || *c == ' ')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect();
    let mut bad = Vec::new();
    for (name, block) in rule_blocks(yaml) {
        if !block.contains("severity:") {
            continue; // a recording rule
        }
        let url = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("runbook_url:"))
            .map(|u| u.trim().trim_matches('"').to_string());
        match url.as_deref().and_then(|u| u.split_once('#')) {
            Some(("dashboards/README.md", anchor)) if anchors.iter().any(|a| a == anchor) => {}
            _ => bad.push(format!(
                "{name}: runbook_url {url:?} is not dashboards/README.md#<an anchor of a ### heading>"
            )),
        }
    }
    bad
}

/// The alerts that fire (have `exp_labels`) in some case of a promtool test file, and the
/// names the file mentions at all (recording rules are tested by `promql_expr_test`).
fn tested_alerts(test_yaml: &str) -> std::collections::BTreeSet<String> {
    let mut fired = std::collections::BTreeSet::new();
    let mut current = String::new();
    for line in test_yaml.lines() {
        let t = line.trim().trim_start_matches("- ");
        if let Some(a) = t.strip_prefix("alertname:") {
            current = a.trim().to_string();
        } else if t.starts_with("exp_labels:") && !current.is_empty() {
            fired.insert(current.clone());
        } else if t.starts_with("eval_time:") || t.starts_with("interval:") {
            current.clear();
        }
    }
    fired
}

#[test]
fn every_rule_is_scoped_to_a_group_and_has_a_runbook() {
    let yaml = std::fs::read_to_string(dashboards_dir().join("alerts.yml")).expect("alerts.yml");
    let readme =
        std::fs::read_to_string(dashboards_dir().join("README.md")).expect("dashboards/README.md");
    let mut bad = group_scope_problems(&alert_exprs(&yaml));
    bad.extend(runbook_problems(&yaml, &readme));
    // No rule may depend on the scrape job's name (it differs between a plain scrape
    // config and a ServiceMonitor).
    for (name, e) in alert_exprs(&yaml) {
        if e.contains("job=") || e.contains("job!") || e.contains("job=~") {
            bad.push(format!("{name}: selects on the job label in `{e}`"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn every_rule_is_unit_tested() {
    let yaml = std::fs::read_to_string(dashboards_dir().join("alerts.yml")).expect("alerts.yml");
    let tests =
        std::fs::read_to_string(dashboards_dir().join("alerts_test.yml")).expect("alerts_test.yml");
    let fired = tested_alerts(&tests);
    let mut bad = Vec::new();
    for (name, block) in rule_blocks(&yaml) {
        let is_alert = block.contains("severity:");
        if is_alert && !fired.contains(&name) {
            bad.push(format!(
                "{name}: no case in alerts_test.yml in which it fires"
            ));
        }
        if !is_alert && !tests.contains(&format!("expr: {name}")) {
            bad.push(format!(
                "recording rule {name}: no promql_expr_test in alerts_test.yml"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    println!("{} alerts fire in alerts_test.yml", fired.len());
}

/// The checks themselves catch what they are for: a panel with an unknown metric, a
/// histogram used without its suffix, a selector without the instance filter, a fixed
/// window, an unknown variable; and the YAML extraction sees block-scalar exprs.
#[test]
fn the_lint_catches_mistakes() {
    let dash = serde_json::json!({
        "panels": [
            {"type": "row", "title": "r", "panels": [
                {"type": "timeseries", "title": "bogus",
                 "targets": [{"expr": "sum(rate(courier_bogus_total{instance=~\"$instance\"}[$__rate_interval]))"}]}
            ]},
            {"type": "timeseries", "title": "bare histogram",
             "targets": [{"expr": "courier_delivery_latency_seconds{instance=~\"$instance\"}"}]},
            {"type": "timeseries", "title": "fake bucket",
             "targets": [{"expr": "courier_in_flight_bucket{instance=~\"$instance\"}"}]}
        ]
    });
    let exprs = panel_exprs(&dash);
    let bad = unknown_metrics(&exprs);
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(bad[0].contains("courier_bogus_total is not in courier::metrics::ALL"));
    assert!(bad[1].contains("is a histogram"));
    assert!(bad[2].contains("not a histogram"));

    assert!(query_style_problems("ok", "sum by (group) (rate(courier_delivered_total{group=~\"$group\", instance=~\"$instance\"}[$__rate_interval])) / sum by (group) (courier_in_flight{group=~\"$group\", instance=~\"$instance\", partition=~\"$partition\"})").is_empty());
    let p = query_style_problems("x", "rate(courier_delivered_total[5m])");
    assert_eq!(p.len(), 3, "{p:#?}");
    let p = query_style_problems(
        "x",
        "courier_in_flight{group=~\"$group\", instance=~\"$instance\"} * $foo",
    );
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(p[0].contains("unknown variable $foo"), "{p:#?}");
    let p = query_style_problems("x", "courier_in_flight{instance=~\"$instance\"}");
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(p[0].contains("without group=~\"$group\""), "{p:#?}");

    // Rules: a selector without the group matcher, a bare metric, a job selector, a
    // runbook anchor that does not exist, an alert no test makes fire.
    let rules = "groups:\n  - name: courier\n    rules:\n      - record: courier:x\n        expr: sum(courier_in_flight{group!=\"\"})\n      - alert: A\n        expr: >-\n          sum by (group) (courier_in_flight{group!=\"\"})\n          / sum by (group) (courier_in_flight)\n        labels:\n          severity: warning\n        annotations:\n          runbook_url: dashboards/README.md#a\n      - alert: B\n        expr: up{job=\"courier\"} == 0 and courier_in_flight{job=\"x\"}\n        labels:\n          severity: critical\n        annotations:\n          runbook_url: dashboards/README.md#nope\n";
    let p = group_scope_problems(&alert_exprs(rules));
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(p[0].starts_with("A:") && p[1].starts_with("B:"), "{p:#?}");
    let p = runbook_problems(rules, "# Alerts\n### A\ntext\n");
    assert_eq!(p.len(), 1, "{p:#?}");
    assert!(p[0].starts_with("B:"), "{p:#?}");
    let tests = "tests:\n  - interval: 1m\n    alert_rule_test:\n      - eval_time: 1m\n        alertname: A\n        exp_alerts: []\n      - eval_time: 2m\n        alertname: B\n        exp_alerts:\n          - exp_labels: {severity: critical}\n";
    let fired = tested_alerts(tests);
    assert!(fired.contains("B") && !fired.contains("A"), "{fired:?}");

    let yaml = "groups:\n  - name: courier\n    rules:\n      - alert: A\n        expr: >-\n          sum(\n            courier_nope_total)\n          > 0\n        for: 1m\n      - alert: B\n        expr: courier_in_flight > 1\n";
    let ex = alert_exprs(yaml);
    assert_eq!(
        ex,
        vec![
            ("A".to_string(), "sum( courier_nope_total) > 0".to_string()),
            ("B".to_string(), "courier_in_flight > 1".to_string())
        ]
    );
    assert_eq!(unknown_metrics(&ex).len(), 1);
}
