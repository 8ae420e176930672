//! Request mapping (`[[api.routes]]`): per CloudEvents `type` (exact or glob),
//! the URL, method, extra headers and body of the request. Pure: templates are
//! parsed once (unknown placeholders refused), rendered per event from its
//! attributes; the first matching route wins, no match means `api.url`.
//!
//! Placeholders: `{type}`, `{subject}`, `{id}`, `{key}`. In a URL they are
//! percent-encoded (everything but RFC 3986's unreserved characters), and only
//! allowed after the host: an event never chooses where its request goes. In a
//! header value they are inserted as they are (the HTTP stack refuses a value
//! with control characters: the event is then parked `request_unbuildable`).
//!
//! Nor does an event choose *which path* of the API it reaches: a path segment
//! a placeholder fills must not come out empty (`/orders//items`, or a
//! trailing `/orders/`: the collection instead of one of its members), `.` or
//! `..` (which URL parsers, proxies and servers resolve: `{subject} = ".."`
//! would walk up the API's path with the bearer token). Percent-encoding the
//! dots would not help: WHATWG URL parsers (the `url` crate under reqwest
//! among them) treat `%2e` as a dot when they resolve dot segments, and servers
//! decode it before routing. So such an event is refused
//! ([`Template::render_url`]) and parked `request_unbuildable`, the request
//! never sent. With `/` encoded as `%2F`, the path of every request a route
//! sends has the template's number of segments and its literal prefix.
//!
//! # Invariant I16: requests and traces
//!
//! *Enforced in* `src/core/mapping.rs`, `src/core/trace.rs`, `src/delivery/request.rs`
//! (`request`). An event's request: the first route whose type glob matches (URL with
//! percent-encoded placeholders, never in the host; method; headers from attributes; body
//! event or data), else `api.url`. Route URLs obey `api.url`'s rules (`check-config`). A
//! `traceparent` is forwarded only when valid W3C (then with its `tracestate`), from the
//! CloudEvents attributes or the Kafka headers; the event's JSON is looked at only when it
//! contains `"traceparent"`. With `[tracing] otlp_endpoint` (`src/otel.rs`), each delivery is
//! a span `deliver` (target `courier::otel`, the only spans the OTLP layer sees), a child of
//! the event's context, exported in batches from the SDK's thread; the request's
//! `traceparent` then names Courier's span. Off, no span is created per event beyond today's
//! DEBUG one.
//!
//! *Tested by:* Unit + property tests (percent-encoding round trip, globs, templates,
//! traceparent validation); `tests/otlp.rs` (a real OpenTelemetry Collector built by
//! `scripts/otelcol.sh` from the Go module proxy: the `deliver` span's parent is the event's
//! span, the API's `traceparent` names Courier's span); `tests/policy.rs`: two routes by type
//! with PUT/PATCH, headers, `body = "data"`, forwarded Kafka header, traceparent from an
//! attribute and a header, a malformed one not forwarded; audit lost 0.
//!
//! # Invariant I27: request paths
//!
//! *Enforced in* `src/core/mapping.rs` (`Template::render_url`), `src/delivery/request.rs`
//! (`request`). No event chooses the API's path: a route's placeholder value that would make
//! a path segment empty, `.` or `..` (`%2e` counts as a dot: the URL parser and servers
//! resolve it, so encoding the dots would not help) parks the event `request_unbuildable`,
//! unsent; with `/` encoded, every request has its template's number of path segments and
//! literal prefix.
//!
//! *Tested by:* `dot_and_empty_segments_cannot_change_the_path` (unit),
//! `no_value_changes_the_path_shape` (proptest through reqwest's URL parser);
//! `tests/policy.rs::routes_by_type_…`: `..`, `.` and empty subjects parked, never sent
//! (before the fix `.` reached `/routes/orders/?id=dot`).

use base64::Engine;
use serde::{Deserialize, Serialize};

/// What an event's attribute a placeholder names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholder {
    Type,
    Subject,
    Id,
    Key,
}

impl Placeholder {
    pub(crate) const ALL: [Placeholder; 4] = [
        Placeholder::Type,
        Placeholder::Subject,
        Placeholder::Id,
        Placeholder::Key,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Placeholder::Type => "type",
            Placeholder::Subject => "subject",
            Placeholder::Id => "id",
            Placeholder::Key => "key",
        }
    }

    fn parse(name: &str) -> Option<Placeholder> {
        Placeholder::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Slot(Placeholder),
}

/// A string with placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    parts: Vec<Part>,
    /// For a URL template: where its path starts (the end of
    /// `scheme://authority`, which holds no placeholder, so the same byte in
    /// the template and in every rendering).
    path_start: Option<usize>,
}

/// What a placeholder value would have made of a path segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentProblem {
    /// Empty (`//`, or a trailing `/`).
    Empty,
    /// `.` (`%2e` counts as a dot).
    Dot,
    /// `..`.
    DotDot,
}

impl SegmentProblem {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            SegmentProblem::Empty => "empty",
            SegmentProblem::Dot => "`.`",
            SegmentProblem::DotDot => "`..`",
        }
    }
}

/// An event whose attribute would change the path its route's URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("placeholder {{{}}} makes a path segment {}: the event cannot choose the API's path", .placeholder.as_str(), .problem.as_str())]
pub(crate) struct PathRefused {
    pub placeholder: Placeholder,
    pub problem: SegmentProblem,
}

/// Whether a rendered path segment is one URL resolution would remove or
/// resolve (WHATWG: `.`/`..`, `%2e` in either case standing for a dot).
fn segment_problem(seg: &str) -> Option<SegmentProblem> {
    if seg.is_empty() {
        return Some(SegmentProblem::Empty);
    }
    let lower = seg.to_ascii_lowercase();
    let dots = lower.replace("%2e", ".");
    match dots.as_str() {
        "." => Some(SegmentProblem::Dot),
        ".." => Some(SegmentProblem::DotDot),
        _ => None,
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MappingError {
    #[error("unknown placeholder `{{{0}}}` (known: {{type}}, {{subject}}, {{id}}, {{key}})")]
    UnknownPlaceholder(String),
    #[error("a `{{` without its `}}`, or a `}}` without its `{{`")]
    Unbalanced,
    #[error(
        "placeholders are allowed in the URL's path and query only, not in its scheme or host"
    )]
    PlaceholderInHost,
    #[error("`{0}` is not a valid glob for a type (empty)")]
    EmptyGlob(String),
}

impl Template {
    pub(crate) fn parse(s: &str) -> Result<Template, MappingError> {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find(['{', '}']) {
            if rest.as_bytes()[open] == b'}' {
                return Err(MappingError::Unbalanced);
            }
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 1..];
            let close = after.find('}').ok_or(MappingError::Unbalanced)?;
            let name = &after[..close];
            if name.contains('{') {
                return Err(MappingError::Unbalanced);
            }
            let p = Placeholder::parse(name)
                .ok_or_else(|| MappingError::UnknownPlaceholder(name.to_string()))?;
            parts.push(Part::Slot(p));
            rest = &after[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template {
            parts,
            path_start: None,
        })
    }

    /// A URL template: placeholders only after `scheme://host[:port]`.
    pub(crate) fn parse_url(s: &str) -> Result<Template, MappingError> {
        let t = Template::parse(s)?;
        let authority_end = s
            .find("://")
            .map(|i| i + 3)
            .and_then(|start| s[start..].find(['/', '?', '#']).map(|j| start + j))
            .unwrap_or(s.len());
        if s[..authority_end].contains('{') {
            return Err(MappingError::PlaceholderInHost);
        }
        Ok(Template {
            path_start: Some(authority_end),
            ..t
        })
    }

    #[cfg(test)]
    pub(crate) fn has_placeholders(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Slot(_)))
    }

    /// Renders with `attrs`; `encode` percent-encodes the inserted values.
    pub(crate) fn render(&self, attrs: &Attributes<'_>, encode: bool) -> String {
        self.render_spans(attrs, encode).0
    }

    /// The rendering and, per placeholder, the byte range its value took.
    fn render_spans(
        &self,
        attrs: &Attributes<'_>,
        encode: bool,
    ) -> (String, Vec<(Placeholder, usize, usize)>) {
        let mut out = String::new();
        let mut spans = Vec::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Slot(s) => {
                    let start = out.len();
                    let v = attrs.get(*s);
                    if encode {
                        percent_encode(v, &mut out);
                    } else {
                        out.push_str(v);
                    }
                    spans.push((*s, start, out.len()));
                }
            }
        }
        (out, spans)
    }

    /// A URL template rendered for an event: its values percent-encoded, and
    /// refused when one makes a path segment empty, `.` or `..` (see the
    /// module's documentation). Placeholders in the query are not checked:
    /// they cannot change the path.
    pub(crate) fn render_url(&self, attrs: &Attributes<'_>) -> Result<String, PathRefused> {
        let (out, spans) = self.render_spans(attrs, true);
        let Some(path_start) = self.path_start else {
            return Ok(out);
        };
        // Values are encoded: a `?` or `#` is the template's own.
        let path_end = out[path_start..]
            .find(['?', '#'])
            .map_or(out.len(), |i| path_start + i);
        let path = &out[path_start..path_end];
        let mut seg_start = path_start;
        for seg in path.split('/') {
            let seg_end = seg_start + seg.len();
            // A value in this segment (an empty one too: it sits between the
            // segment's bounds). The empty "segment" before the path's leading
            // `/` holds none: only a segment a value is in counts.
            let filled = spans
                .iter()
                .find(|(_, a, b)| *a >= seg_start && *b <= seg_end);
            if let (Some((placeholder, _, _)), Some(problem)) = (filled, segment_problem(seg)) {
                return Err(PathRefused {
                    placeholder: *placeholder,
                    problem,
                });
            }
            seg_start = seg_end + 1;
        }
        Ok(out)
    }
}

/// Everything but RFC 3986's unreserved characters, as `%XX`.
pub(crate) fn percent_encode(v: &str, out: &mut String) {
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

/// The attributes placeholders are filled from (absent ones are empty).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Attributes<'a> {
    pub event_type: &'a str,
    pub subject: &'a str,
    pub id: &'a str,
    pub key: &'a str,
}

impl Attributes<'_> {
    fn get(&self, p: Placeholder) -> &str {
        match p {
            Placeholder::Type => self.event_type,
            Placeholder::Subject => self.subject,
            Placeholder::Id => self.id,
            Placeholder::Key => self.key,
        }
    }
}

/// `*` any run of characters (dots included), `?` one character.
pub(crate) fn glob_match(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// `method` of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    #[default]
    Post,
    Put,
    Patch,
}

impl Method {}

/// `body` of a route: the whole event (today's) or its data only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyMode {
    #[default]
    Event,
    Data,
}

use crate::core::destination::{DestinationId, Destinations};

/// `on_error` of a route: what a `when` that fails for an event means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnError {
    /// Park the event `expression_failed` (fail closed: it shows in the
    /// parking lot).
    #[default]
    Park,
    /// The route does not match: the next one is tried.
    Skip,
}

/// A route's place in `[[api.routes]]`: the route an event was chosen for
/// ([`Routes::choose`]), carried with it to its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct RouteIndex(pub u16);

/// Where an event goes: the route chosen for it (none: `api.url`) and that
/// route's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub route: Option<RouteIndex>,
    pub destination: DestinationId,
}

impl Target {
    /// No route: `api.url`, the default destination.
    pub(crate) const DEFAULT: Target = Target {
        route: None,
        destination: DestinationId::DEFAULT,
    };
}

/// A route's `when` failed for an event, and the route parks such events.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("route `{route}`: when: {error}")]
pub(crate) struct RouteFailed {
    pub route: String,
    pub error: crate::core::expr::EvalError,
}

/// One parsed route.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    /// `name`, or its index.
    pub name: String,
    /// `when`, compiled: the route matches an event only if it says `true`.
    pub when: Option<std::sync::Arc<crate::core::expr::Expr>>,
    pub on_error: OnError,
    pub types: String,
    pub url: Template,
    pub method: Method,
    pub headers: Vec<(String, Template)>,
    pub body: BodyMode,
    /// How this route's events are batched (`None`: one request each).
    pub batch: Option<std::sync::Arc<crate::core::batch::BatchSpec>>,
    /// Where it sends (`core::destination`).
    pub destination: DestinationId,
}

/// The routes, in order: the first whose glob matches the type wins; and the
/// destinations they send to.
#[derive(Debug, Clone)]
pub(crate) struct Routes {
    routes: Vec<Route>,
    destinations: Destinations,
}

impl Routes {
    pub(crate) fn new(
        routes: Vec<Route>,
        destinations: Destinations,
    ) -> Result<Routes, MappingError> {
        if let Some(r) = routes.iter().find(|r| r.types.is_empty()) {
            return Err(MappingError::EmptyGlob(r.types.clone()));
        }
        Ok(Routes {
            routes,
            destinations,
        })
    }

    /// The destinations, by name.
    pub(crate) fn destinations(&self) -> &Destinations {
        &self.destinations
    }

    /// The destinations events can go to: the routes', and the default one
    /// unless a route takes every event (`*` without a `when`).
    pub(crate) fn reachable(&self) -> crate::core::destination::DestSet {
        let mut s = crate::core::destination::DestSet::default();
        for r in &self.routes {
            s.insert(r.destination);
        }
        if !self
            .routes
            .iter()
            .any(|r| r.types == "*" && r.when.is_none())
        {
            s.insert(DestinationId::DEFAULT);
        }
        s
    }

    /// Where an event of `event_type` goes: its route's destination, or the
    /// default one when no route matches.
    pub(crate) fn destination(&self, event_type: &str) -> DestinationId {
        self.find(event_type)
            .map_or(DestinationId::DEFAULT, |r| r.destination)
    }

    /// Whether any route batches its events.
    pub(crate) fn any_batched(&self) -> bool {
        self.routes.iter().any(|r| r.batch.is_some())
    }

    /// The most events one request may carry, over the routes and
    /// `default` (the batching of events no route matches): 1 without
    /// batching.
    pub(crate) fn max_batch_events(
        &self,
        default: Option<&crate::core::batch::BatchSpec>,
    ) -> usize {
        self.routes
            .iter()
            .filter_map(|r| r.batch.as_deref())
            .chain(default)
            .map(|b| b.max_events)
            .max()
            .unwrap_or(1)
            .max(1)
    }

    /// Route `i` (an index [`Routes::choose`] gave).
    pub(crate) fn get(&self, i: RouteIndex) -> Option<&Route> {
        self.routes.get(usize::from(i.0))
    }

    /// The route named `name`.
    pub(crate) fn by_name(&self, name: &str) -> Option<RouteIndex> {
        self.routes
            .iter()
            .position(|r| r.name == name)
            .and_then(|i| u16::try_from(i).ok())
            .map(RouteIndex)
    }

    /// Whether any route has a `when`.
    pub(crate) fn any_when(&self) -> bool {
        self.routes.iter().any(|r| r.when.is_some())
    }

    /// What the routes' `when` expressions need of an event.
    pub(crate) fn needs(&self) -> crate::core::expr::Needs {
        self.routes
            .iter()
            .filter_map(|r| r.when.as_deref())
            .fold(crate::core::expr::Needs::default(), |n, w| {
                n.union(w.needs())
            })
    }

    /// The route of an event of `event_type`: the first whose type glob and
    /// `when` (evaluated in `scope`) match; `None`: no route, `api.url`.
    /// A `when` that fails parks the event (`on_error = "park"`: the
    /// error) or does not match (`"skip"`). `scope` is `None` where the
    /// event cannot be read (an envelope whose payload no longer decodes):
    /// routes with a `when` are then passed over.
    pub(crate) fn choose(
        &self,
        event_type: &str,
        mut scope: Option<&mut crate::core::expr::Scope<'_>>,
    ) -> Result<Option<RouteIndex>, RouteFailed> {
        for (i, r) in self.routes.iter().enumerate() {
            if !glob_match(&r.types, event_type) {
                continue;
            }
            let matches = match (&r.when, scope.as_deref_mut()) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(w), Some(s)) => match (s.eval_bool(w), r.on_error) {
                    (Ok(m), _) => m,
                    (Err(_), OnError::Skip) => false,
                    (Err(error), OnError::Park) => {
                        return Err(RouteFailed {
                            route: r.name.clone(),
                            error,
                        })
                    }
                },
            };
            if matches {
                return Ok(u16::try_from(i).ok().map(RouteIndex));
            }
        }
        Ok(None)
    }

    /// The destination of a chosen route (the default one for none).
    pub(crate) fn destination_of(&self, route: Option<RouteIndex>) -> DestinationId {
        route
            .and_then(|i| self.get(i))
            .map_or(DestinationId::DEFAULT, |r| r.destination)
    }

    pub(crate) fn find(&self, event_type: &str) -> Option<&Route> {
        self.routes
            .iter()
            .find(|r| glob_match(&r.types, event_type))
    }

    /// Whether any route, or `default` (the batching of events no route
    /// matches), sends ordered runs (`ordered = true`).
    pub(crate) fn any_ordered(&self, default: Option<&crate::core::batch::BatchSpec>) -> bool {
        default.is_some_and(|b| b.ordered)
            || self
                .routes
                .iter()
                .any(|r| r.batch.as_ref().is_some_and(|b| b.ordered))
    }

    /// The run group of an event of `event_type` (`core::ordering`): its
    /// route's — or, matching none, `default`'s — batching when it is
    /// `ordered`; runs hold at most its `max_events`, and at most `cap`.
    pub(crate) fn run_group(
        &self,
        route: Option<RouteIndex>,
        default: Option<&crate::core::batch::BatchSpec>,
        cap: usize,
    ) -> Option<crate::core::ordering::RunGroup> {
        let (id, spec) = match route.and_then(|i| self.get(i).map(|r| (i, r))) {
            Some((i, r)) => (u32::from(i.0), r.batch.as_deref()),
            None => (u32::MAX, default),
        };
        let spec = spec.filter(|b| b.ordered)?;
        let max = spec.max_events.min(cap).min(u32::MAX as usize) as u32;
        Some(crate::core::ordering::RunGroup { id, max })
    }
}

/// The data of a structured CloudEvent, as the API gets it with `body = "data"`:
/// the `data` member's JSON text as it is in the event, or the bytes of
/// `data_base64`; empty without either. With whether it is JSON (the `data`
/// member) or bytes (`data_base64`). `None`: the event is not a JSON object (or
/// `data_base64` is not base64).
pub(crate) fn structured_data(raw: &[u8]) -> Option<(Vec<u8>, bool)> {
    #[derive(Deserialize)]
    struct Data<'a> {
        #[serde(borrow)]
        data: Option<&'a serde_json::value::RawValue>,
        data_base64: Option<String>,
    }
    let d: Data<'_> = serde_json::from_slice(raw).ok()?;
    match (d.data, d.data_base64) {
        (Some(v), _) => Some((v.get().as_bytes().to_vec(), true)),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .ok()
            .map(|d| (d, false)),
        (None, None) => Some((Vec::new(), true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn attrs() -> Attributes<'static> {
        Attributes {
            event_type: "order.created",
            subject: "tenant a/b?c",
            id: "e-1",
            key: "k#1",
        }
    }

    #[test]
    fn placeholders_are_rendered_and_encoded_in_urls() {
        let t = Template::parse_url("https://api/{type}/{subject}?id={id}&k={key}").unwrap();
        assert_eq!(
            t.render(&attrs(), true),
            "https://api/order.created/tenant%20a%2Fb%3Fc?id=e-1&k=k%231"
        );
        let h = Template::parse("{subject}").unwrap();
        assert_eq!(h.render(&attrs(), false), "tenant a/b?c");
        assert!(!Template::parse("plain").unwrap().has_placeholders());
    }

    #[test]
    fn unknown_or_misplaced_placeholders_are_refused() {
        assert_eq!(
            Template::parse("/x/{tenant}"),
            Err(MappingError::UnknownPlaceholder("tenant".into()))
        );
        assert_eq!(Template::parse("/x/{id"), Err(MappingError::Unbalanced));
        assert_eq!(Template::parse("/x/id}"), Err(MappingError::Unbalanced));
        assert_eq!(Template::parse("/x/{{id}}"), Err(MappingError::Unbalanced));
        assert_eq!(
            Template::parse_url("https://{subject}.example.com/x"),
            Err(MappingError::PlaceholderInHost)
        );
        assert_eq!(
            Template::parse_url("https://api:{id}/x"),
            Err(MappingError::PlaceholderInHost)
        );
        assert!(Template::parse_url("https://api/x/{id}").is_ok());
    }

    #[test]
    fn globs_and_first_match() {
        assert!(glob_match("order.*", "order.created"));
        assert!(glob_match("*", ""));
        assert!(glob_match("a?c", "abc"));
        assert!(!glob_match("order.*", "orders"));
        assert!(glob_match("*.created", "x.y.created"));
        assert!(!glob_match("*.created", "x.y.created.z"));
        let route = |types: &str, url: &str| Route {
            name: types.into(),
            when: None,
            on_error: OnError::Park,
            batch: None,
            types: types.into(),
            url: Template::parse_url(url).unwrap(),
            method: Method::Post,
            headers: Vec::new(),
            body: BodyMode::Event,
            destination: DestinationId(u8::from(url.contains("/2"))),
        };
        let mut d = Destinations::new("http://a".into());
        d.add("two").unwrap();
        let r = Routes::new(
            vec![
                route("order.created", "http://a/1"),
                route("order.*", "http://a/2"),
            ],
            d.clone(),
        )
        .unwrap();
        assert_eq!(r.destination("order.paid"), DestinationId(1));
        assert_eq!(r.destination("order.created"), DestinationId::DEFAULT);
        assert_eq!(
            r.destination("user.created"),
            DestinationId::DEFAULT,
            "no route: api.url's"
        );
        let url = |t: &str| r.find(t).map(|r| r.url.render(&attrs(), true));
        assert_eq!(url("order.created").as_deref(), Some("http://a/1"));
        assert_eq!(url("order.paid").as_deref(), Some("http://a/2"));
        assert_eq!(url("user.created"), None);
        assert!(Routes::new(vec![route("", "http://a/1")], d).is_err());
    }

    #[test]
    fn data_of_a_structured_event() {
        let ev = br#"{"id":"1","data":{"b": [1, 2]},"type":"t"}"#;
        assert_eq!(
            structured_data(ev).unwrap(),
            (br#"{"b": [1, 2]}"#.to_vec(), true)
        );
        let b64 = br#"{"id":"1","data_base64":"aGVsbG8="}"#;
        assert_eq!(structured_data(b64).unwrap(), (b"hello".to_vec(), false));
        assert_eq!(
            structured_data(br#"{"id":"1"}"#).unwrap(),
            (Vec::new(), true)
        );
        assert_eq!(structured_data(b"[1]"), None);
    }

    fn with_subject(subject: &str) -> Attributes<'_> {
        Attributes { subject, ..attrs() }
    }

    /// The path the real URL parser (reqwest's, the one requests go through)
    /// makes of a rendering.
    fn path_of(url: &str) -> Vec<String> {
        let u = reqwest::Url::parse(url).unwrap();
        u.path_segments().unwrap().map(String::from).collect()
    }

    #[test]
    fn dot_and_empty_segments_cannot_change_the_path() {
        let t = Template::parse_url("https://api/v1/tenants/{subject}/orders?id={id}").unwrap();
        // What a plain rendering does with them (the finding): `..` walks up,
        // `%2e%2e` likewise (the parser resolves it), empty gives `//`.
        assert_eq!(
            path_of(&t.render(&with_subject(".."), true)),
            ["v1", "orders"]
        );
        assert_eq!(
            path_of("https://api/v1/tenants/%2E%2e/orders"),
            ["v1", "orders"]
        );
        assert_eq!(
            path_of(&t.render(&with_subject(""), true)),
            ["v1", "tenants", "", "orders"]
        );
        for (v, problem) in [
            ("..", SegmentProblem::DotDot),
            (".", SegmentProblem::Dot),
            ("", SegmentProblem::Empty),
        ] {
            assert_eq!(
                t.render_url(&with_subject(v)),
                Err(PathRefused {
                    placeholder: Placeholder::Subject,
                    problem
                }),
                "{v:?}"
            );
        }
        // Dots inside a segment, or with other text, are a name like any other.
        for v in ["...", "a..", ".env", "..%2F..", "../.."] {
            let url = t.render_url(&with_subject(v)).unwrap();
            assert_eq!(path_of(&url).len(), 4, "{v:?}: {url}");
        }
        // Two placeholders making one `..`, or a literal dot beside one.
        let two = Template::parse_url("https://api/x/{type}{subject}/y").unwrap();
        let a = Attributes {
            event_type: ".",
            subject: ".",
            ..attrs()
        };
        assert!(two.render_url(&a).is_err());
        let lit = Template::parse_url("https://api/x/.{subject}").unwrap();
        assert!(lit.render_url(&with_subject(".")).is_err());
        assert!(lit.render_url(&with_subject("")).is_err());
        let lit = Template::parse_url("https://api/x/%2E{subject}").unwrap();
        assert!(lit.render_url(&with_subject(".")).is_err());
        // A trailing placeholder left empty names the collection: refused.
        let tail = Template::parse_url("https://api/users/{key}").unwrap();
        let empty_key = Attributes { key: "", ..attrs() };
        assert!(tail.render_url(&empty_key).is_err());
        // In the query, an empty or dotted value changes nothing.
        let q = Template::parse_url("https://api/x?s={subject}&t={id}").unwrap();
        assert_eq!(
            q.render_url(&with_subject("..")).unwrap(),
            "https://api/x?s=..&t=e-1"
        );
        assert_eq!(
            q.render_url(&with_subject("")).unwrap(),
            "https://api/x?s=&t=e-1"
        );
        // Beside other text in its segment, an empty value is fine.
        let part = Template::parse_url("https://api/x/id-{subject}").unwrap();
        assert_eq!(
            part.render_url(&with_subject("")).unwrap(),
            "https://api/x/id-"
        );
    }

    proptest! {
        /// A rendered URL value never carries a character that would change the
        /// URL's structure, and decoding gives the value back.
        #[test]
        fn percent_encoding_round_trips(v in "\\PC{0,40}") {
            let mut out = String::new();
            percent_encode(&v, &mut out);
            prop_assert!(out.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)));
            let mut bytes = Vec::new();
            let ob = out.as_bytes();
            let mut i = 0;
            while i < ob.len() {
                if ob[i] == b'%' {
                    let hex = std::str::from_utf8(&ob[i + 1..i + 3]).unwrap();
                    bytes.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 3;
                } else {
                    bytes.push(ob[i]);
                    i += 1;
                }
            }
            prop_assert_eq!(String::from_utf8(bytes).unwrap(), v);
        }

        /// No placeholder value changes the number of path segments nor the
        /// template's literal segments, as the real URL parser sees them: a
        /// rendering is either refused or keeps the template's path shape.
        #[test]
        fn no_value_changes_the_path_shape(
            tmpl in prop::sample::select(vec![
                "https://api/a/{subject}/b",
                "https://api/a/{subject}",
                "https://api/{subject}/{id}?k={key}",
                "https://api/a/x{subject}/b",
                "https://api/a/{type}{subject}/b#f",
                "https://api/a/.{subject}",
            ]),
            subject in "(\\.|\\.\\.|%2[eE]|/|\\?|#|\\\\|[a-z]|\\PC){0,4}",
            ty in "(\\.|[a-z]|%|/){0,2}",
        ) {
            let t = Template::parse_url(tmpl).unwrap();
            let a = Attributes { event_type: &ty, subject: &subject, id: "i", key: "k" };
            let sample = |v: &'static str| {
                path_of(&t.render(&Attributes { event_type: v, subject: v, id: v, key: v }, true))
            };
            // Two renderings with plain values: where they agree, the segment
            // is the template's own text.
            let (r1, r2) = (sample("v"), sample("w"));
            let naive = path_of(&t.render(&a, true));
            match t.render_url(&a) {
                Ok(url) => {
                    let got = path_of(&url);
                    prop_assert_eq!(got.len(), r1.len(), "{}", url);
                    for i in 0..got.len() {
                        if r1[i] == r2[i] {
                            prop_assert_eq!(&got[i], &r1[i], "{}", url);
                        } else {
                            prop_assert!(!got[i].is_empty(), "{}", url);
                        }
                    }
                }
                Err(e) => {
                    // Refused only where the plain rendering would have
                    // changed the path: a segment fewer, or an empty one.
                    prop_assert!(
                        naive.len() != r1.len() || naive.iter().any(String::is_empty),
                        "{:?} refused ({}) though its path is {:?}", a, e, naive
                    );
                }
            }
        }

        /// `*` alone matches anything; a literal pattern matches only itself.
        #[test]
        fn glob_literals_and_star(s in "[a-z.]{0,12}", t in "[a-z.]{0,12}") {
            prop_assert!(glob_match("*", &s));
            prop_assert_eq!(glob_match(&s, &t), s == t);
            let prefixed = format!("{s}*");
            prop_assert_eq!(glob_match(&prefixed, &t), t.starts_with(&s));
        }
    }
}
