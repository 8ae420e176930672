//! Issue 58's cost figures: CPU per event of a typical filter and a typical
//! route predicate (`core::expr`), and of turning an event's JSON into CEL
//! values, against the same run's baseline — decoding the event as Courier does
//! today (`core::event::decode`: UTF-8, JSON validation, attributes) — on one
//! thread, no broker (docs/BENCHMARKS.md, "Expressions").
//!
//! ```sh
//! cargo bench --bench expr_cpu -- --bench
//! ```
//!
//! Each case runs `BENCH_EVENTS` events (default 200,000) per repeat,
//! `BENCH_REPEATS` repeats (default 9), interleaved; each event gets a new
//! scope (its variables built from scratch, as the decoder does). Reported:
//! the median ns per event over the repeats, and its ratio to the baseline's
//! median.

use bytes::Bytes;
use courier::core::event::{decode, DecodeOptions, Event};
use courier::core::expr::{Expr, Facts, Filter, Filters, Scope};
use courier::core::input::BodyType;
use std::hint::black_box;
use std::time::Instant;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A ~600-byte order event, as a shop would send it.
fn order(amount: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"specversion":"1.0","id":"ord-{amount:08}","type":"order.created","source":"/shop/eu-1","subject":"customer/4711","time":"2026-12-07T08:00:00Z","datacontenttype":"application/json","tenant":"acme","data":{{"order_id":"A-{amount}","amount":{amount},"currency":"EUR","customer":{{"id":4711,"tier":"gold","country":"DE"}},"items":[{{"sku":"SKU-1","qty":2,"price":1250}},{{"sku":"SKU-22","qty":1,"price":4990}},{{"sku":"GIFT-3","qty":1,"price":0}}],"shipping":{{"method":"express","address":{{"city":"Berlin","zip":"10115"}}}},"note":"leave at the door, ring twice"}}}}"#
    ))
}

struct Case {
    name: &'static str,
    run: Box<dyn Fn(&Event) -> bool>,
}

fn expr(src: &str) -> Expr {
    Expr::compile(src).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn main() {
    if !courier_testkit::asked_as_benchmark("expr_cpu") {
        return;
    }
    let events_n = env_usize("BENCH_EVENTS", 200_000);
    let repeats = env_usize("BENCH_REPEATS", 9);
    let opts = DecodeOptions::default();
    let raws: Vec<Bytes> = (0..64).map(|i| order(500 + i * 40)).collect();
    let events: Vec<Event> = raws
        .iter()
        .map(|r| decode(Some(r), &opts).expect("a valid event"))
        .collect();

    let by_type = expr(r#"event.type.startsWith("test.")"#);
    let on_data = expr("event.data.amount < 100");
    let when = expr(r#"event.data.amount > 1000 && event.data.customer.tier == "gold""#);
    let convert = expr("has(event.data)");
    let filters = Filters::new(vec![Filter {
        name: "small".into(),
        drop: expr("event.data.amount < 100"),
        dry_run: false,
    }]);
    let both_needs = filters.needs().union(when.needs());

    let scope_eval = |e: &'static Expr| -> Box<dyn Fn(&Event) -> bool> {
        Box::new(move |ev: &Event| {
            let mut s = Scope::new(Facts::of(ev, BodyType::CloudEventsJson), e.needs());
            s.eval_bool(e).unwrap_or(false)
        })
    };
    let leak = |e: Expr| -> &'static Expr { Box::leak(Box::new(e)) };
    let (by_type, on_data, when, convert) =
        (leak(by_type), leak(on_data), leak(when), leak(convert));
    let filters: &'static Filters = Box::leak(Box::new(filters));
    let cases: Vec<Case> = vec![
        Case {
            name: "baseline: decode the event (today's per-event parse)",
            run: Box::new(|ev: &Event| decode(Some(&ev.raw), &DecodeOptions::default()).is_ok()),
        },
        Case {
            name: "filter on an attribute: event.type.startsWith(\"test.\")",
            run: scope_eval(by_type),
        },
        Case {
            name: "conversion: the event's JSON to CEL values (has(event.data))",
            run: scope_eval(convert),
        },
        Case {
            name: "filter on data: event.data.amount < 100",
            run: scope_eval(on_data),
        },
        Case {
            name: "route predicate: amount > 1000 && customer.tier == \"gold\"",
            run: scope_eval(when),
        },
        Case {
            name: "filter + route predicate, one scope (one conversion)",
            run: Box::new(move |ev: &Event| {
                let mut s = Scope::new(Facts::of(ev, BodyType::CloudEventsJson), both_needs);
                let kept = matches!(
                    filters.verdict(&mut s),
                    Ok(courier::core::expr::FilterVerdict::Keep { .. })
                );
                kept && s.eval_bool(when).unwrap_or(false)
            }),
        },
    ];

    // Warm-up, then the repeats, the cases interleaved within each repeat.
    for c in &cases {
        for ev in events.iter().take(1000) {
            black_box((c.run)(black_box(ev)));
        }
    }
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cases.len()];
    for _ in 0..repeats {
        for (i, c) in cases.iter().enumerate() {
            let t = Instant::now();
            let mut yes = 0usize;
            for k in 0..events_n {
                if (c.run)(black_box(&events[k % events.len()])) {
                    yes += 1;
                }
            }
            black_box(yes);
            samples[i].push(t.elapsed().as_nanos() as f64 / events_n as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let medians: Vec<f64> = samples.iter_mut().map(median).collect();
    let spread: Vec<(f64, f64)> = samples.iter().map(|v| (v[0], v[v.len() - 1])).collect();
    println!(
        "expr_cpu: {events_n} events × {repeats} repeats, one thread; event {} bytes",
        raws[0].len()
    );
    println!("| case | median ns/event | min–max | × baseline |");
    println!("|---|---|---|---|");
    for (i, c) in cases.iter().enumerate() {
        println!(
            "| {} | {:.0} | {:.0}–{:.0} | {:.2} |",
            c.name,
            medians[i],
            spread[i].0,
            spread[i].1,
            medians[i] / medians[0]
        );
    }
}
