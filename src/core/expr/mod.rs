//! One expression language for filters (`[[filters]]` `drop`) and route
//! predicates (`[[api.routes]]` `when`): CEL, the language of Kubernetes
//! admission rules and Envoy, through the `cel` crate (0.15). Pure: no I/O, no
//! clock; an expression sees only the event and its record.
//!
//! # Map
//!
//! * [`compile`] — [`Expr::compile`]: parse once at start, refuse what is over
//!   the bounds (size, nodes, nesting, comprehension nesting) or names an
//!   unknown variable, with the line and column ([`CompileError`]).
//! * [`convert`] — an event's JSON to CEL values in one pass (no
//!   `serde_json::Value` in between; strings without escapes borrowed; of
//!   `data` only the members the expressions name, `event.data.amount`,
//!   unless one names `data` or `event` as a whole), with the sizes the
//!   evaluation bound is estimated from ([`convert::Sizes`]).
//! * [`scope`] — [`Scope`]: one event's variables, built once (lazily, on the
//!   first evaluation) whatever the number of expressions; [`Scope::eval_bool`]
//!   checks the bound first, evaluates, and turns a failure, a result over a
//!   bound or a number JSON cannot carry into an [`EvalError`] (never a panic).
//! * [`filters`] — [`Filters`]: the verdict of `[[filters]]` for one event.
//!
//! Route predicates are evaluated by `core::mapping::Routes::choose`.
//!
//! # Variables
//!
//! `event` (`id`, `type`, `source`, `subject`, `time`, `data`, `extensions`),
//! `key` (the key ordering uses), `record_key` (the Kafka key), `headers`
//! (name → last value), `topic`, `partition`, `offset`. Keys and header values
//! are text where they are UTF-8 and base64 otherwise; an absent key is `null`.
//!
//! # Bounds, and how each is enforced
//!
//! The crate has no step counter, no deadline and no memory cap inside an
//! evaluation, and a tokio timeout cannot stop a synchronous call, so Courier
//! bounds what it can around it:
//!
//! * **Compile time** ([`Expr::compile`]): source ≤ [`MAX_SOURCE_BYTES`],
//!   AST nodes ≤ [`MAX_NODES`], nesting ≤ [`MAX_DEPTH`] (and the parser's own
//!   recursion limit, 96 grammar rules, which keeps ANTLR's stack bounded),
//!   comprehensions (`all`, `exists`, `map`, `filter`) nested at most
//!   [`MAX_COMPREHENSION_NESTING`] deep; no extension library (CEL's standard
//!   functions only: none of them repeats or joins), no variables but the
//!   seven above.
//! * **Before each evaluation** ([`Scope::eval_bool`]): the worst-case work,
//!   `nodes × (L + 1)^c` (L the longest list or map among the variables, c the
//!   comprehension nesting), must be ≤ [`MAX_STEPS`]; and what `+` may build,
//!   `adds × (L + 1)^c × nodes × S` bytes (S the longest string or bytes
//!   value), ≤ [`MAX_BUILD_BYTES`]. Without loops or bindings in CEL, no
//!   evaluation can do more than that estimate: an event over it is parked
//!   `expression_failed` without being evaluated.
//! * **After**: the result must be a `bool`, and a `double` result must be
//!   finite (JSON has no infinity or NaN).
//! * **Backstop**: the evaluation runs under `catch_unwind`: a panic in the
//!   crate parks the event instead of crashing its partition.
//!
//! Not bounded: the time of one `matches` call (the regex crate compiles
//! each pattern, at most its default 10 MiB program, and matches in linear
//! time); a comparison with a double divided by zero (`±inf`) is evaluated as
//! IEEE says, only a result that is such a number fails.

//! # Invariant I40: expressions
//!
//! *Enforced in* `src/core/expr/`, `src/core/mapping.rs` (`Routes::choose`),
//! `src/actors/partition/choose.rs`, `src/actors/partition/decode.rs`. An event's route is
//! chosen once, when it is decoded (its type glob and `when`), and carried with it
//! (`delivery::Item::target`): its request, its destination and its DLQ envelope (`route`,
//! the route's name) follow that choice, and a DLQ redelivery goes to the recorded route
//! (chosen again, logged and counted, only when the routes no longer have it). Expressions
//! are compiled once (`runtime::Pipeline`), never evaluated over their bound, and one that
//! gives no answer parks its event `expression_failed` (or, `on_error = "skip"`, is no
//! match): never a crash. A filtered event is done without a request, its offset committed.
//!
//! *Tested by:* unit (`core::expr::tests`: positions, bounds, conversions, failures);
//! `tests/expressions.rs`: a filter drops a third (committed, counted, audit: filtered, none
//! lost), a `when` route by a data field, failing and over-bound expressions parked while
//! the others flow, a DLQ'd event back to its route after the routes' order changed,
//! `check-config` and `expr eval`.

pub mod compile;
pub mod convert;
pub mod filters;
pub mod needs;
pub mod scope;
#[cfg(test)]
mod tests;

pub use compile::{CompileError, Expr};
pub use filters::{Filter, FilterFailed, FilterVerdict, Filters};
pub use needs::Needs;
pub use scope::{EvalError, Facts, Scope};

/// The longest expression source, in bytes.
pub const MAX_SOURCE_BYTES: usize = 4096;
/// The most AST nodes an expression may have (after macro expansion).
pub const MAX_NODES: usize = 256;
/// The deepest an expression's AST may nest.
pub const MAX_DEPTH: usize = 32;
/// How deep comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`)
/// may nest inside each other.
pub const MAX_COMPREHENSION_NESTING: u32 = 2;
/// The most node evaluations the worst case of one evaluation may need.
pub const MAX_STEPS: u64 = 1_000_000;
/// The most bytes `+` may build in the worst case of one evaluation.
pub const MAX_BUILD_BYTES: u64 = 16 << 20;

/// The variables an expression may name.
pub const VARIABLES: [&str; 7] = [
    "event",
    "key",
    "record_key",
    "headers",
    "topic",
    "partition",
    "offset",
];
