//! The reference as the guide's page (Markdown) and as plain text for a terminal.

use super::{sections, Section};
use std::fmt::Write as _;

/// What the page says before the sections.
const PREFACE: &str = "\
Every field has a default unless it says `required`. The file is TOML
(`config/courier.toml` lists every field); an environment variable
`COURIER__<SECTION>__<KEY>` overrides the file (`COURIER__PIPELINE__CONCURRENCY=1024`;
a nested section adds its name: `COURIER__API__BATCH__MAX_EVENTS`). Unknown fields are
refused, so a typo is an error. Durations are strings with units (`\"250ms\"`, `\"5s\"`,
`\"1m 30s\"`, `\"24h\"`); the previous release's millisecond integers under `*_ms`
names are still accepted, and `courier check-config` names each one with the key to
write instead. Secrets are never values here: a field names the environment variable
or the file that holds one.";

/// `[`Self::instance_id`]` (a rustdoc link) → `` `Self::instance_id` ``: the
/// guide has no such targets.
fn plain_links(doc: &str) -> String {
    let mut out = String::with_capacity(doc.len());
    let mut rest = doc;
    while let Some(i) = rest.find("[`") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find("`]") {
            Some(j) if !after[j + 2..].starts_with('(') && !after[..j].contains('\n') => {
                out.push_str(&after[..j + 1]);
                rest = &after[j + 2..];
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The header a section has in a TOML file.
fn header(s: &Section) -> String {
    match s.path.strip_suffix("[]") {
        Some(list) => format!("[[{list}]]"),
        None => format!("[{}]", s.path.replace("[].", ".")),
    }
}

/// The guide's configuration reference page.
pub fn markdown() -> String {
    let mut out = String::from(
        "<!-- Generated from the config types' doc comments by `courier config reference \
         --markdown`: edit those, then run\n     cargo run -- config reference --markdown \
         > docs/guide/src/configuration-reference.md\n     (a test checks that this page \
         is that text). -->\n\n# Configuration reference\n\n",
    );
    out.push_str(PREFACE);
    out.push_str("\n\nSections: ");
    let all = sections();
    let index: Vec<String> = all
        .iter()
        .map(|s| format!("[`{}`](#{})", header(s), anchor(&header(s))))
        .collect();
    out.push_str(&index.join(" · "));
    out.push('\n');
    for s in &all {
        let _ = write!(out, "\n## `{}`\n\n", header(s));
        if !s.doc.is_empty() {
            let _ = write!(out, "{}\n\n", plain_links(&s.doc));
        }
        for e in &s.entries {
            let _ = write!(
                out,
                "### `{}`\n\n{} · default `{}`",
                e.path, e.ty, e.default
            );
            if !e.path.contains("[]") {
                let env = e.path.replace('.', "__").to_uppercase();
                let _ = write!(out, " · `COURIER__{env}`");
            }
            out.push_str("\n\n");
            if !e.doc.is_empty() {
                let _ = write!(out, "{}\n\n", plain_links(&e.doc));
            }
        }
    }
    let mut out = out.trim_end().to_string();
    out.push('\n');
    out
}

/// The id mdBook gives a heading: lower case, letters, digits, `-` and `_`
/// kept, spaces to `-`, the rest dropped.
fn anchor(heading: &str) -> String {
    heading
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// The reference for a terminal: each field with its type and default, its
/// meaning indented below.
pub fn text() -> String {
    let mut out = String::new();
    for s in sections() {
        let _ = writeln!(out, "{}", header(&s));
        for e in &s.entries {
            let _ = writeln!(out, "  {} = {}   ({})", e.path, e.default, e.ty);
            for line in plain_links(&e.doc).lines() {
                let _ = writeln!(out, "      {line}");
            }
        }
        out.push('\n');
    }
    out.trim_end().to_string() + "\n"
}
