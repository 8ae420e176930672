//! `config/courier.toml` lists every field of [`Config`], and nothing that is not
//! one: a new field cannot be forgotten there (issue 12 item 6:
//! `metrics.stuck_after_ms` once was). The configuration reference is generated
//! from the types (`reference`), so it cannot leave one out.
//!
//! The fields are read from `Config::default()` serialised: a non-empty object is a
//! section (or an inline table such as `retry.default`), anything else is a field; an
//! empty object is a map field (`kafka.properties`, `api.headers`, `retry.types`).

use super::Config;
use std::collections::BTreeSet;

/// Every field's dotted path, and which of them are map fields.
fn fields() -> (BTreeSet<String>, BTreeSet<String>) {
    let value = serde_json::to_value(Config::default()).expect("the default config serialises");
    let (mut all, mut maps) = (BTreeSet::new(), BTreeSet::new());
    walk(&value, "", &mut all, &mut maps);
    (all, maps)
}

fn walk(
    v: &serde_json::Value,
    path: &str,
    all: &mut BTreeSet<String>,
    maps: &mut BTreeSet<String>,
) {
    match v.as_object() {
        Some(o) if !o.is_empty() => {
            for (k, v) in o {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(v, &p, all, maps);
            }
        }
        Some(_) => {
            all.insert(path.to_string());
            maps.insert(path.to_string());
        }
        None => {
            all.insert(path.to_string());
        }
    }
}

/// The `[section]` headers and the `key = …` lines of courier.toml, commented-out
/// keys included (`# dlq_topic = "events.dlq"` lists a field whose default is derived).
/// Quoted keys are entries of a map field, not fields.
fn toml_listed(text: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut headers, mut keys) = (BTreeSet::new(), BTreeSet::new());
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        // A header, commented out or not (`# [[api.routes]]` starts an example
        // whose keys belong to it), or an array of tables (`[[…]]`).
        let header = line.trim_start_matches('#').trim_start();
        if let Some(h) = header.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            section = h.trim().to_string();
            if !line.starts_with('#') {
                headers.insert(section.clone());
            }
            continue;
        }
        let body = line.trim_start_matches('#').trim_start();
        let Some((key, rest)) = body.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let is_key = !key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        // A value, not prose that happens to hold a `=` (`# absent = prefer`).
        let rest = rest.trim_start();
        let is_value = rest.starts_with(['"', '\'', '{', '[', '-'])
            || rest.starts_with(|c: char| c.is_ascii_digit())
            || rest.starts_with("true")
            || rest.starts_with("false");
        if is_key && is_value && !section.is_empty() {
            keys.insert(format!("{section}.{key}"));
        }
    }
    (headers, keys)
}

/// `field` is listed itself, or through an inline table that holds it
/// (`retry.default = { kind = …, max_retries = … }` lists `retry.default.kind`).
fn covered(field: &str, listed: &BTreeSet<String>) -> bool {
    let mut prefix = field;
    loop {
        if listed.contains(prefix) {
            return true;
        }
        match prefix.rsplit_once('.') {
            // A top-level section never covers its fields.
            Some((p, _)) if p.contains('.') => prefix = p,
            _ => return false,
        }
    }
}

/// `key` is a field, or an inline table of fields (`retry.default`).
fn is_field(key: &str, all: &BTreeSet<String>) -> bool {
    let table = format!("{key}.");
    all.contains(key)
        || (key.contains('.') && all.iter().any(|f| f.starts_with(&table)))
        // A key of an entry of a list field (`api.routes.url` in `[[api.routes]]`,
        // `filters.drop` in `[[filters]]`: `all` holds no section, only fields).
        || key.rsplit_once('.').is_some_and(|(list, _)| all.contains(list))
}

/// A file of the repository.
fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// Asserts that every one of `fields` is `listed` and every one of `keys` is a field.
fn compare<'a>(
    what: &str,
    fields: impl Iterator<Item = &'a String>,
    listed: &BTreeSet<String>,
    keys: &BTreeSet<String>,
    all: &BTreeSet<String>,
) {
    let missing: Vec<&String> = fields.filter(|f| !covered(f, listed)).collect();
    assert!(missing.is_empty(), "{what} does not list {missing:?}");
    let unknown: Vec<&String> = keys.iter().filter(|k| !is_field(k, all)).collect();
    assert!(
        unknown.is_empty(),
        "{what} lists keys that are not fields: {unknown:?}"
    );
}

#[test]
fn courier_toml_lists_every_field_and_no_other() {
    let (all, maps) = fields();
    let (headers, keys) = toml_listed(&read("config/courier.toml"));
    // A map field is listed by its table header (`[kafka.properties]`).
    // An optional section (`[api.oauth2]`, `None` by default: a field whose
    // value is null) is listed by the keys of its commented-out example.
    let optional = all
        .iter()
        .filter(|f| keys.iter().any(|k| k.starts_with(&format!("{f}."))))
        .cloned();
    let listed: BTreeSet<String> = keys
        .iter()
        .cloned()
        .chain(headers.intersection(&maps).cloned())
        .chain(optional)
        .collect();
    // The `[testing]` fault hooks are left out of the production sample on purpose:
    // a release build refuses the section.
    let fields = all.iter().filter(|f| !f.starts_with("testing."));
    compare("config/courier.toml", fields, &listed, &keys, &all);
    let sections: BTreeSet<&str> = all.iter().filter_map(|f| f.split('.').next()).collect();
    // A top-level section, or a nested one that holds fields (`[api.tls]`, `[api.batch]`).
    let is_section = |h: &&String| {
        sections.contains(h.as_str()) || all.iter().any(|f| f.starts_with(&format!("{h}.")))
    };
    let stray = headers
        .iter()
        .filter(|h| !maps.contains(*h) && !is_section(h));
    assert_eq!(
        stray.count(),
        0,
        "config/courier.toml has [sections] that are not"
    );
}

/// The checks above can fail: a field the lists leave out is found.
#[test]
fn a_forgotten_field_is_found() {
    let (headers, keys) = toml_listed("[metrics]\nlisten = \"x\"\n# wedged_after = \"1m\"\n# absent = prefer\n[kafka.properties]\n# \"a.b\" = \"c\"\n");
    assert!(keys.contains("metrics.listen") && keys.contains("metrics.wedged_after"));
    assert!(!covered("metrics.stuck_after", &keys) && !keys.contains("metrics.absent"));
    assert!(headers.contains("kafka.properties") && !keys.iter().any(|k| k.starts_with("kafka.")));
    let listed: BTreeSet<String> = ["retry.default".to_string()].into();
    assert!(covered("retry.default.kind", &listed));
    assert!(!covered("retry.source_query", &listed));
}
