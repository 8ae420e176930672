//! Compiling an expression: CEL's parser (with the standard macros), then one
//! walk of the AST that measures it against the bounds, checks its variables
//! and notes which variables it needs ([`Needs`]).

use super::needs::{member_bit, Needs, ALL_OF_THE_JSON};
use super::{MAX_COMPREHENSION_NESTING, MAX_DEPTH, MAX_NODES, MAX_SOURCE_BYTES, VARIABLES};
use cel::common::ast::{EntryExpr, Expr as Node, IdedExpr};
use std::sync::OnceLock;

/// The event's attributes Courier has decoded already: naming only these
/// (`event.type`) does not need the event's JSON converted.
pub(crate) const ATTRIBUTES: [&str; 5] = ["id", "type", "source", "subject", "time"];

/// Type names CEL lets an expression name (`type(x) == int`).
const TYPE_NAMES: [&str; 11] = [
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// A compiled expression: its AST (evaluated as it is, never parsed again)
/// and what the bounds and the scope need to know of it.
#[derive(Debug)]
pub struct Expr {
    source: String,
    pub(crate) ast: IdedExpr,
    pub(crate) shape: Shape,
    pub(crate) needs: Needs,
}

/// What the evaluation bound is estimated from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Shape {
    /// AST nodes.
    pub nodes: u32,
    /// How deep comprehensions nest (0: none).
    pub comprehensions: u32,
    /// `+` calls: the only operator that builds a value longer than its
    /// operands.
    pub adds: u32,
}

/// Why an expression is refused, with where (1-based line and column; the
/// start for a bound over the whole expression).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {problem}")]
pub struct CompileError {
    pub line: u32,
    pub column: u32,
    pub problem: Problem,
}

/// What is wrong with an expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("syntax: {0}")]
    Syntax(String),
    #[error("the expression is {0} bytes, over the limit of {MAX_SOURCE_BYTES}")]
    TooLong(usize),
    #[error("the expression has over {MAX_NODES} nodes")]
    TooManyNodes,
    #[error("the expression nests deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("comprehensions (all, exists, exists_one, map, filter) nest deeper than {MAX_COMPREHENSION_NESTING}")]
    TooManyComprehensions,
    #[error(
        "unknown variable `{0}` (known: event, key, record_key, headers, topic, partition, offset)"
    )]
    UnknownVariable(String),
    #[error("the parser failed: {0}")]
    Internal(String),
}

/// The standard environment: CEL's standard functions and macros, nothing else.
pub(crate) fn env() -> &'static std::sync::Arc<cel::Env> {
    static ENV: OnceLock<std::sync::Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| std::sync::Arc::new(cel::Env::stdlib()))
}

impl Expr {
    /// Parses and checks `source`. Never panics: a panic in the parser is
    /// caught and reported as [`Problem::Internal`].
    pub fn compile(source: &str) -> Result<Expr, CompileError> {
        let at_start = |problem| CompileError {
            line: 1,
            column: 1,
            problem,
        };
        if source.len() > MAX_SOURCE_BYTES {
            return Err(at_start(Problem::TooLong(source.len())));
        }
        if let Some(at) = too_deep_brackets(source) {
            let (line, column) = line_column(source, at);
            return Err(CompileError {
                line,
                column,
                problem: Problem::TooDeep,
            });
        }
        let parsed = parse(source).map_err(|p| at_start(Problem::Internal(p)))?;
        let (ast, info) = parsed.map_err(|errors| {
            let first = errors.errors.first();
            let (line, column) = first.map_or((1, 0), |e| e.pos);
            let message = first.map_or_else(|| "unknown".to_string(), |e| e.msg.clone());
            CompileError {
                line: u32::try_from(line.max(1)).unwrap_or(1),
                column: u32::try_from(column.max(1)).unwrap_or(1),
                problem: Problem::Syntax(message),
            }
        })?;
        let mut walk = Walk {
            shape: Shape::default(),
            needs: Needs::default(),
            bound: Vec::new(),
            error: None,
        };
        walk.visit(&ast, 1, 0);
        if let Some((id, problem)) = walk.error {
            let (line, column) = info
                .offset_for(id)
                .map_or((1, 1), |(start, _)| line_column(source, start as usize));
            return Err(CompileError {
                line,
                column,
                problem,
            });
        }
        Ok(Expr {
            source: source.to_string(),
            ast,
            shape: walk.shape,
            needs: walk.needs,
        })
    }

    /// The expression as configured.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// What the variables of an event must hold for it.
    pub fn needs(&self) -> Needs {
        self.needs
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }
}

/// The parser (ANTLR's generated one) and the crate's tree visitor recurse
/// per grammar rule: a few kilobytes of stack per level in a debug build. The
/// source's brackets are bounded first ([`too_deep_brackets`]) and the parse
/// runs on a thread of its own with a large stack, once per expression at
/// start; a panic in it is an error, not a crash.
fn parse(
    source: &str,
) -> Result<Result<(IdedExpr, cel::common::ast::SourceInfo), cel::ParseErrors>, String> {
    let source = source.to_string();
    let worker = std::thread::Builder::new()
        .name("courier-expr-parse".into())
        .stack_size(PARSE_STACK_BYTES)
        .spawn(move || {
            std::panic::catch_unwind(|| env().parser().parse_with_source_info(&source))
                .map_err(|p| panic_text(&p))
        })
        .map_err(|e| format!("cannot start the parser's thread: {e}"))?;
    let parsed = worker
        .join()
        .map_err(|p| panic_text(&p))?
        .map_err(|p| format!("panicked: {p}"))?;
    // `ParseErrors` holds a `Box<dyn Error + Send + Sync>` and the source
    // info an `Arc`: both may cross threads.
    Ok(parsed)
}

/// The parser thread's stack.
const PARSE_STACK_BYTES: usize = 64 << 20;

/// Where brackets (`(`, `[`, `{`, outside string literals) first nest deeper
/// than [`MAX_DEPTH`], as a character offset.
fn too_deep_brackets(source: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in source.chars().enumerate() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(i);
                }
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

/// The 1-based line and column of the `offset`th character of `source`.
fn line_column(source: &str, offset: usize) -> (u32, u32) {
    let (mut line, mut column) = (1u32, 1u32);
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

struct Walk {
    shape: Shape,
    needs: Needs,
    /// Names bound by the comprehensions around the node.
    bound: Vec<String>,
    /// The first problem, at the node's id.
    error: Option<(u64, Problem)>,
}

impl Walk {
    fn fail(&mut self, id: u64, p: Problem) {
        if self.error.is_none() {
            self.error = Some((id, p));
        }
    }

    fn visit(&mut self, e: &IdedExpr, depth: usize, comprehensions: u32) {
        if self.error.is_some() {
            return;
        }
        self.shape.nodes += 1;
        if self.shape.nodes as usize > MAX_NODES {
            return self.fail(e.id, Problem::TooManyNodes);
        }
        if depth > MAX_DEPTH {
            return self.fail(e.id, Problem::TooDeep);
        }
        let next = depth + 1;
        match &e.expr {
            Node::Unspecified | Node::Literal(_) => {}
            Node::Ident(name) => self.ident(e.id, name),
            Node::Select(s) => {
                if self.is_event(&s.operand) && ATTRIBUTES.contains(&s.field.as_str()) {
                    // `event.type`: a decoded attribute, no JSON needed.
                    self.shape.nodes += 1;
                    self.needs.event = true;
                    return;
                }
                if let Node::Select(inner) = &s.operand.expr {
                    if inner.field == "data" && self.is_event(&inner.operand) {
                        // `event.data.amount`: only that member of `data`
                        // is converted (`Needs::event_json`).
                        self.shape.nodes += 2;
                        self.needs.event = true;
                        self.needs.event_json |= member_bit(&s.field);
                        return;
                    }
                }
                self.visit(&s.operand, next, comprehensions);
            }
            Node::Call(c) => {
                if c.func_name == cel::common::ast::operators::ADD {
                    self.shape.adds += 1;
                }
                if let Some(t) = &c.target {
                    self.visit(t, next, comprehensions);
                }
                for a in &c.args {
                    self.visit(a, next, comprehensions);
                }
            }
            Node::List(l) => {
                for x in &l.elements {
                    self.visit(x, next, comprehensions);
                }
            }
            Node::Map(m) => self.entries(&m.entries, next, comprehensions),
            Node::Struct(s) => self.entries(&s.entries, next, comprehensions),
            Node::Comprehension(c) => {
                let inner = comprehensions + 1;
                if inner > MAX_COMPREHENSION_NESTING {
                    return self.fail(e.id, Problem::TooManyComprehensions);
                }
                self.shape.comprehensions = self.shape.comprehensions.max(inner);
                self.visit(&c.iter_range, next, comprehensions);
                self.visit(&c.accu_init, next, comprehensions);
                let before = self.bound.len();
                self.bound.push(c.iter_var.clone());
                self.bound.extend(c.iter_var2.clone());
                self.bound.push(c.accu_var.clone());
                self.visit(&c.loop_cond, next, inner);
                self.visit(&c.loop_step, next, inner);
                self.visit(&c.result, next, inner);
                self.bound.truncate(before);
            }
        }
    }

    fn entries(
        &mut self,
        entries: &[cel::common::ast::IdedEntryExpr],
        depth: usize,
        comprehensions: u32,
    ) {
        for entry in entries {
            match &entry.expr {
                EntryExpr::MapEntry(m) => {
                    self.visit(&m.key, depth, comprehensions);
                    self.visit(&m.value, depth, comprehensions);
                }
                EntryExpr::StructField(f) => self.visit(&f.value, depth, comprehensions),
            }
        }
    }

    /// `e` is the variable `event` (not a comprehension's variable of that name).
    fn is_event(&self, e: &IdedExpr) -> bool {
        matches!(&e.expr, Node::Ident(name) if name == "event")
            && !self.bound.iter().any(|b| b == "event")
    }

    fn ident(&mut self, id: u64, name: &str) {
        if self.bound.iter().any(|b| b == name) || TYPE_NAMES.contains(&name) {
            return;
        }
        match name {
            "event" => {
                self.needs.event = true;
                self.needs.event_json = ALL_OF_THE_JSON;
            }
            "key" => self.needs.key = true,
            "record_key" => self.needs.record_key = true,
            "headers" => self.needs.headers = true,
            "topic" | "partition" | "offset" => self.needs.coordinates = true,
            _ => {
                debug_assert!(!VARIABLES.contains(&name));
                self.fail(id, Problem::UnknownVariable(name.to_string()))
            }
        }
    }
}
