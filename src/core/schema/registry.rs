//! What a Schema Registry's answers mean (`schema_registry` asks, this
//! decides). An answer that says nothing of the schema (no answer, 5xx, 401,
//! 403, 408, 429, a redirect, a body that is not JSON) is waited out: the
//! registry is asked again and nothing is parked for it. An answer that says
//! the schema can never be read (404, another 4xx, JSON that is not a schema,
//! references that lead nowhere, nest too deep or pass the byte budget) is a
//! [`RegistryRefusal`]: the records naming the id are parked with its reason.
//! And [`Resolution`]: the references of one schema, each fetched once.

use super::Referenced;
use std::collections::HashMap;

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
    /// The schema with its references passes `cache_max_bytes`, or names more
    /// than [`MAX_REFERENCES`] references.
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

/// A subject as one URL path segment: percent-encoded but for RFC 3986's
/// unreserved characters. `.` and `..` cannot be a segment at all (URL
/// parsers remove them, encoded or not: `%2E%2E` is `..` too), nor can an
/// empty subject: such a reference leads nowhere.
pub(crate) fn subject_segment(subject: &str, version: i64) -> Result<String, Failure> {
    if matches!(subject, "" | "." | "..") {
        return Err(Failure::Refused(
            RegistryRefusal::UnknownReference,
            format!("a reference names the subject `{subject}` (version {version}), which no URL can ask for"),
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

/// A reference's schema: fetched, its own references being followed; or
/// resolved with them.
enum State {
    Following(String),
    Resolved(String),
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
pub(crate) struct Resolution {
    stack: Vec<Frame>,
    seen: HashMap<Key, State>,
    out: Vec<Referenced>,
    bytes: usize,
    max_bytes: usize,
}

impl Resolution {
    /// For a schema whose text is `root_bytes` long, naming `refs`, within
    /// `max_bytes` of texts in all.
    pub(crate) fn new(root_bytes: usize, refs: Vec<Reference>, max_bytes: usize) -> Resolution {
        Resolution {
            stack: vec![Frame {
                key: None,
                refs,
                next: 0,
            }],
            seen: HashMap::new(),
            out: Vec::new(),
            bytes: root_bytes,
            max_bytes,
        }
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
                        self.seen.insert(key.clone(), State::Resolved(text));
                    }
                    self.reference_done(&key);
                }
                continue;
            };
            let key = (r.subject.clone(), r.version);
            match self.seen.get(&key) {
                Some(State::Resolved(_)) => self.reference_done(&key),
                Some(State::Following(_)) => {
                    return Err(Failure::Refused(
                        RegistryRefusal::BadSchema,
                        format!(
                            "the schema's references form a cycle through subject {} version {}",
                            key.0, key.1
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
        self.bytes = self.bytes.saturating_add(answer.schema.len());
        if self.bytes > self.max_bytes {
            return Err(Failure::Refused(
                RegistryRefusal::TooLarge,
                format!(
                    "the schema with its references passes input.schema_registry.cache_max_bytes ({} bytes)",
                    self.max_bytes
                ),
            ));
        }
        if self.seen.len() >= MAX_REFERENCES {
            return Err(Failure::Refused(
                RegistryRefusal::TooLarge,
                format!("the schema names more than {MAX_REFERENCES} references"),
            ));
        }
        let key = (subject.clone(), *version);
        self.seen
            .insert(key.clone(), State::Following(answer.schema));
        self.stack.push(Frame {
            key: Some(key),
            refs: answer.references,
            next: 0,
        });
        Ok(())
    }

    /// The reference the top frame is at, resolved as `key`: named in the
    /// output (once per name), the frame moves on.
    fn reference_done(&mut self, key: &Key) {
        let Some(top) = self.stack.last_mut() else {
            return;
        };
        let name = top
            .refs
            .get(top.next)
            .map(|r| r.name.clone())
            .unwrap_or_default();
        top.next += 1;
        if let Some(State::Resolved(schema)) = self.seen.get(key) {
            if !self
                .out
                .iter()
                .any(|o| o.name == name && o.schema == *schema)
            {
                self.out.push(Referenced {
                    name,
                    schema: schema.clone(),
                });
            }
        }
    }

    /// The referenced schemas by name, dependencies first.
    pub(crate) fn finish(self) -> Vec<Referenced> {
        self.out
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
