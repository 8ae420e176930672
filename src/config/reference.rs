//! The configuration reference (`courier config reference`), generated from the
//! config types themselves: every field's name, type, default and meaning.
//!
//! - Names, types and meanings: build.rs reads the structs and enums of
//!   `src/config` (and the enums of `src/core` they use) with `syn` —
//!   fields, serde renames, doc comments — into a table compiled in here.
//! - Defaults: `Config::default()`, serialised, as the service applies them.
//!
//! Why a build-time read of the source rather than a derive: the doc comments
//! are already the documentation of each field, and every struct keeps its
//! plain serde derives (no attribute to add, nothing to keep in step on a new
//! field); the binary carries the result, so the command needs no source tree.
//! The guide's page is this text (a test compares them), and a field without a
//! doc comment fails that test: nothing is written twice, and nothing can be
//! left out.

use super::Config;
use serde_json::Value;

/// A struct or enum of the configuration, as its source declares it.
pub(crate) struct TypeDoc {
    pub name: &'static str,
    pub doc: &'static str,
    pub is_enum: bool,
    pub rename_all: &'static str,
    pub tag: &'static str,
    /// `#[serde(default)]` on the struct.
    pub default: bool,
    /// The enum's `#[default]` variant (its Rust name).
    pub default_variant: &'static str,
    pub fields: &'static [FieldDoc],
    pub variants: &'static [VariantDoc],
}

/// One field of a struct (or of an enum's variant).
pub(crate) struct FieldDoc {
    pub ident: &'static str,
    pub rename: &'static str,
    /// The Rust type as written, without spaces: `Option<Vec<String>>`.
    pub ty: &'static str,
    pub doc: &'static str,
    /// `#[serde(with = "…")]`.
    pub with: &'static str,
    pub skip: bool,
    /// `#[serde(default)]` on the field.
    pub default: bool,
}

/// One variant of an enum.
pub(crate) struct VariantDoc {
    pub ident: &'static str,
    pub rename: &'static str,
    pub doc: &'static str,
    pub fields: &'static [FieldDoc],
}

include!(concat!(env!("OUT_DIR"), "/config_docs.rs"));

/// The type named `name` (the first of that name: config types first).
pub(crate) fn type_doc(name: &str) -> Option<&'static TypeDoc> {
    TYPES.iter().find(|t| t.name == name)
}

/// `Option<Vec<String>>` → ("Option", ["Vec<String>"]).
fn split_type(ty: &str) -> (&str, Vec<&str>) {
    let Some(open) = ty.find('<') else {
        return (ty, Vec::new());
    };
    let inner = &ty[open + 1..ty.len() - 1];
    let mut args = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            ',' if depth == 0 => {
                args.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    args.push(&inner[start..]);
    (&ty[..open], args)
}

/// The name serde reads: `rename`, else the Rust name under `rename_all`.
fn serde_name(ident: &str, rename: &str, rename_all: &str) -> String {
    if !rename.is_empty() {
        return rename.to_string();
    }
    let snake = || {
        let mut s = String::new();
        for (i, c) in ident.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                s.push('_');
            }
            s.extend(c.to_lowercase());
        }
        s
    };
    match rename_all {
        "lowercase" => ident.to_lowercase(),
        "UPPERCASE" => ident.to_uppercase(),
        "snake_case" => snake(),
        "kebab-case" => snake().replace('_', "-"),
        "SCREAMING_SNAKE_CASE" => snake().to_uppercase(),
        _ => ident.to_string(),
    }
}

/// A field's key in the file.
pub(crate) fn key_of(f: &FieldDoc) -> String {
    serde_name(f.ident, f.rename, "")
}

/// The names an enum's values are written as.
fn variant_names(t: &TypeDoc) -> Vec<(String, &'static VariantDoc)> {
    t.variants
        .iter()
        .map(|v| (serde_name(v.ident, v.rename, t.rename_all), v))
        .collect()
}

/// What a field holds, for the reader: `duration`, `list of string`, …
pub(crate) fn describe(ty: &str, with: &str) -> String {
    let (head, args) = split_type(ty);
    match (head, args.as_slice()) {
        ("Option" | "Box", [t]) => describe(t, with),
        ("Vec", [t]) => format!("list of {}", describe(t, "")),
        ("BTreeMap" | "HashMap", [_, v]) => format!("table of {}", describe(v, "")),
        ("Duration", _) => "duration".into(),
        (_, _) if with.contains("humantime") => "duration".into(),
        ("String", _) => "string".into(),
        ("PathBuf", _) => "path".into(),
        ("bool", _) => "boolean".into(),
        ("f32" | "f64", _) => "number".into(),
        ("u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64", _) => "integer".into(),
        (name, _) => match type_doc(name) {
            Some(t) if t.is_enum && !t.tag.is_empty() => "inline table".into(),
            Some(t) if t.is_enum => variant_names(t)
                .iter()
                .map(|(n, _)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(" \\| "),
            Some(_) => "table".into(),
            None => name.to_string(),
        },
    }
}

/// A value as TOML writes it.
fn toml(v: &Value) -> String {
    match v {
        Value::Null => "unset".into(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!("[{}]", a.iter().map(toml).collect::<Vec<_>>().join(", ")),
        Value::Object(o) if o.is_empty() => "{}".into(),
        Value::Object(o) => format!(
            "{{ {} }}",
            o.iter()
                .map(|(k, v)| format!("{k} = {}", toml(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// One documented field: where it is, what it holds, its default, its meaning.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    /// `kafka.brokers`; a list's entries are `api.routes[]`.
    pub path: String,
    pub ty: String,
    /// As TOML writes it (`"5s"`, `unset`), or `required`.
    pub default: String,
    pub doc: String,
}

/// A `[section]` (or `[[list]]`) and its fields.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Section {
    pub path: String,
    pub doc: String,
    pub entries: Vec<Entry>,
}

/// The defaults of a struct reached only through an `Option` or a list, whose
/// fields `Config::default()` does not show: its `Default`, serialised.
fn detached_default(type_name: &str) -> Option<Value> {
    use super::{BatchOverride, OAuth2Config, SigningConfig};
    let v = match type_name {
        "OAuth2Config" => serde_json::to_value(OAuth2Config::default()),
        "SigningConfig" => serde_json::to_value(SigningConfig::default()),
        "BatchOverride" => serde_json::to_value(BatchOverride::default()),
        _ => return None,
    };
    v.ok()
}

/// A field's default when no default config holds its section: the field
/// type's own (`#[serde(default)]`), or `required`.
fn typed_default(f: &FieldDoc) -> String {
    if !f.default {
        return "required".into();
    }
    let (head, _) = split_type(f.ty);
    match head {
        "Option" => "unset".into(),
        "Vec" => "[]".into(),
        "BTreeMap" | "HashMap" => "{}".into(),
        "bool" => "false".into(),
        "String" => "\"\"".into(),
        name => match type_doc(name) {
            Some(t) if t.is_enum && !t.default_variant.is_empty() => variant_names(t)
                .into_iter()
                .find(|(_, v)| v.ident == t.default_variant)
                .map(|(n, _)| format!("{n:?}"))
                .unwrap_or_else(|| "required".into()),
            _ => "required".into(),
        },
    }
}

/// Every section reachable from `Config`, in declaration order, each before its
/// subsections.
pub(crate) fn sections() -> Vec<Section> {
    let defaults = serde_json::to_value(Config::default()).unwrap_or(Value::Null);
    let mut out = Vec::new();
    if let Some(config) = type_doc("Config") {
        for f in config.fields.iter().filter(|f| !f.skip) {
            let key = key_of(f);
            // A list of tables (`[[filters]]`): its entries' section.
            match split_type(f.ty) {
                ("Vec", args) if args.len() == 1 => {
                    walk_struct(args[0], &format!("{key}[]"), f.doc, None, &mut out)
                }
                _ => walk_struct(f.ty, &key, f.doc, defaults.get(&key), &mut out),
            }
        }
    }
    out
}

/// Every path the reference documents, with what it holds: each section
/// (`api.batch`, a list's entries as `api.routes[]`: "section") and each field
/// (`api.batch.max_events`: its type as the reference prints it, e.g. `table of
/// string` for a map, whose keys are free). What a page that names a field is
/// checked against (the binary's guide test).
pub fn field_paths() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in sections() {
        out.push((s.path.clone(), "section".to_string()));
        out.extend(s.entries.into_iter().map(|e| (e.path, e.ty)));
    }
    out
}

/// The section of struct `ty` at `path`; `value` is its default (None: not
/// shown by a default config).
fn walk_struct(ty: &str, path: &str, intro: &str, value: Option<&Value>, out: &mut Vec<Section>) {
    let Some(t) = type_doc(ty) else {
        return;
    };
    let detached = match value {
        Some(v) if !v.is_null() => None,
        _ => detached_default(ty),
    };
    let value = value.filter(|v| !v.is_null()).or(detached.as_ref());
    let doc = [intro, t.doc]
        .iter()
        .filter(|d| !d.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join("\n\n");
    let index = out.len();
    out.push(Section {
        path: path.to_string(),
        doc,
        entries: Vec::new(),
    });
    let mut subsections = Vec::new();
    for f in t.fields.iter().filter(|f| !f.skip) {
        let key = key_of(f);
        let here = format!("{path}.{key}");
        let (head, args) = split_type(f.ty);
        let inner = match (head, args.as_slice()) {
            ("Option", [t]) => *t,
            _ => f.ty,
        };
        let (inner_head, inner_args) = split_type(inner);
        let is_struct = |n: &str| type_doc(n).is_some_and(|t| !t.is_enum);
        let sub_value = value.and_then(|v| v.get(&key));
        if is_struct(inner) {
            subsections.push((inner.to_string(), here, f.doc, sub_value.cloned()));
            continue;
        }
        if let ("Vec", [e]) = (inner_head, inner_args.as_slice()) {
            if is_struct(e) {
                subsections.push((e.to_string(), format!("{here}[]"), f.doc, None));
                continue;
            }
        }
        let default = match sub_value {
            Some(v) => toml(v),
            None if value.is_some() && t.default => "unset".into(),
            None => typed_default(f),
        };
        out[index].entries.push(Entry {
            path: here,
            ty: describe(f.ty, f.with),
            default,
            doc: entry_doc(f),
        });
    }
    for (ty, here, intro, v) in subsections {
        walk_struct(&ty, &here, intro, v.as_ref(), out);
    }
}

/// A field's doc comment, and the meaning of each value of an enum it holds.
fn entry_doc(f: &FieldDoc) -> String {
    let mut doc = f.doc.to_string();
    let (head, args) = split_type(f.ty);
    let name = match (head, args.as_slice()) {
        ("Option" | "Vec", [t]) => *t,
        ("BTreeMap" | "HashMap", [_, v]) => *v,
        _ => f.ty,
    };
    let Some(t) = type_doc(name).filter(|t| t.is_enum) else {
        return doc;
    };
    let values: Vec<String> = variant_names(t)
        .into_iter()
        .filter(|(_, v)| !v.doc.is_empty())
        .map(|(n, v)| {
            let shape = if t.tag.is_empty() {
                format!("`{n}`")
            } else {
                let fields: Vec<String> = v
                    .fields
                    .iter()
                    .map(|f| format!("{} = <{}>", key_of(f), describe(f.ty, f.with)))
                    .chain(std::iter::once(String::new()))
                    .collect();
                format!("`{{ {} = \"{n}\", {}}}`", t.tag, fields.join(", ")).replace(", }", " }")
            };
            format!("- {shape}: {}", v.doc.replace('\n', "\n  "))
        })
        .collect();
    if !values.is_empty() {
        if !doc.is_empty() {
            doc.push_str("\n\n");
        }
        doc.push_str(&values.join("\n"));
    } else if doc.is_empty() {
        doc = t.doc.to_string();
    }
    doc
}

#[path = "reference_render.rs"]
mod render;
pub use render::{markdown, text};

#[cfg(test)]
#[path = "reference_tests.rs"]
mod tests;
