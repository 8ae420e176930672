//! What a Schema Registry's answers mean (`schema_registry` asks, this
//! decides). An answer that says nothing of the schema (no answer, 5xx, 401,
//! 403, 408, 429, a redirect, a body that is not JSON) is waited out: the
//! registry is asked again and nothing is parked for it. An answer that says
//! the schema can never be read (404, another 4xx, JSON that is not a schema,
//! references that lead nowhere, nest too deep or pass the byte budget) is a
//! [`RegistryRefusal`]: the records naming the id are parked with its reason.
//! A 404 for the id itself is asked again first ([`ask_again`]: 1.5 s in
//! all), in case a follower registry lags its leader.
//! And [`Resolution`]: the references of one schema, each fetched once.

use super::Referenced;
use crate::core::text::{excerpt, LOG_TEXT_MAX};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Why the registry's answer for a schema id can never be read: the parking
/// reason of the records naming the id (`last_error.reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RegistryRefusal {
    /// The registry does not know the id (404).
    UnknownSchema,
    /// A reference (subject, version) the registry does not know (404), or a
    /// subject no URL can name (`.`, `..`, empty).
    UnknownReference,
    /// Another 4xx, JSON that is not a schema answer, references in a cycle, a
    /// schema its compiler crashed on.
    BadSchema,
    /// References nested deeper than [`MAX_REFERENCE_DEPTH`].
    TooDeep,
    /// The schema with its references passes `cache_max_bytes` (as
    /// [`Resolution`] charges it), names more than [`MAX_REFERENCES`]
    /// distinct references, or more than [`MAX_REFERENCE_EDGES`] in all.
    TooLarge,
}

impl RegistryRefusal {
    #[cfg(test)]
    pub(crate) const ALL: [RegistryRefusal; 5] = [
        RegistryRefusal::UnknownSchema,
        RegistryRefusal::UnknownReference,
        RegistryRefusal::BadSchema,
        RegistryRefusal::TooDeep,
        RegistryRefusal::TooLarge,
    ];

    /// The parking reason.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RegistryRefusal::UnknownSchema => "unknown_schema",
            RegistryRefusal::UnknownReference => "unknown_schema_reference",
            RegistryRefusal::BadSchema => "bad_schema",
            RegistryRefusal::TooDeep => "schema_too_deep",
            RegistryRefusal::TooLarge => "schema_too_large",
        }
    }
}

/// Why a schema cannot be had: for now, or for good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Failure {
    /// The registry did not answer usefully: wait and ask again.
    #[error("schema registry unavailable: {0}")]
    Wait(String),
    /// Never readable: park the records naming it.
    #[error("{1}")]
    Refused(RegistryRefusal, String),
}

/// What was asked: the id a record names, or a reference of its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Asked {
    Id(u32),
    Reference { subject: String, version: i64 },
}

impl std::fmt::Display for Asked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Asked::Id(id) => write!(f, "schema id {id}"),
            Asked::Reference { subject, version } => {
                // The registry chose it: cut and escaped (I28).
                let subject = excerpt(subject, LOG_TEXT_MAX);
                write!(f, "referenced subject {subject} version {version}")
            }
        }
    }
}

/// What an answer's HTTP status means; `Ok(())`: a 2xx, read its body.
pub(crate) fn status(status: u16, asked: &Asked) -> Result<(), Failure> {
    let refused = |r: RegistryRefusal, what: String| Err(Failure::Refused(r, what));
    match status {
        200..=299 => Ok(()),
        404 => match asked {
            Asked::Id(_) => refused(
                RegistryRefusal::UnknownSchema,
                format!("{asked} is not known to the schema registry"),
            ),
            Asked::Reference { .. } => refused(
                RegistryRefusal::UnknownReference,
                format!("{asked} is not known to the schema registry (HTTP 404)"),
            ),
        },
        // The registry or our credentials, not the schema.
        401 | 403 | 408 | 429 => Err(Failure::Wait(format!("HTTP {status} for {asked}"))),
        400..=499 => refused(
            RegistryRefusal::BadSchema,
            format!("the schema registry refused {asked}: HTTP {status}"),
        ),
        // 5xx, and 1xx/3xx (redirects are not followed): not an answer about
        // the schema.
        _ => Err(Failure::Wait(format!("HTTP {status} for {asked}"))),
    }
}

/// After the registry answered 404 for an id, it is asked again after these
/// delays (1.5 s in all, the partition waiting) before the id is taken as
/// unknown and its records parked: a follower registry a moment behind its
/// leader does not know a schema just registered.
pub(crate) const UNKNOWN_ASKED_AGAIN: [Duration; 2] =
    [Duration::from_millis(500), Duration::from_millis(1000)];

/// How long to wait before asking again for an id the registry answered 404
/// `answers` times; `None`: it is unknown (parked `unknown_schema`).
pub(crate) fn ask_again(answers: usize) -> Option<Duration> {
    UNKNOWN_ASKED_AGAIN.get(answers.checked_sub(1)?).copied()
}

/// A registry's answer for an id or a subject version.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct SchemaAnswer {
    pub schema: String,
    #[serde(rename = "schemaType")]
    pub schema_type: Option<String>,
    #[serde(default)]
    pub references: Vec<Reference>,
}

/// A reference a schema names.
#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct Reference {
    /// What the referencing schema calls it (a Protobuf import path, a JSON
    /// Schema `$ref`, an Avro type name).
    #[serde(default)]
    pub name: String,
    pub subject: String,
    pub version: i64,
}

/// A 2xx answer's body: the schema answer, or what it means that it is not
/// one. A body that is not JSON at all (an HTML page from a proxy) is not the
/// registry speaking: waited out. JSON that is not a schema answer is.
pub(crate) fn answer(body: &[u8], asked: &Asked) -> Result<SchemaAnswer, Failure> {
    if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        return Err(Failure::Wait(format!(
            "an answer that is not JSON for {asked}"
        )));
    }
    serde_json::from_slice(body).map_err(|e| {
        Failure::Refused(
            RegistryRefusal::BadSchema,
            format!("the schema registry's answer for {asked} is not a schema: {e}"),
        )
    })
}

/// An answer larger than the byte budget (`cache_max_bytes`).
pub(crate) fn too_large(asked: &Asked, max_bytes: usize) -> Failure {
    Failure::Refused(
        RegistryRefusal::TooLarge,
        format!("the answer for {asked} is larger than input.schema_registry.cache_max_bytes ({max_bytes} bytes)"),
    )
}

/// The deepest chain of references followed.
pub(crate) const MAX_REFERENCE_DEPTH: usize = 16;
/// The most distinct references one schema may name, transitively.
pub(crate) const MAX_REFERENCES: usize = 1000;
/// The most references an id's answer and its references' answers may name
/// in all, counted each time one is named (a diamond names a reference
/// once per path to it).
pub(crate) const MAX_REFERENCE_EDGES: usize = 10 * MAX_REFERENCES;

/// A subject as one URL path segment: percent-encoded but for RFC 3986's
/// unreserved characters. `.` and `..` cannot be a segment at all (URL
/// parsers remove them, encoded or not: `%2E%2E` is `..` too), nor can an
/// empty subject: such a reference leads nowhere.
pub(crate) fn subject_segment(subject: &str, version: i64) -> Result<String, Failure> {
    if matches!(subject, "" | "." | "..") {
        return Err(Failure::Refused(
            RegistryRefusal::UnknownReference,
            format!(
                "a reference names the subject `{}` (version {version}), which no URL can ask for",
                excerpt(subject, LOG_TEXT_MAX)
            ),
        ));
    }
    let mut out = String::with_capacity(subject.len());
    for b in subject.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(out)
}

type Key = (String, i64);

/// What one reference a registry answer lists is charged to the byte budget:
/// its name and subject, and its place in the list.
fn listed_bytes(refs: &[Reference]) -> usize {
    refs.iter().fold(0usize, |n, r| {
        n.saturating_add(r.name.len())
            .saturating_add(r.subject.len())
            .saturating_add(std::mem::size_of::<Reference>())
    })
}

/// A reference's schema: fetched, its own references being followed; or
/// resolved with them. The text is shared by every name it is listed under.
enum State {
    Following(Arc<str>),
    /// `named`: listed in the output under some name already.
    Resolved {
        text: Arc<str>,
        named: bool,
    },
}

/// One schema being resolved: its (subject, version) (`None`: the schema the
/// id names), the references it names, and how many of them are resolved.
struct Frame {
    key: Option<Key>,
    refs: Vec<Reference>,
    next: usize,
}

/// The references of one schema resolved, depth first, dependencies before
/// what needs them, each (subject, version) fetched once however many paths
/// lead to it (a diamond of depth 16 is 32 fetches, not 2^16). The shell asks
/// [`Resolution::need`] what to fetch, gives each answer to
/// [`Resolution::fetched`], and takes [`Resolution::finish`] once nothing is
/// needed.
///
/// Bounded by what the registry answers, however it answers (issue 54, item
/// 10): the byte budget (`cache_max_bytes`) is charged the root text, every
/// answer's list of references (names, subjects, one [`Reference`] each),
/// every text fetched, and every entry of the output (its name, and its text
/// once more for each name past the first: a compiler reads each entry
/// apart). The output's texts are shared (`Arc<str>`), never copied per name;
/// duplicates are found in a set; and the references named in all, counted
/// each time one is named, are at most [`MAX_REFERENCE_EDGES`], checked as
/// each answer comes, before its list is walked.
pub(crate) struct Resolution {
    stack: Vec<Frame>,
    seen: HashMap<Key, State>,
    out: Vec<Referenced>,
    /// The (name, reference) pairs in `out`.
    named: HashSet<(String, Key)>,
    bytes: usize,
    max_bytes: usize,
    /// References named so far, each time one is named.
    edges: usize,
}

impl Resolution {
    /// For a schema whose text is `root_bytes` long, naming `refs`, within
    /// `max_bytes` of texts in all.
    pub(crate) fn new(
        root_bytes: usize,
        refs: Vec<Reference>,
        max_bytes: usize,
    ) -> Result<Resolution, Failure> {
        let mut r = Resolution {
            stack: Vec::new(),
            seen: HashMap::new(),
            out: Vec::new(),
            named: HashSet::new(),
            bytes: 0,
            max_bytes,
            edges: 0,
        };
        r.charge(root_bytes)?;
        r.listed(&refs)?;
        r.stack.push(Frame {
            key: None,
            refs,
            next: 0,
        });
        Ok(r)
    }

    /// `n` more bytes, within the budget.
    fn charge(&mut self, n: usize) -> Result<(), Failure> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.max_bytes {
            return Err(Failure::Refused(
                RegistryRefusal::TooLarge,
                format!(
                    "the schema with its references passes input.schema_registry.cache_max_bytes ({} bytes)",
                    self.max_bytes
                ),
            ));
        }
        Ok(())
    }

    /// An answer's list of references, charged before it is walked.
    fn listed(&mut self, refs: &[Reference]) -> Result<(), Failure> {
        self.edges = self.edges.saturating_add(refs.len());
        if self.edges > MAX_REFERENCE_EDGES {
            return Err(Failure::Refused(
                RegistryRefusal::TooLarge,
                format!(
                    "the schema and its references name more than {MAX_REFERENCE_EDGES} references in all"
                ),
            ));
        }
        self.charge(listed_bytes(refs))
    }

    /// The next reference to fetch, with its subject as a URL path segment;
    /// `Ok(None)`: every reference is resolved.
    pub(crate) fn need(&mut self) -> Result<Option<(Asked, String)>, Failure> {
        loop {
            let depth = self.stack.len();
            let Some(top) = self.stack.last() else {
                return Ok(None);
            };
            let Some(r) = top.refs.get(top.next) else {
                // Every reference of `top` is resolved: so is `top`.
                if let Some(Frame { key: Some(key), .. }) = self.stack.pop() {
                    if let Some(State::Following(text)) = self.seen.remove(&key) {
                        let resolved = State::Resolved { text, named: false };
                        self.seen.insert(key.clone(), resolved);
                    }
                    self.reference_done(key)?;
                }
                continue;
            };
            let key = (r.subject.clone(), r.version);
            match self.seen.get(&key) {
                Some(State::Resolved { .. }) => self.reference_done(key)?,
                Some(State::Following(_)) => {
                    return Err(Failure::Refused(
                        RegistryRefusal::BadSchema,
                        format!(
                            "the schema's references form a cycle through subject {} version {}",
                            excerpt(&key.0, LOG_TEXT_MAX),
                            key.1
                        ),
                    ))
                }
                None if depth > MAX_REFERENCE_DEPTH => {
                    return Err(Failure::Refused(
                        RegistryRefusal::TooDeep,
                        format!(
                            "the schema's references are nested deeper than {MAX_REFERENCE_DEPTH} levels"
                        ),
                    ))
                }
                None => {
                    let segment = subject_segment(&key.0, key.1)?;
                    let asked = Asked::Reference {
                        subject: key.0,
                        version: key.1,
                    };
                    return Ok(Some((asked, segment)));
                }
            }
        }
    }

    /// The answer for what [`Self::need`] asked last.
    pub(crate) fn fetched(&mut self, asked: &Asked, answer: SchemaAnswer) -> Result<(), Failure> {
        let Asked::Reference { subject, version } = asked else {
            return Ok(());
        };
        if self.seen.len() >= MAX_REFERENCES {
            return Err(Failure::Refused(
                RegistryRefusal::TooLarge,
                format!("the schema names more than {MAX_REFERENCES} references"),
            ));
        }
        self.charge(answer.schema.len())?;
        self.listed(&answer.references)?;
        let key = (subject.clone(), *version);
        self.seen
            .insert(key.clone(), State::Following(Arc::from(answer.schema)));
        self.stack.push(Frame {
            key: Some(key),
            refs: answer.references,
            next: 0,
        });
        Ok(())
    }

    /// The reference the top frame is at, resolved as `key`: named in the
    /// output (once per name, charged), the frame moves on.
    fn reference_done(&mut self, key: Key) -> Result<(), Failure> {
        let Some(top) = self.stack.last_mut() else {
            return Ok(());
        };
        let name = top
            .refs
            .get(top.next)
            .map(|r| r.name.clone())
            .unwrap_or_default();
        top.next += 1;
        let Some(State::Resolved { text, named }) = self.seen.get_mut(&key) else {
            return Ok(());
        };
        let (schema, first) = (text.clone(), !*named);
        *named = true;
        let entry = (name, key);
        if self.named.contains(&entry) {
            return Ok(());
        }
        // Its text was charged when it was fetched, for its first name.
        let text_bytes = if first { 0 } else { schema.len() };
        self.charge(entry.0.len().saturating_add(text_bytes))?;
        self.out.push(Referenced {
            name: entry.0.clone(),
            schema,
        });
        self.named.insert(entry);
        Ok(())
    }

    /// The referenced schemas by name, dependencies first.
    pub(crate) fn finish(self) -> Vec<Referenced> {
        self.out
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
