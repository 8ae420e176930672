//! The user guide (docs/guide, an mdBook) and the README have no broken internal
//! link: every `[text](target)` that is not a web address names a file that
//! exists, and its `#fragment` a heading of that file (the id mdBook gives it).
//! Every chapter file is in SUMMARY.md. scripts/test.sh builds the guide with
//! mdbook; this is its link check (mdbook-linkcheck 0.7 cannot read mdBook 0.5's
//! render context). docs/ARCHITECTURE.md, a map of links into the code and the
//! tests, is held to the same, to staying a map (at most 400 lines) and to
//! pointing nowhere outside the repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text outside fenced code blocks and inline code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        // Inline code spans (`…`) hold no links.
        let mut inside = false;
        for c in line.chars() {
            if c == '`' {
                inside = !inside;
            } else if !inside {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of the inline links `](target)` of `text`.
fn links(text: &str) -> Vec<String> {
    let p = prose(text);
    let mut out = Vec::new();
    let mut rest = p.as_str();
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// The ids mdBook gives the headings of `text`: letters, digits, `_` and `-`
/// kept (lower case), white space to `-`, the rest dropped; a repeated id gets
/// `-1`, `-2`, ….
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let id: String = heading
            .chars()
            .filter_map(|c| {
                if c.is_alphanumeric() || c == '_' || c == '-' {
                    Some(c.to_ascii_lowercase())
                } else if c.is_whitespace() {
                    Some('-')
                } else {
                    None
                }
            })
            .collect();
        let mut unique = id.clone();
        let mut n = 1;
        while ids.contains(&unique) {
            unique = format!("{id}-{n}");
            n += 1;
        }
        ids.insert(unique);
    }
    ids
}

/// The broken links of the Markdown file `file`.
fn broken(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).expect("readable");
    let dir = file.parent().expect("a file has a directory");
    let mut out = Vec::new();
    for target in links(&text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, fragment) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target.as_str(), None),
        };
        let linked = if path.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path)
        };
        if !linked.exists() {
            out.push(format!("{}: {target}: no such file", file.display()));
            continue;
        }
        if let Some(f) = fragment {
            let ids = heading_ids(&std::fs::read_to_string(&linked).unwrap_or_default());
            if !ids.contains(f) {
                out.push(format!("{}: {target}: no such heading", file.display()));
            }
        }
    }
    out
}

#[test]
fn the_guide_and_the_readme_have_no_broken_link() {
    let src = root().join("docs/guide/src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&src)
        .expect("docs/guide/src")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.push(root().join("README.md"));
    let bad: Vec<String> = files.iter().flat_map(|f| broken(f)).collect();
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));

    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("SUMMARY.md");
    let listed: BTreeSet<String> = links(&summary).into_iter().collect();
    let missing: Vec<String> = files
        .iter()
        .filter(|f| f.starts_with(&src))
        .filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n != "SUMMARY.md" && !listed.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "chapters not in SUMMARY.md: {missing:?}"
    );
}

/// docs/ARCHITECTURE.md: every link resolves, inside the repository, and it stays a
/// map — the detail belongs in the module docs beside the code.
#[test]
fn the_architecture_map_links_resolve_inside_the_repository() {
    let map = root().join("docs/ARCHITECTURE.md");
    let bad = broken(&map);
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
    let text = std::fs::read_to_string(&map).expect("the map");
    let repo = root().canonicalize().expect("the repository");
    let docs = map.parent().expect("docs/");
    for target in links(&text) {
        assert!(
            !target.contains("://"),
            "a web address in the map: {target}"
        );
        let path = target.split('#').next().unwrap_or_default();
        let inside = docs
            .join(path)
            .canonicalize()
            .is_ok_and(|p| p.starts_with(&repo));
        assert!(inside, "the map links outside the repository: {target}");
    }
    for outside in ["/work/", "../shared", "DESIGN.md"] {
        assert!(!text.contains(outside), "the map names `{outside}`");
    }
    let lines = text.lines().count();
    assert!(
        lines <= 400,
        "docs/ARCHITECTURE.md has {lines} lines: a map has at most 400"
    );
}

/// The check finds what it is for.
#[test]
fn a_broken_link_is_found() {
    let dir = std::env::temp_dir().join(format!("guide-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("a.md"), "# A title\n\n## `[api.batch]`\n").expect("write");
    let page = dir.join("b.md");
    std::fs::write(
        &page,
        "[ok](a.md#a-title) [ok](a.md#apibatch) [gone](c.md) [no heading](a.md#nope)\n\
         `[not a link](x.md)`\n```\n[in code](y.md)\n```\n[web](https://example.com/x)\n",
    )
    .expect("write");
    let found = broken(&page);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(
        found[0].ends_with("c.md: no such file")
            && found[1].ends_with("a.md#nope: no such heading")
    );
}
