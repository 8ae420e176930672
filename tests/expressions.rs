//! Filters and route predicates (`[[filters]]`, `[[api.routes]]` `when`:
//! `core::expr`, issue 58) against the real broker and the API stand-in.
//! Every test that moves events ends with the no-loss audit.

mod common;

use common::*;
use courier_standins::audit::Produced;
use courier_standins::loadgen;
use courier_standins::sink::{Behaviour, FailRule, SinkHandle};
use rdkafka::producer::FutureRecord;
use rdkafka::util::Timeout;
use std::collections::HashSet;
use std::time::Duration;

async fn sink() -> SinkHandle {
    SinkHandle::start("127.0.0.1:0".parse().unwrap(), Behaviour::default())
        .await
        .expect("sink")
}

/// A structured CloudEvent with this id, type and `data`.
fn event(id: &str, ty: &str, data: &str) -> String {
    format!(
        r#"{{"specversion":"1.0","id":"{id}","type":"{ty}","source":"/test","subject":"{id}","data":{data}}}"#
    )
}

/// Produces `(id, value)` records, keyed by their id, one by one.
async fn produce(s: &Services, topic: &str, events: &[(String, String)]) -> Produced {
    let p = loadgen::producer(&s.brokers).expect("producer");
    let mut produced = Produced::default();
    for (id, value) in events {
        let rec = FutureRecord::to(topic)
            .key(id.as_str())
            .payload(value.as_str());
        let d = p
            .send(rec, Timeout::After(Duration::from_secs(30)))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        produced.ids.push(id.clone());
        produced.offsets.push((d.partition, d.offset));
    }
    produced
}

fn merged(a: &Produced, b: &Produced) -> Produced {
    let mut m = a.clone();
    m.ids.extend(b.ids.iter().cloned());
    m.offsets.extend(b.offsets.iter().cloned());
    m
}

/// A filter drops a third of the events (`data.n % 3 == 0`): they are not
/// delivered, counted in `courier_filtered_total{filter}`, their offsets
/// committed; a dry-run filter beside it only counts (`n` even). The audit
/// finds the dropped ones filtered, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filter_drops_a_third_committed_counted_none_lost() {
    let s = services();
    let n = Names::new("expr-filter", 2);
    n.create(&s, true).await;
    let api = sink().await;
    let toml = base_toml(&n, &api.url())
        + "\n[[filters]]\nname = \"even-dry\"\ndrop = 'event.data.n % 2 == 0'\ndry_run = true\n\
           \n[[filters]]\nname = \"thirds\"\ndrop = 'event.data.n % 3 == 0'\n";
    let mut c = Courier::start("expr-filter", &s, &toml);
    let events: Vec<(String, String)> = (0..90)
        .map(|i| {
            let id = format!("f-{i}");
            let v = event(&id, "order.created", &format!(r#"{{"n":{i}}}"#));
            (id, v)
        })
        .collect();
    let produced = produce(&s, &n.topic, &events).await;
    let dropped: HashSet<String> = (0..90)
        .filter(|i| i % 3 == 0)
        .map(|i| format!("f-{i}"))
        .collect();
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    wait_until(Duration::from_secs(30), "60 events delivered", || {
        api.delivered_count() >= 60
    })
    .await;
    let filtered = c.metric("courier_filtered_total{filter=\"thirds\"").await;
    // Dry run: every even n it saw before `thirds` could drop it (n even,
    // whatever n % 3): 45.
    let would = c
        .metric("courier_filter_would_drop_total{filter=\"even-dry\"")
        .await;
    let rep = n.audit_filtered(&s, &produced, &[&api], &dropped);
    assert_no_loss("expr-filter", &rep);
    assert_eq!(
        filtered, 30.0,
        "courier_filtered_total{{filter=\"thirds\"}}"
    );
    assert_eq!(would, 45.0, "courier_filter_would_drop_total");
    assert_eq!(rep.filtered, 30, "{rep}");
    assert_eq!(rep.delivered, 60, "{rep}");
    let delivered = api.audit().delivered;
    assert!(
        dropped.iter().all(|id| !delivered.contains_key(id)),
        "a filtered event reached the API"
    );
    c.terminate(Duration::from_secs(20)).await;
}

/// A route with `when` on a data field sends the large orders to a second
/// API; the others go to `api.url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_when_route_sends_events_by_a_data_field_to_a_second_api() {
    let s = services();
    let n = Names::new("expr-when", 2);
    n.create(&s, true).await;
    let (first, second) = (sink().await, sink().await);
    let toml = base_toml(&n, &first.url())
        + &format!(
            "\n[[api.routes]]\nname = \"review\"\ntype = \"order.*\"\nwhen = 'event.data.amount > 1000'\nurl = \"{}\"\n",
            second.url()
        );
    let mut c = Courier::start("expr-when", &s, &toml);
    let events: Vec<(String, String)> = (0..40)
        .map(|i| {
            let id = format!("w-{i}");
            let amount = if i % 2 == 0 { 500 } else { 1500 };
            let v = event(&id, "order.created", &format!(r#"{{"amount":{amount}}}"#));
            (id, v)
        })
        .collect();
    let produced = produce(&s, &n.topic, &events).await;
    wait_all_reached(Duration::from_secs(90), &produced, &[&first, &second]).await;
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("expr-when", &rep);
    let (a, b) = (first.audit().delivered, second.audit().delivered);
    for i in 0..40 {
        let id = format!("w-{i}");
        let (to_second, to_first) = (b.contains_key(&id), a.contains_key(&id));
        assert_eq!(
            (to_first, to_second),
            (i % 2 == 0, i % 2 == 1),
            "{id}: amount {}",
            if i % 2 == 0 { 500 } else { 1500 }
        );
    }
    c.terminate(Duration::from_secs(20)).await;
}

/// Expressions that fail for an event park it `expression_failed` with the
/// reason, and the other events flow: a filter on a field one event lacks,
/// a route's `when` dividing by an event's zero, and a filter whose worst
/// case over one event's long list is over the bound (not evaluated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_over_bound_expressions_park_their_event_and_the_others_flow() {
    let s = services();
    let n = Names::new("expr-fail", 1);
    n.create(&s, true).await;
    let (first, second) = (sink().await, sink().await);
    let toml = base_toml(&n, &first.url())
        + &format!(
            "\n[[filters]]\nname = \"tests\"\ndrop = 'event.data.kind == \"test\"'\n\
             \n[[filters]]\nname = \"pairs\"\ndrop = 'event.data.items.exists(a, event.data.items.exists(b, a + b == -1))'\n\
             \n[[api.routes]]\nname = \"per-unit\"\ntype = \"order.*\"\nwhen = 'event.data.amount / event.data.qty > 100'\nurl = \"{}\"\n",
            second.url()
        );
    let mut c = Courier::start("expr-fail", &s, &toml);
    let long: Vec<String> = (0..2000).map(|i| i.to_string()).collect();
    let data = |id: &str, extra: &str| {
        (
            id.to_string(),
            event(
                id,
                "order.created",
                &format!(r#"{{"kind":"real","items":[1,2],{extra}}}"#),
            ),
        )
    };
    let mut events: Vec<(String, String)> = (0..20)
        .map(|i| {
            data(
                &format!("ok-{i}"),
                &format!(r#""amount":{},"qty":2"#, 100 + i * 10),
            )
        })
        .collect();
    // No `kind`: the first filter fails.
    events.push((
        "no-kind".into(),
        event(
            "no-kind",
            "order.created",
            r#"{"items":[],"amount":1,"qty":1}"#,
        ),
    ));
    // qty 0: the route's `when` divides by zero (int).
    events.push(data("zero-qty", r#""amount":5,"qty":0"#));
    // 2000 items under two nested comprehensions: over the bound.
    events.push((
        "long-list".into(),
        event(
            "long-list",
            "order.created",
            &format!(
                r#"{{"kind":"real","items":[{}],"amount":1,"qty":1}}"#,
                long.join(",")
            ),
        ),
    ));
    let produced = produce(&s, &n.topic, &events).await;
    n.wait_committed_to_end(&s, Duration::from_secs(90)).await;
    wait_until(Duration::from_secs(30), "20 events delivered", || {
        first.delivered_count() + second.delivered_count() >= 20
    })
    .await;
    let parked = envelopes(&s, &n.parking);
    let reasons: Vec<(i64, &str, &str)> = parked
        .iter()
        .map(|e| {
            (
                e.origin.offset,
                e.last_error.reason.as_str(),
                e.last_error.message.as_str(),
            )
        })
        .collect();
    println!("parked: {reasons:#?}");
    assert_eq!(parked.len(), 3, "{reasons:?}");
    assert!(parked
        .iter()
        .all(|e| e.last_error.reason == "expression_failed"));
    let message_of = |offset: i64| {
        parked
            .iter()
            .find(|e| e.origin.offset == offset)
            .map(|e| e.last_error.message.clone())
            .unwrap_or_default()
    };
    let msg = message_of(20);
    assert!(
        msg.contains("filter `tests`") && msg.contains("kind"),
        "{msg}"
    );
    let msg = message_of(21);
    assert!(
        msg.contains("route `per-unit`") && msg.contains("ivision"),
        "{msg}"
    );
    let msg = message_of(22);
    assert!(
        msg.contains("filter `pairs`") && msg.contains("over its bound"),
        "{msg}"
    );
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("expr-fail", &rep);
    assert_eq!(
        rep.parked_by_reason.get("expression_failed"),
        Some(&3),
        "{rep}"
    );
    assert_eq!(rep.delivered, 20, "{rep}");
    // amount / 2 > 100: ok-11 (210 / 2 = 105) and later to the second API.
    let b = second.audit().delivered;
    assert!(b.contains_key("ok-19") && !b.contains_key("ok-0"));
    c.terminate(Duration::from_secs(20)).await;
}

/// A DLQ'd event of a `when` route goes back to that route's API, even
/// after a restart with the routes in another order (where a new event of
/// the same kind now takes the other route): the envelope records the
/// route's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dlq_event_of_a_when_route_returns_to_its_route_after_a_reorder() {
    let s = services();
    let n = Names::new("expr-dlq", 1);
    n.create(&s, true).await;
    let (first, second) = (sink().await, sink().await);
    second.update_behaviour(|b: &mut Behaviour| {
        b.fail_ids.insert(
            "big-1".into(),
            FailRule {
                status: 503,
                ..FailRule::default()
            },
        );
    });
    let big = format!(
        "\n[[api.routes]]\nname = \"big\"\ntype = \"order.*\"\nwhen = 'event.data.amount > 1000'\nurl = \"{}\"\n",
        second.url()
    );
    let all = format!(
        "\n[[api.routes]]\nname = \"all\"\ntype = \"order.*\"\nurl = \"{}\"\n",
        first.url()
    );
    // DLQ records wait an hour: the event stays there while Courier runs.
    let before = base_toml(&n, &first.url()) + &big + &all;
    let mut c = Courier::start("expr-dlq-1", &s, &before);
    let one = produce(
        &s,
        &n.topic,
        &[
            (
                "big-1".into(),
                event("big-1", "order.created", r#"{"amount":5000}"#),
            ),
            (
                "small-1".into(),
                event("small-1", "order.created", r#"{"amount":5}"#),
            ),
        ],
    )
    .await;
    wait_until(Duration::from_secs(60), "big-1 is in the DLQ", || {
        !envelopes(&s, &n.dlq).is_empty()
    })
    .await;
    let env = envelopes(&s, &n.dlq).remove(0);
    assert_eq!(env.event_id.as_deref(), Some("big-1"));
    assert_eq!(
        env.route.as_deref(),
        Some("big"),
        "the envelope records its route"
    );
    n.wait_committed_to_end(&s, Duration::from_secs(60)).await;
    c.terminate(Duration::from_secs(20)).await;
    assert!(first.audit().delivered.contains_key("small-1"));

    // The routes swapped: "all" (no `when`) now takes every order first.
    second.update_behaviour(|b: &mut Behaviour| b.fail_ids.clear());
    let after = toml_with(
        &n,
        &first.url(),
        "dlq_backoff_base = \"300ms\"\ndlq_backoff_cap = \"1s\"",
    ) + &all
        + &big;
    let mut c = Courier::start("expr-dlq-2", &s, &after);
    let two = produce(
        &s,
        &n.topic,
        &[(
            "big-2".into(),
            event("big-2", "order.created", r#"{"amount":7000}"#),
        )],
    )
    .await;
    let produced = merged(&one, &two);
    wait_all_reached(Duration::from_secs(90), &produced, &[&first, &second]).await;
    let (a, b) = (first.audit().delivered, second.audit().delivered);
    assert!(
        b.contains_key("big-1") && !a.contains_key("big-1"),
        "the DLQ'd event goes to its recorded route's API"
    );
    assert!(
        a.contains_key("big-2") && !b.contains_key("big-2"),
        "a new event takes the new first route"
    );
    n.wait_dlq_drained(&s, Duration::from_secs(60)).await;
    let rep = n.audit_all(&s, &produced, &[&first, &second]);
    assert_no_loss("expr-dlq", &rep);
    assert_eq!(rep.delivered, 3, "{rep}");
    c.terminate(Duration::from_secs(20)).await;
}

/// `courier check-config` refuses a broken expression naming the route and
/// the position; `courier expr eval` says what the filters, the route and
/// the request would be for one event.
#[test]
fn check_config_names_the_route_and_position_and_expr_eval_explains() {
    let s = services();
    let dir = std::env::temp_dir().join(unique("expr-cli"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cfg = dir.join("courier.toml");
    let broken = "[api]\nurl = \"http://127.0.0.1:9/x\"\n\n[[api.routes]]\nname = \"review\"\ntype = \"order.*\"\nurl = \"http://127.0.0.1:9/review\"\nwhen = 'event.data.amount >'\n";
    std::fs::write(&cfg, broken).expect("config");
    let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("api.routes[0].when (route \"review\")") && out.contains("line 1, column"),
        "{out}"
    );
    let unknown = broken.replace("event.data.amount >", "evnt.data.amount > 1");
    std::fs::write(&cfg, unknown).expect("config");
    let (code, out) = courier_cli(&s, &cfg, &["check-config"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown variable `evnt`"), "{out}");

    let good = "[api]\nurl = \"http://127.0.0.1:9/x\"\n\n[[filters]]\nname = \"tests\"\ndrop = 'event.type.startsWith(\"test.\")'\n\n[[api.routes]]\nname = \"review\"\ntype = \"order.*\"\nurl = \"http://127.0.0.1:9/review/{subject}\"\nwhen = 'event.data.amount > 1000'\nbody = \"data\"\nheaders = { \"X-Tenant\" = \"{key}\" }\n";
    std::fs::write(&cfg, good).expect("config");
    let ev = dir.join("event.json");
    std::fs::write(&ev, event("e-1", "order.created", r#"{"amount":1500}"#)).expect("event");
    let ev_arg = ev.display().to_string();
    let (code, out) = courier_cli(
        &s,
        &cfg,
        &["expr", "eval", "--event", &ev_arg, "--key", "acme"],
    );
    assert_eq!(code, 0, "{out}");
    for line in [
        "filter tests: false: keeps it",
        "route: review",
        "request: Post http://127.0.0.1:9/review/e-1",
        "header: X-Tenant: acme",
        "body:\n{\"amount\":1500}",
    ] {
        assert!(out.contains(line), "{line:?} not in:\n{out}");
    }
    std::fs::write(&ev, event("e-2", "order.created", r#"{"total":1}"#)).expect("event");
    let (code, out) = courier_cli(&s, &cfg, &["expr", "eval", "--event", &ev_arg]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("parked expression_failed"), "{out}");
}
