use super::compile::Problem;
use super::needs::member_bit;
use super::*;
use crate::core::event::Event;
use crate::core::input::{BodyType, HeaderName};
use bytes::Bytes;

fn event(raw: &str) -> Event {
    Event {
        id: "e-1".into(),
        source: "/orders".into(),
        event_type: "order.created".into(),
        subject: Some("tenant-a".into()),
        time: None,
        entity_version: None,
        raw: Bytes::from(raw.to_string()),
    }
}

const ORDER: &str = r#"{"specversion":"1.0","id":"e-1","type":"order.created","source":"/orders","subject":"tenant-a","tenant":"acme","data":{"amount":1500,"total":12.5,"zero":0,"items":[1,2,3],"name":"caf\u00e9","big":18446744073709551615}}"#;

fn eval(src: &str, raw: &str) -> Result<bool, EvalError> {
    let ev = event(raw);
    let e = Expr::compile(src).expect("compiles");
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), e.needs());
    s.eval_bool(&e)
}

fn problem(src: &str) -> CompileError {
    Expr::compile(src).expect_err("refused")
}

#[test]
fn a_syntax_error_names_line_and_column() {
    let e = problem("event.type == ");
    assert!(matches!(e.problem, Problem::Syntax(_)), "{e}");
    assert_eq!(e.line, 1, "{e}");
    assert_eq!(e.column, 15, "{e}"); // the end, where an operand is missing
    let e = problem("event.type == 'a' &&\n  event.data.x = 1");
    assert_eq!((e.line, e.column), (2, 16), "{e}");
}

#[test]
fn an_unknown_variable_is_refused_where_it_is() {
    let e = problem("event.type == 'a' && evnt.data.x > 1");
    assert_eq!(e.problem, Problem::UnknownVariable("evnt".into()), "{e}");
    assert_eq!((e.line, e.column), (1, 22), "{e}");
    // Comprehension variables and type names are known.
    Expr::compile("event.data.items.all(x, x > 0) && type(key) == string").expect("compiles");
}

#[test]
fn bounds_are_checked_at_compile_time() {
    let long = format!("'{}' == topic", "x".repeat(MAX_SOURCE_BYTES));
    assert!(matches!(problem(&long).problem, Problem::TooLong(_)));
    let many = format!("size([{}]) > 0", vec!["offset"; 300].join(", "));
    assert_eq!(problem(&many).problem, Problem::TooManyNodes);
    let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    let e = problem(&deep);
    assert_eq!((e.problem, e.line, e.column), (Problem::TooDeep, 1, 33));
    // Deep without brackets: a chain of operators.
    let chain = vec!["offset"; 60].join(" - ");
    assert_eq!(problem(&chain).problem, Problem::TooDeep);
    // As deep as allowed, evaluated on an ordinary thread's stack.
    let ok = format!("{}offset{} == 0", "(".repeat(30), ")".repeat(30));
    let ev = event(ORDER);
    let e = Expr::compile(&ok).expect("compiles");
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), e.needs());
    assert_eq!(s.eval_bool(&e), Ok(true));
    let ok = format!("{} == 0", vec!["offset"; 28].join(" - "));
    let e = Expr::compile(&ok).expect("compiles");
    assert_eq!(s.eval_bool(&e), Ok(true));
    let nested =
        "event.data.items.all(a, event.data.items.all(b, event.data.items.all(c, a + b + c > 0)))";
    assert_eq!(problem(nested).problem, Problem::TooManyComprehensions);
    Expr::compile("event.data.items.all(a, event.data.items.exists(b, a == b))")
        .expect("two levels are allowed");
}

#[test]
fn attributes_alone_need_no_json() {
    let e = Expr::compile("event.type == 'order.created' && has(event.subject)").unwrap();
    assert!(e.needs().event && e.needs().event_json == 0);
    let e = Expr::compile("event.data.amount > 1").unwrap();
    assert_eq!(e.needs().event_json, member_bit("amount"), "only `amount`");
    // Not even valid JSON is read when only attributes are named.
    assert_eq!(eval("event.subject == 'tenant-a'", "not json"), Ok(true));
}

#[test]
fn data_fields_and_extensions() {
    assert_eq!(eval("event.data.amount > 1000", ORDER), Ok(true));
    assert_eq!(eval("event.data.total == 12.5", ORDER), Ok(true));
    assert_eq!(eval("event.data.name == 'café'", ORDER), Ok(true));
    assert_eq!(eval("size(event.data.items) == 3", ORDER), Ok(true));
    assert_eq!(eval("event.extensions.tenant == 'acme'", ORDER), Ok(true));
    assert_eq!(eval("'specversion' in event.extensions", ORDER), Ok(false));
    assert_eq!(
        eval("event.data.big == 18446744073709551615u", ORDER),
        Ok(true)
    );
    assert_eq!(eval("has(event.data.missing)", ORDER), Ok(false));
}

#[test]
fn data_base64_is_bytes_and_plain_json_is_all_data() {
    let raw = r#"{"specversion":"1.0","id":"e","type":"t","source":"s","data_base64":"aGk="}"#;
    assert_eq!(eval("event.data == b'hi'", raw), Ok(true));
    let ev = event(r#"{"order":{"id":7}}"#);
    let e = Expr::compile("event.data.order.id == 7 && size(event.extensions) == 0").unwrap();
    let mut s = Scope::new(Facts::of(&ev, BodyType::Json), e.needs());
    assert_eq!(s.eval_bool(&e), Ok(true));
}

#[test]
fn failures_are_errors_never_panics() {
    let missing = eval("event.data.nope > 1", ORDER).unwrap_err();
    assert!(
        matches!(&missing, EvalError::Failed(m) if m.contains("nope")),
        "{missing}"
    );
    let div = eval("event.data.amount / event.data.zero > 1", ORDER).unwrap_err();
    assert!(
        matches!(&div, EvalError::Failed(m) if m.contains("ivision")),
        "{div}"
    );
    assert_eq!(
        eval("event.data.amount", ORDER),
        Err(EvalError::NotBool("int".into()))
    );
    let ev = event(ORDER);
    let e = Expr::compile("event.data.total / 0.0").unwrap();
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), e.needs());
    assert!(matches!(
        s.eval_bool(&e),
        Err(EvalError::NotJsonNumber(f)) if f.is_infinite()
    ));
    assert!(matches!(s.eval_json(&e), Err(EvalError::NotJsonNumber(_))));
}

#[test]
fn an_evaluation_over_its_bound_is_not_run() {
    let items: Vec<String> = (0..2000).map(|i| i.to_string()).collect();
    let raw = format!(
        r#"{{"specversion":"1.0","id":"e","type":"t","source":"s","data":{{"items":[{}]}}}}"#,
        items.join(",")
    );
    let e = eval(
        "event.data.items.all(a, event.data.items.exists(b, a == b))",
        &raw,
    )
    .unwrap_err();
    assert!(matches!(e, EvalError::OverBound { .. }), "{e}");
    // The same expression over a short list is evaluated.
    assert_eq!(
        eval(
            "event.data.items.all(a, event.data.items.exists(b, a == b))",
            ORDER
        ),
        Ok(true)
    );
    // What `+` builds: a long string concatenated in a comprehension.
    let long = format!(
        r#"{{"specversion":"1.0","id":"e","type":"t","source":"s","data":{{"s":"{}","items":[{}]}}}}"#,
        "x".repeat(100_000),
        items[..100].join(",")
    );
    let e = eval(
        "event.data.items.exists(i, event.data.s + event.data.s == '')",
        &long,
    )
    .unwrap_err();
    assert!(
        matches!(e, EvalError::OverBound { what, .. } if what.contains("bytes")),
        "{e}"
    );
}

#[test]
fn record_variables() {
    let ev = event(ORDER);
    let headers: Vec<crate::core::input::Header> = vec![
        (
            HeaderName::from("x-tenant"),
            Some(Bytes::from_static(b"old")),
        ),
        (
            HeaderName::from("x-tenant"),
            Some(Bytes::from_static(b"acme")),
        ),
        (
            HeaderName::from("bin"),
            Some(Bytes::from_static(b"\xff\x00")),
        ),
        (HeaderName::from("empty"), None),
    ];
    let facts = Facts::of(&ev, BodyType::CloudEventsJson).with_record(
        Some(b"tenant-a/1"),
        Some(b"\xff"),
        &headers,
        "orders",
        3,
        42,
    );
    let check = |src: &str| {
        let e = Expr::compile(src).expect("compiles");
        let mut s = Scope::new(facts, e.needs());
        s.eval_bool(&e)
    };
    assert_eq!(check("headers['x-tenant'] == 'acme'"), Ok(true));
    assert_eq!(check("headers.bin == '/wA='"), Ok(true));
    assert_eq!(check("headers.empty == null"), Ok(true));
    assert_eq!(check("key.startsWith('tenant-a/')"), Ok(true));
    assert_eq!(check("record_key == '/w=='"), Ok(true));
    assert_eq!(
        check("topic == 'orders' && partition == 3 && offset == 42"),
        Ok(true)
    );
    let none = Facts::of(&ev, BodyType::CloudEventsJson);
    let e = Expr::compile("key == null && record_key == null").unwrap();
    assert_eq!(Scope::new(none, e.needs()).eval_bool(&e), Ok(true));
}

/// Of `data`, only the members the expressions name are converted: a
/// member no expression reads costs nothing and cannot put an event over
/// its bound; naming `data` as a whole (or `extensions`) converts it all.
#[test]
fn only_the_members_of_data_named_are_converted() {
    let items: Vec<String> = (0..2000).map(|i| i.to_string()).collect();
    let raw = format!(
        r#"{{"specversion":"1.0","id":"e","type":"t","source":"s","tenant":"acme","data":{{"huge":[{}],"items":[1,2,3],"amount":5}}}}"#,
        items.join(",")
    );
    let pairwise = "event.data.items.all(a, event.data.items.exists(b, a == b))";
    assert_eq!(eval(pairwise, &raw), Ok(true), "`huge` is not read");
    let whole = format!("{pairwise} && size(event.data) == 3");
    assert!(
        matches!(eval(&whole, &raw), Err(EvalError::OverBound { .. })),
        "all of `data` named: `huge` counts"
    );
    assert_eq!(
        eval("event.data.amount == 5 && !has(event.data.gone)", &raw),
        Ok(true)
    );
    assert_eq!(
        eval(
            "event.data.amount == 5 && event.extensions.tenant == 'acme'",
            &raw
        ),
        Ok(true),
        "extensions named: converted"
    );
    // A plain JSON event (all of it is `data`) the same way.
    let ev = event(&raw);
    let e = Expr::compile("event.data.specversion == '1.0' && event.data.id == 'e'").unwrap();
    assert_eq!(
        e.needs().event_json,
        member_bit("specversion") | member_bit("id")
    );
    let mut s = Scope::new(Facts::of(&ev, BodyType::Json), e.needs());
    assert_eq!(s.eval_bool(&e), Ok(true));
    // A comprehension's variable named `event` is not the event.
    let e = Expr::compile("[{'data': {'x': 1}}].exists(event, event.data.x == 1)").unwrap();
    assert_eq!(e.needs().event_json, 0);
}

/// A scope made for fewer members than an expression names is built again
/// for it (the callers make it for all their expressions at once).
#[test]
fn a_scope_made_for_fewer_members_is_built_again() {
    let ev = event(ORDER);
    let a = Expr::compile("event.data.amount > 1000").unwrap();
    let b = Expr::compile("event.data.total == 12.5").unwrap();
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), a.needs());
    assert_eq!(s.eval_bool(&a), Ok(true));
    assert_eq!(s.eval_bool(&b), Ok(true), "`total` was not converted first");
    assert_eq!(s.eval_bool(&a), Ok(true));
}

#[test]
fn one_conversion_per_event_whatever_the_expressions() {
    let ev = event(ORDER);
    let a = Expr::compile("event.data.amount > 1000").unwrap();
    let b = Expr::compile("key == null").unwrap();
    let mut s = Scope::new(
        Facts::of(&ev, BodyType::CloudEventsJson),
        a.needs().union(b.needs()),
    );
    assert!(!s.is_built());
    assert_eq!(s.eval_bool(&a), Ok(true));
    assert!(s.is_built());
    assert_eq!(s.eval_bool(&b), Ok(true));
}

#[test]
fn filters_drop_at_the_first_true_and_dry_runs_only_count() {
    let f = |name: &str, src: &str, dry_run: bool| Filter {
        name: name.into(),
        drop: Expr::compile(src).unwrap(),
        dry_run,
    };
    let filters = Filters::new(vec![
        f("would", "event.data.amount > 100", true),
        f("tests", "event.type.startsWith('test.')", false),
        f("big", "event.data.amount > 1000", false),
        f("never", "event.data.nope", false),
    ]);
    let ev = event(ORDER);
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), filters.needs());
    assert_eq!(
        filters.verdict(&mut s),
        Ok(FilterVerdict::Drop {
            filter: 2,
            would_drop: vec![0],
            would_park: vec![]
        })
    );
    // A failing dry run changes nothing: noted, and the next filter decides.
    let dry = Filters::new(vec![
        f("dry-broken", "event.data.nope == 1", true),
        f("small", "event.data.amount < 10", false),
    ]);
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), dry.needs());
    assert_eq!(
        dry.verdict(&mut s),
        Ok(FilterVerdict::Keep {
            would_drop: vec![],
            would_park: vec![0]
        })
    );
    let failing = Filters::new(vec![f("broken", "event.data.nope == 1", false)]);
    let mut s = Scope::new(Facts::of(&ev, BodyType::CloudEventsJson), failing.needs());
    let err = failing.verdict(&mut s).unwrap_err();
    assert_eq!(err.filter, "broken");
}
