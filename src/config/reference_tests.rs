use super::*;
use std::collections::BTreeSet;

fn read(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The guide's page is the generated text, byte for byte.
#[test]
fn the_guide_page_is_the_generated_reference() {
    let page = read("docs/guide/src/configuration-reference.md");
    let generated = markdown();
    if page != generated {
        let line = page
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or("the end".to_string(), |i| format!("line {}", i + 1));
        panic!(
            "docs/guide/src/configuration-reference.md differs from the config types' \
             reference at {line}: run `cargo run -- config reference --markdown > \
             docs/guide/src/configuration-reference.md`"
        );
    }
}

/// Every field and section says what it is for: a field without a doc comment
/// would have no meaning in the reference.
#[test]
fn every_field_has_a_meaning() {
    let all = sections();
    let silent: Vec<&str> = all
        .iter()
        .flat_map(|s| &s.entries)
        .filter(|e| e.doc.trim().is_empty())
        .map(|e| e.path.as_str())
        .collect();
    assert!(
        silent.is_empty(),
        "fields without a doc comment: {silent:?}"
    );
    let silent: Vec<&str> = all
        .iter()
        .filter(|s| s.doc.trim().is_empty())
        .map(|s| s.path.as_str())
        .collect();
    assert!(
        silent.is_empty(),
        "sections without a doc comment: {silent:?}"
    );
}

/// Every field a default config has (read from it serialised) is in the
/// reference: the walk over the types misses none.
#[test]
fn the_reference_lists_every_field_of_the_default_config() {
    fn walk(v: &Value, path: &str, out: &mut BTreeSet<String>) {
        match v.as_object() {
            Some(o) if !o.is_empty() => {
                for (k, v) in o {
                    walk(v, &format!("{path}.{k}"), out);
                }
            }
            _ => {
                out.insert(path.trim_start_matches('.').to_string());
            }
        }
    }
    let mut fields = BTreeSet::new();
    walk(
        &serde_json::to_value(Config::default()).expect("serialises"),
        "",
        &mut fields,
    );
    // A section is listed too (`api.oauth2`, `None` by default: null).
    let listed: BTreeSet<String> = sections()
        .into_iter()
        .flat_map(|s| {
            let path = s.path.trim_end_matches("[]").to_string();
            s.entries.into_iter().map(|e| e.path).chain([path])
        })
        .collect();
    // An inline table (`retry.default = { kind = … }`) is one entry.
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| {
            let mut p = f.as_str();
            loop {
                if listed.contains(p) {
                    return false;
                }
                match p.rsplit_once('.') {
                    Some((up, _)) => p = up,
                    None => return true,
                }
            }
        })
        .collect();
    assert!(missing.is_empty(), "not in the reference: {missing:?}");
}

/// A section a default config leaves out (`[api.oauth2]`: `None`) shows the
/// defaults its fields take when it is written: those of its type's `Default`,
/// which `detached_default` must know.
#[test]
fn optional_sections_show_their_defaults() {
    let defaults = serde_json::to_value(Config::default()).expect("serialises");
    for s in sections() {
        if s.path.contains("[]") {
            continue;
        }
        let present = s
            .path
            .split('.')
            .try_fold(&defaults, |v, k| v.get(k))
            .is_some_and(|v| !v.is_null());
        if present {
            continue;
        }
        let unknown: Vec<&Entry> = s
            .entries
            .iter()
            .filter(|e| e.default == "required")
            .collect();
        assert!(
            unknown.is_empty(),
            "[{}] is optional but its fields' defaults are unknown: add its type to \
             reference::detached_default ({unknown:?})",
            s.path
        );
    }
}

#[test]
fn types_read_as_a_reader_says_them() {
    assert_eq!(describe("Option<Vec<String>>", ""), "list of string");
    assert_eq!(describe("Duration", "humantime_serde"), "duration");
    assert_eq!(describe("BTreeMap<String,String>", ""), "table of string");
    assert_eq!(describe("LogFormat", ""), "`human` \\| `json`");
    assert_eq!(
        serde_name("StandardWebhooks", "", "kebab-case"),
        "standard-webhooks"
    );
    assert_eq!(serde_name("JsonSchema", "", "snake_case"), "json_schema");
}
