//! The guide against the binary: what README.md and docs/guide/src/*.md say about
//! `courier` is what this binary does.
//!
//! - Every `courier …` command line (and `cargo run -- …`) in a code block or an
//!   inline code span is parsed by the CLI itself (`Cli`, clap's
//!   `try_get_matches_from`): an unknown subcommand or flag, a missing or malformed
//!   value fails. Synopsis notation is read: `[…]` optional (taken), `a|b`
//!   alternatives (the first), `…` more of the same, an upper-case placeholder
//!   (`N`, `FILE`: [`PLACEHOLDERS`] gives each a sample value), `<command>` every
//!   subcommand. A line of a code block that begins with `[--` or `--` continues
//!   the command above it; two spaces or more, `#`, `&&`, `|`, `>` end one.
//! - Every subcommand and every flag of the CLI appears in one of those command
//!   lines: nothing the binary accepts is left out of the guide.
//! - Every config field the pages name — `section.field` in inline code, keys and
//!   headers of a `toml` code block, `COURIER__SECTION__KEY` variables, the chart's
//!   `--set config.section.field=` — is a path of the configuration reference
//!   (`courier::config::reference::field_paths`); below a map (`kafka.properties`,
//!   `api.status`) the keys are free.
//! - The exit codes: docs/guide/src/operating.md holds `exit::table()` (from the
//!   one enum `main` exits with), and an exit code named anywhere ("exit code 3",
//!   "exits 70", "(code 70)") is one of them.

use crate::cli::Cli;
use clap::CommandFactory as _;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Sample values for the placeholders the synopses use.
const PLACEHOLDERS: &[(&str, &str)] = &[
    ("N", "1"),
    ("P", "0.5"),
    ("FILE", "courier.toml"),
    ("PEM", "cert.pem"),
    ("ADDR", "127.0.0.1:8080"),
    ("R", "http_400"),
    ("T", "order.created"),
    ("K", "key-1"),
    ("ID", "id-1"),
    ("RFC3339", "2026-01-01T00:00:00Z"),
    ("DURATION", "5s"),
    ("FORMAT", "json"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of the guide: (name, text).
fn pages() -> Vec<(String, String)> {
    let src = root().join("docs/guide/src");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&src)
        .expect("docs/guide/src")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    files.sort();
    files.insert(0, root().join("README.md"));
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).expect("a readable page");
            let name = f
                .strip_prefix(root())
                .unwrap_or(Path::new("?"))
                .display()
                .to_string();
            (name, text)
        })
        .collect()
}

/// A page split into fenced code blocks and prose.
struct Parts {
    /// Each fenced block: its info string (`toml`, `sh`, empty) and its lines
    /// with their line numbers.
    blocks: Vec<(String, Vec<(usize, String)>)>,
    /// The inline code spans of the prose, newlines inside a span made spaces,
    /// with the line each begins on.
    spans: Vec<(usize, String)>,
    /// The prose, code spans included (for the exit codes).
    prose: Vec<(usize, String)>,
}

fn parts(text: &str) -> Parts {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut current: Option<(String, Vec<(usize, String)>)> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim_start();
        if let Some(info) = t.strip_prefix("```") {
            match current.take() {
                Some(b) => blocks.push(b),
                None => current = Some((info.trim().to_string(), Vec::new())),
            }
            continue;
        }
        match &mut current {
            Some((_, lines)) => lines.push((n, line.to_string())),
            None => prose.push((n, line.to_string())),
        }
    }
    // Inline spans, across the lines of a paragraph.
    let mut spans = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (n, line) in &prose {
        if line.trim().is_empty() {
            open = None;
            continue;
        }
        for c in line.chars() {
            match (&mut open, c) {
                (Some(_), '`') => {
                    if let Some(s) = open.take() {
                        spans.push(s);
                    }
                }
                (Some((_, s)), c) => s.push(c),
                (None, '`') => open = Some((*n, String::new())),
                (None, _) => {}
            }
        }
        if let Some((_, s)) = &mut open {
            s.push(' ');
        }
    }
    Parts {
        blocks,
        spans,
        prose,
    }
}

/// The `courier` command lines of one line of text (a code block's, or a span):
/// each as the words after `courier`.
fn commands_in(line: &str) -> Vec<Vec<String>> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let start = if words[i] == "courier" && (i == 0 || is_command_break(words[i - 1])) {
            Some(i + 1)
        } else if words[i] == "cargo"
            && words.get(i + 1) == Some(&"run")
            && words.get(i + 2) == Some(&"--")
        {
            Some(i + 3)
        } else {
            None
        };
        let Some(start) = start else {
            i += 1;
            continue;
        };
        let mut cmd = Vec::new();
        let mut j = start;
        while j < words.len() && !ends_command(words[j]) {
            cmd.push(words[j].to_string());
            j += 1;
        }
        if cmd.first().is_some_and(|w| {
            w.starts_with(|c: char| c.is_ascii_lowercase() || c == '<' || c == '-')
        }) {
            out.push(cmd);
        }
        i = j.max(i + 1);
    }
    out
}

/// A word after which a new command may begin.
fn is_command_break(w: &str) -> bool {
    matches!(w, "&&" | "||" | ";" | "|" | "$" | "--" | "exec" | "sudo")
        || w.ends_with(';')
        || w.contains('=')
}

/// A word that ends a command line.
fn ends_command(w: &str) -> bool {
    w.starts_with('#')
        || matches!(
            w,
            "&&" | "||" | ";" | "|" | ">" | ">>" | "2>" | "2>&1" | "\\"
        )
        || w.starts_with('>')
}

/// A line of a code block cut where its description column begins (two spaces or
/// more after the first word), leading white space kept out.
fn command_column(line: &str) -> &str {
    let t = line.trim_start();
    match t.find("  ") {
        Some(i) => &t[..i],
        None => t,
    }
}

/// Every command line of a page, with the line it is on.
fn command_lines(p: &Parts) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (_, lines) in &p.blocks {
        let mut last: Option<usize> = None;
        for (n, line) in lines {
            let col = command_column(line);
            let t = line.trim_start();
            if t.starts_with("[--") || t.starts_with("--") {
                if let Some(k) = last {
                    let more: Vec<String> = col.split_whitespace().map(str::to_string).collect();
                    let cmd: &mut (usize, Vec<String>) = &mut out[k];
                    cmd.1.extend(more);
                    continue;
                }
            }
            let found = commands_in(col);
            last = None;
            for cmd in found {
                out.push((*n, cmd));
                last = Some(out.len() - 1);
            }
        }
    }
    for (n, span) in &p.spans {
        for cmd in commands_in(span) {
            out.push((*n, cmd));
        }
    }
    out
}

/// The argument lists a synopsis stands for (more than one for `<command>`), or
/// what in it cannot be read.
fn expand(words: &[String]) -> Result<Vec<Vec<String>>, String> {
    let subcommands: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut lists: Vec<Vec<String>> = vec![Vec::new()];
    for w in words {
        let w = w.trim_start_matches('[').trim_end_matches(']');
        let w = w.split('|').next().unwrap_or_default();
        if w.is_empty() || w == "…" || w == "..." {
            continue;
        }
        if w == "<command>" {
            lists = lists
                .into_iter()
                .flat_map(|l| {
                    subcommands.iter().map(move |s| {
                        let mut l = l.clone();
                        l.push(s.clone());
                        l
                    })
                })
                .collect();
            continue;
        }
        if w.starts_with('<') {
            return Err(format!("`{w}`: not a placeholder this test knows"));
        }
        let value = if w.len() <= 12
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            && w.starts_with(|c: char| c.is_ascii_uppercase())
        {
            match PLACEHOLDERS.iter().find(|(p, _)| *p == w) {
                Some((_, v)) => v.to_string(),
                None => return Err(format!("`{w}`: a placeholder without a sample value")),
            }
        } else {
            w.to_string()
        };
        for l in &mut lists {
            l.push(value.clone());
        }
    }
    Ok(lists)
}

/// The flags a parse used: (subcommand path, argument id).
fn used(m: &clap::ArgMatches, path: &str, out: &mut BTreeSet<(String, String)>) {
    for id in m.ids() {
        if m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine) {
            out.insert((path.to_string(), id.to_string()));
        }
    }
    if let Some((name, sub)) = m.subcommand() {
        let p = format!("{path} {name}");
        out.insert((p.clone(), String::new()));
        used(sub, &p, out);
    }
}

/// Every subcommand (id "") and every argument of the CLI but help and version,
/// with the flag it is written as.
fn every_flag(cmd: &clap::Command, path: &str, out: &mut BTreeMap<(String, String), String>) {
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        if id != "help" && id != "version" {
            let flag = a.get_long().map_or(id.to_string(), |l| format!("--{l}"));
            out.insert((path.to_string(), id.to_string()), flag);
        }
    }
    for s in cmd.get_subcommands() {
        if s.get_name() == "help" {
            continue;
        }
        let p = format!("{path} {}", s.get_name());
        out.insert((p.clone(), String::new()), String::new());
        every_flag(s, &p, out);
    }
}

/// What the pages' command lines say that the CLI does not take, and the
/// flags they use.
fn check_commands(pages: &[(String, String)]) -> (Vec<String>, BTreeSet<(String, String)>) {
    let mut bad = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, text) in pages {
        for (n, words) in command_lines(&parts(text)) {
            let shown = format!("{name}:{n}: `courier {}`", words.join(" "));
            let lists = match expand(&words) {
                Ok(l) => l,
                Err(e) => {
                    bad.push(format!("{shown}: {e}"));
                    continue;
                }
            };
            for args in lists {
                let argv = std::iter::once("courier".to_string()).chain(args);
                match Cli::command().try_get_matches_from(argv) {
                    Ok(m) => used(&m, "courier", &mut seen),
                    // `--help`, `--version`, and a group named alone (`courier dlq`).
                    Err(e)
                        if matches!(
                            e.kind(),
                            clap::error::ErrorKind::DisplayHelp
                                | clap::error::ErrorKind::DisplayVersion
                                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                                | clap::error::ErrorKind::MissingSubcommand
                        ) => {}
                    Err(e) => {
                        let first = e.to_string();
                        let first = first.lines().next().unwrap_or_default().to_string();
                        bad.push(format!("{shown}: {first}"));
                    }
                }
            }
        }
    }
    (bad, seen)
}

#[test]
fn every_command_line_of_the_guide_is_one_the_binary_takes() {
    let (bad, _) = check_commands(&pages());
    assert!(
        bad.is_empty(),
        "command lines in the guide that `courier` refuses:\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_subcommand_and_flag_of_the_binary_is_in_the_guide() {
    let (_, seen) = check_commands(&pages());
    let mut all = BTreeMap::new();
    every_flag(&Cli::command(), "courier", &mut all);
    let missing: Vec<String> = all
        .iter()
        .filter(|(k, _)| !seen.contains(*k))
        .map(|((path, _), flag)| format!("`{path} {flag}`").replace(" `", "`"))
        .collect();
    assert!(
        missing.is_empty(),
        "in no command line of README.md or docs/guide (operating.md lists them all):\n{}",
        missing.join("\n")
    );
}

/// The top-level sections of the configuration.
fn sections(known: &BTreeMap<String, String>) -> BTreeSet<String> {
    known.keys().filter(|p| !p.contains('.')).cloned().collect()
}

/// A path the reference has: itself (`[]` of a list left out on both sides), or
/// a key below a map.
fn is_known(path: &str, known: &BTreeMap<String, String>) -> bool {
    let plain = |p: &str| p.replace("[]", "");
    let path = plain(path);
    known.iter().any(|(k, ty)| {
        let k = plain(k);
        k == path || (ty.starts_with("table of") && path.starts_with(&format!("{k}.")))
    })
}

/// The config paths a piece of inline code names: `section.field…` words, and
/// `[section.sub]` / `[[section.list]]` headers.
fn paths_in_code(code: &str, sections: &BTreeSet<String>) -> Vec<String> {
    // A path (`$COURIER_STATE/kafka/kafka.log`) is one word, not a field.
    let word = |c: char| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']' | '*' | '/' | '$' | '~')
    };
    code.split(|c: char| !word(c))
        .filter_map(|w| {
            let w = w.trim_start_matches('[').trim_end_matches(']');
            let w = w.trim_end_matches(['*', '.']);
            let (first, rest) = w.split_once('.')?;
            (sections.contains(first) && !rest.is_empty()).then(|| w.to_string())
        })
        .collect()
}

/// `COURIER__API__TLS__CA_FILE` → `api.tls.ca_file`.
fn env_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("COURIER__") {
        let tail = &rest[i + "COURIER__".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        if !name.is_empty() && !tail[end..].starts_with('<') {
            out.push(name.to_ascii_lowercase().replace("__", "."));
        }
        rest = &tail[end..];
    }
    out
}

/// The keys of a `toml` code block, as paths (`kafka.brokers`, `api.routes[].url`).
fn toml_paths(lines: &[(usize, String)]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut table = String::new();
    for (n, line) in lines {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(h) = t.strip_prefix("[[") {
            let h = h.split("]]").next().unwrap_or_default().trim();
            table = format!("{h}[]");
            out.push((*n, table.clone()));
            continue;
        }
        if let Some(h) = t.strip_prefix('[') {
            table = h.split(']').next().unwrap_or_default().trim().to_string();
            out.push((*n, table.clone()));
            continue;
        }
        if let Some((key, _)) = t.split_once('=') {
            let key = key.trim().trim_matches('"');
            let path = if table.is_empty() {
                key.to_string()
            } else {
                format!("{table}.{key}")
            };
            out.push((*n, path));
        }
    }
    out
}

#[test]
fn every_config_field_the_guide_names_is_in_the_reference() {
    let known: BTreeMap<String, String> = courier::config::reference::field_paths()
        .into_iter()
        .collect();
    let sections = sections(&known);
    let mut bad = Vec::new();
    for (name, text) in pages() {
        let p = parts(&text);
        let mut named: Vec<(usize, String)> = Vec::new();
        for (n, span) in &p.spans {
            named.extend(paths_in_code(span, &sections).into_iter().map(|x| (*n, x)));
            named.extend(env_paths(span).into_iter().map(|x| (*n, x)));
        }
        for (info, lines) in &p.blocks {
            if info == "toml" {
                named.extend(toml_paths(lines));
                continue;
            }
            for (n, line) in lines {
                named.extend(env_paths(line).into_iter().map(|x| (*n, x)));
                let mut rest = line.as_str();
                while let Some(i) = rest.find("--set config.") {
                    let tail = &rest[i + "--set config.".len()..];
                    let path = tail.split(['=', ' ']).next().unwrap_or_default();
                    named.push((*n, path.to_string()));
                    rest = tail;
                }
            }
        }
        for (n, path) in named {
            if !is_known(&path, &known) {
                bad.push(format!("{name}:{n}: `{path}`"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "config fields the guide names that the reference does not have \
         (`courier config reference`):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_exit_codes_are_the_binarys() {
    let pages = pages();
    let operating = pages
        .iter()
        .find(|(n, _)| n.ends_with("operating.md"))
        .map(|(_, t)| t.as_str())
        .unwrap_or_default();
    let table = super::exit::table();
    assert!(
        operating.contains(&table),
        "docs/guide/src/operating.md does not hold the exit codes' table as \
         src/main/exit.rs makes it:\n{table}"
    );
    let codes: BTreeSet<u32> = super::Exit::ALL
        .iter()
        .map(|e| u32::from(e.code()))
        .collect();
    let mut bad = Vec::new();
    for (name, text) in &pages {
        for (n, line) in parts(text).prose {
            let words: Vec<String> = line
                .split_whitespace()
                .map(|w| {
                    w.trim_matches(|c: char| !c.is_ascii_alphanumeric())
                        .to_lowercase()
                })
                .collect();
            for (i, w) in words.iter().enumerate() {
                let number = match (w.as_str(), words.get(i + 1)) {
                    ("exit" | "exits" | "exiting", Some(next)) if next == "code" => {
                        words.get(i + 2)
                    }
                    ("exit" | "exits" | "exiting", next) => next,
                    _ => None,
                };
                if let Some(code) = number.and_then(|n| n.parse::<u32>().ok()) {
                    if !codes.contains(&code) {
                        bad.push(format!("{name}:{n}: exit code {code}"));
                    }
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "exit codes the binary never uses (src/main/exit.rs): {bad:?}"
    );
}

/// One Rust version everywhere: Cargo.toml's `rust-version` (the workspace's
/// crates too), the Dockerfile's builder image, and every "Rust 1.N" the README
/// and the guide name.
#[test]
fn one_rust_version_everywhere() {
    let want = env!("CARGO_PKG_RUST_VERSION");
    assert!(!want.is_empty(), "Cargo.toml has no rust-version");
    let mut bad = Vec::new();
    for member in [
        "Cargo.toml",
        "crates/courier-standins/Cargo.toml",
        "crates/courier-testkit/Cargo.toml",
        "crates/courier-drill/Cargo.toml",
    ] {
        let text = std::fs::read_to_string(root().join(member)).expect("a manifest");
        let line = text.lines().find(|l| l.starts_with("rust-version"));
        if line != Some(&format!("rust-version = \"{want}\"")) {
            bad.push(format!("{member}: {line:?}"));
        }
    }
    let docker = std::fs::read_to_string(root().join("Dockerfile")).expect("the Dockerfile");
    let image = docker
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_IMAGE=rust:"))
        .unwrap_or_default();
    if !image.starts_with(&format!("{want}.")) {
        bad.push(format!("Dockerfile: rust:{image}"));
    }
    for (name, text) in pages() {
        let words: Vec<&str> = text.split_whitespace().collect();
        for pair in words.windows(2) {
            if pair[0].trim_start_matches(['*', '(']) == "Rust" {
                let v = pair[1].trim_end_matches(|c: char| !c.is_ascii_digit());
                if v.starts_with("1.") && v != want {
                    bad.push(format!("{name}: Rust {v}"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "not rust-version {want}: {bad:?}");
}

/// The reading of command lines finds what it is for.
#[test]
fn the_reader_finds_commands_flags_and_fields() {
    let page = "\
text `courier dlq replay --bogus` and `courier\n  run --config x.toml`.\n\n\
```\n\
courier sink [--listen ADDR] [--latency-ms N]   the stand-in\n\
             [--tls-cert PEM --tls-key PEM]    over HTTPS\n\
RUST_LOG=warn cargo run -- demo --avro # a comment\n\
helm install x deploy/helm/courier \\\n\
```\n\
```toml\n\
[api]\nurl = \"x\"\n[kafka.properties]\n\"ssl.ca.location\" = \"x\"\n[[api.routes]]\nurl = \"y\"\n\
```\n";
    let p = parts(page);
    let cmds: Vec<String> = command_lines(&p)
        .into_iter()
        .map(|(_, c)| c.join(" "))
        .collect();
    assert_eq!(
        cmds,
        [
            "sink [--listen ADDR] [--latency-ms N] [--tls-cert PEM --tls-key PEM]",
            "demo --avro",
            "dlq replay --bogus",
            "run --config x.toml",
        ]
    );
    let (bad, seen) = check_commands(&[("page".into(), page.into())]);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].contains("--bogus"), "{bad:?}");
    assert!(seen.contains(&("courier sink".into(), "tls_key".into())));
    assert!(seen.contains(&("courier demo".into(), "avro".into())));
    let paths: Vec<String> = toml_paths(&p.blocks[1].1)
        .into_iter()
        .map(|x| x.1)
        .collect();
    assert_eq!(
        paths,
        [
            "api",
            "api.url",
            "kafka.properties",
            "kafka.properties.ssl.ca.location",
            "api.routes[]",
            "api.routes[].url"
        ]
    );
    let known: BTreeMap<String, String> = courier::config::reference::field_paths()
        .into_iter()
        .collect();
    for p in &paths {
        assert!(is_known(p, &known), "{p}");
    }
    assert!(!is_known("api.no_such_field", &known));
    assert_eq!(
        env_paths("COURIER__API__TLS__CA_FILE=x COURIER__<SECTION>__<KEY>"),
        ["api.tls.ca_file"]
    );
    let s = sections(&known);
    assert_eq!(
        paths_in_code(
            "`degraded.dlq_backoff_base`/`_cap` [api.oauth2] supervision.*",
            &s
        ),
        ["degraded.dlq_backoff_base", "api.oauth2"]
    );
}
