//! One event's variables, and the evaluation of an expression against them.
//!
//! A [`Scope`] is made per event from its [`Facts`] (borrowed: nothing is
//! copied until an expression is evaluated). The first evaluation builds the
//! CEL context once, with only the variables the configured expressions use
//! (`needs`); every later expression of the event reuses it. The event's
//! JSON is converted only when an expression names more of `event` than its
//! decoded attributes, and then only the members of `data` the expressions
//! name (`event.data.amount`), unless one names `event.data`,
//! `event.extensions` or `event` as a whole.

use super::compile::{env, Expr};
use super::convert::{self, Sizes, Value};
use super::needs::Needs;
use super::{MAX_BUILD_BYTES, MAX_STEPS};
use crate::core::event::Event;
use crate::core::input::{BodyType, Header};
use cel::common::types::{CelBool, CelDouble};

/// What an event's variables are made of.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub(crate) event: &'a Event,
    /// The event's JSON is a structured CloudEvent (`data` is its member);
    /// otherwise a plain JSON object (`data` is all of it).
    pub(crate) cloudevent: bool,
    /// The key ordering uses.
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) record_key: Option<&'a [u8]>,
    pub(crate) headers: &'a [Header],
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
}

impl<'a> Facts<'a> {
    /// An event's facts without a record (no key, no headers, topic ""): for
    /// benchmarks; the decoder fills in the record's.
    pub fn of(event: &'a Event, body: BodyType) -> Facts<'a> {
        Facts {
            event,
            cloudevent: body == BodyType::CloudEventsJson,
            key: None,
            record_key: None,
            headers: &[],
            topic: "",
            partition: 0,
            offset: 0,
        }
    }

    /// The record's part of the facts.
    pub(crate) fn with_record(
        self,
        key: Option<&'a [u8]>,
        record_key: Option<&'a [u8]>,
        headers: &'a [Header],
        topic: &'a str,
        partition: i32,
        offset: i64,
    ) -> Facts<'a> {
        Facts {
            key,
            record_key,
            headers,
            topic,
            partition,
            offset,
            ..self
        }
    }
}

/// Why an evaluation gave no usable answer: the event is parked
/// `expression_failed` with this message (or, for a route with
/// `on_error = "skip"`, the route does not match).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// The evaluator's error (a missing field, a division by zero, no such
    /// function for these types, …).
    #[error("{0}")]
    Failed(String),
    /// The worst case of this event is over a bound: not evaluated.
    #[error("over its bound: {what} could reach {estimate}, the limit is {limit} (not evaluated)")]
    OverBound {
        what: &'static str,
        estimate: u64,
        limit: u64,
    },
    #[error("yields a {0}, not a bool")]
    NotBool(String),
    #[error("yields {0}, a number JSON cannot carry")]
    NotJsonNumber(f64),
    /// The event's JSON could not be read as values (a `data_base64` that
    /// is not base64).
    #[error("the event cannot be read as values: {0}")]
    Unreadable(String),
    #[error("the evaluator panicked: {0}")]
    Panicked(String),
}

/// The CEL context of one event, built once.
struct Built<'a> {
    ctx: cel::Context<'a, 'a>,
    sizes: Sizes,
    /// What it holds.
    needs: Needs,
}

/// One event's variables (see the module's documentation).
pub struct Scope<'a> {
    facts: Facts<'a>,
    needs: Needs,
    built: Option<Result<Built<'a>, String>>,
}

impl<'a> Scope<'a> {
    /// The scope of one event, for expressions that together need `needs`.
    pub fn new(facts: Facts<'a>, needs: Needs) -> Scope<'a> {
        Scope {
            facts,
            needs,
            built: None,
        }
    }

    /// Whether the variables were built (an expression was evaluated).
    pub fn is_built(&self) -> bool {
        self.built.is_some()
    }

    /// Evaluates a predicate: `true` or `false`, or why neither.
    pub fn eval_bool(&mut self, expr: &Expr) -> Result<bool, EvalError> {
        self.eval(expr, |v| match v.downcast_ref::<CelBool>() {
            Some(b) => Ok(*b.inner()),
            None => Err(EvalError::NotBool(v.get_type().name().to_string())),
        })?
    }

    /// Evaluates `expr` and hands the result to `read` (for `courier expr
    /// eval`: the value as JSON).
    pub fn eval_json(&mut self, expr: &Expr) -> Result<serde_json::Value, EvalError> {
        self.eval(expr, |v| {
            cel::Value::try_from(v)
                .map_err(|e| EvalError::Failed(e.to_string()))
                .and_then(|v| to_json(&v))
        })?
    }

    fn eval<T>(
        &mut self,
        expr: &Expr,
        read: impl FnOnce(&dyn cel::common::value::Val) -> T,
    ) -> Result<T, EvalError> {
        let facts = self.facts;
        let needs = self.needs.union(expr.needs);
        // Built again, once, for an expression that names more than the
        // scope was made for (the callers make it for all of theirs).
        if matches!(&self.built, Some(Ok(b)) if !b.needs.covers(needs)) {
            self.needs = needs;
            self.built = None;
        }
        let built = self.built.get_or_insert_with(|| build(facts, needs));
        let built = built
            .as_ref()
            .map_err(|e| EvalError::Unreadable(e.clone()))?;
        check_bound(expr, built.sizes)?;
        let ctx = &built.ctx;
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cel::Value::resolve_val(&expr.ast, ctx).map(|v| {
                if let Some(d) = v.downcast_ref::<CelDouble>() {
                    if !d.inner().is_finite() {
                        return Err(EvalError::NotJsonNumber(*d.inner()));
                    }
                }
                Ok(read(v.as_ref()))
            })
        }));
        match out {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => Err(EvalError::Failed(crate::core::text::excerpt(
                &e.to_string(),
                512,
            ))),
            Err(p) => Err(EvalError::Panicked(
                p.downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default(),
            )),
        }
    }
}

/// The bound checked before an evaluation (see the module map of `expr`).
pub(crate) fn check_bound(expr: &Expr, sizes: Sizes) -> Result<(), EvalError> {
    let shape = expr.shape;
    if shape.comprehensions == 0 && shape.adds == 0 {
        return Ok(()); // At most `nodes` steps, and nothing built.
    }
    let iterations = (sizes.longest_collection + 1).saturating_pow(shape.comprehensions);
    let steps = u64::from(shape.nodes).saturating_mul(iterations);
    if steps > MAX_STEPS {
        return Err(EvalError::OverBound {
            what: "the steps of its comprehensions",
            estimate: steps,
            limit: MAX_STEPS,
        });
    }
    if shape.adds > 0 {
        let text = sizes.longest_text.max(expr.source().len() as u64).max(1);
        let bytes = u64::from(shape.adds)
            .saturating_mul(iterations)
            .saturating_mul(u64::from(shape.nodes))
            .saturating_mul(text);
        if bytes > MAX_BUILD_BYTES {
            return Err(EvalError::OverBound {
                what: "the bytes `+` builds",
                estimate: bytes,
                limit: MAX_BUILD_BYTES,
            });
        }
    }
    Ok(())
}

/// The CEL context with the variables `needs` names.
fn build(facts: Facts<'_>, needs: Needs) -> Result<Built<'_>, String> {
    let mut sizes = Sizes::default();
    let mut ctx = cel::Context::with_env(env().clone());
    if needs.event {
        let ev = facts.event;
        let mut entries: Vec<(&str, Value<'_>)> = vec![
            ("id", convert::string(&ev.id, &mut sizes)),
            ("type", convert::string(&ev.event_type, &mut sizes)),
            ("source", convert::string(&ev.source, &mut sizes)),
        ];
        if let Some(s) = &ev.subject {
            entries.push(("subject", convert::string(s, &mut sizes)));
        }
        if let Some(t) = &ev.time {
            entries.push(("time", convert::string(t, &mut sizes)));
        }
        if needs.event_json != 0 {
            let text = std::str::from_utf8(&ev.raw).map_err(|e| e.to_string())?;
            let members = needs.event_json;
            if facts.cloudevent {
                let m =
                    convert::cloudevent(text, members, &mut sizes).map_err(|e| e.to_string())?;
                if let Some(d) = m.data {
                    entries.push(("data", d));
                }
                entries.push(("extensions", m.extensions));
            } else {
                let data = convert::data(text, members, &mut sizes).map_err(|e| e.to_string())?;
                entries.push(("data", data));
                entries.push(("extensions", convert::map(Vec::new(), &mut sizes)));
            }
        }
        ctx.add_variable_as_val("event", convert::map(entries, &mut sizes));
    }
    if needs.key {
        let v = match facts.key {
            Some(k) => convert::text_or_base64(k, &mut sizes),
            None => convert::null(),
        };
        ctx.add_variable_as_val("key", v);
    }
    if needs.record_key {
        let v = match facts.record_key {
            Some(k) => convert::text_or_base64(k, &mut sizes),
            None => convert::null(),
        };
        ctx.add_variable_as_val("record_key", v);
    }
    if needs.headers {
        // The last value of each name (UTF-8 names only: others are never
        // read as attributes, `core::input::HeaderName`).
        let mut last: Vec<(&str, Value<'_>)> = Vec::with_capacity(facts.headers.len());
        for (name, value) in facts.headers {
            let Some(name) = name.as_str() else { continue };
            let v = match value {
                Some(b) => convert::text_or_base64(b, &mut sizes),
                None => convert::null(),
            };
            match last.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = v,
                None => last.push((name, v)),
            }
        }
        ctx.add_variable_as_val("headers", convert::map(last, &mut sizes));
    }
    if needs.coordinates {
        ctx.add_variable_as_val("topic", convert::string(facts.topic, &mut sizes));
        ctx.add_variable_as_val("partition", convert::int(i64::from(facts.partition)));
        ctx.add_variable_as_val("offset", convert::int(facts.offset));
    }
    Ok(Built { ctx, sizes, needs })
}

/// A CEL value as JSON: a number JSON cannot carry is refused.
fn to_json(v: &cel::Value) -> Result<serde_json::Value, EvalError> {
    use serde_json::Value as J;
    Ok(match v {
        cel::Value::Null => J::Null,
        cel::Value::Bool(b) => J::Bool(*b),
        cel::Value::Int(i) => J::from(*i),
        cel::Value::UInt(u) => J::from(*u),
        cel::Value::Float(f) => {
            J::Number(serde_json::Number::from_f64(*f).ok_or(EvalError::NotJsonNumber(*f))?)
        }
        cel::Value::String(s) => J::String(s.to_string()),
        cel::Value::Bytes(b) => {
            use base64::Engine;
            J::String(base64::engine::general_purpose::STANDARD.encode(b.as_slice()))
        }
        cel::Value::List(l) => J::Array(l.iter().map(to_json).collect::<Result<_, _>>()?),
        cel::Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.map.iter() {
                let k = match k {
                    cel::objects::Key::String(s) => s.to_string(),
                    cel::objects::Key::Int(i) => i.to_string(),
                    cel::objects::Key::Uint(u) => u.to_string(),
                    cel::objects::Key::Bool(b) => b.to_string(),
                };
                out.insert(k, to_json(v)?);
            }
            J::Object(out)
        }
        other => J::String(format!("{other:?}")),
    })
}
