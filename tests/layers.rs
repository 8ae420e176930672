//! The module layers of `src/` (the library; `main.rs` is left out):
//! a module may use only modules of lower layers, so no two modules import each
//! other, and `core` imports nothing else of Courier. docs/ARCHITECTURE.md
//! ("Layers") explains the order. A use is any `crate::<module>` path in the file,
//! comments included (a doc link to a higher layer is a hint of a wrong direction
//! too). The layer table of docs/ARCHITECTURE.md is this file's `LAYERS` in prose:
//! it must name exactly the modules `src/lib.rs` declares, each in its layer. And the
//! workspace's tooling crates (`crates/`) stay out of the service's build: the
//! `courier` package names them only as dev-dependencies. Inside a module, no
//! two modules beside each other use each other, however many steps apart
//! (`sibling_modules_form_no_circle`, in `src/` and the tooling crates). And
//! each answer is read in one place (`answers_are_read_in_one_place`).

use std::collections::BTreeMap;
use std::path::Path;

/// Lowest first. Modules of one layer do not use each other. docs/ARCHITECTURE.md's
/// "Layers" table says the same (`the_map_names_every_module_in_its_layer`).
const LAYERS: &[&[&str]] = &[
    &["core"],
    &["clock", "handle", "tls", "store_tls"],
    &["config"],
    &[
        "api_health",
        "status_page",
        "kafka",
        "otel",
        "redis_conn",
        "schema_registry",
    ],
    &["metrics", "ops"],
    &["runtime", "auth"],
    &["delivery"],
    &["actors"],
    &["app"],
    &["demo"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// The crate modules `text` names as `crate::<module>` or `super::super::<module>`.
fn uses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for prefix in ["crate::", "super::super::"] {
        for (i, _) in text.match_indices(prefix) {
            let rest = &text[i + prefix.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

/// Each top-level module of `src/` and the files of it that use each other module.
fn imports(src: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("directory entry").path();
            let rel = path.strip_prefix(src).expect("below src/");
            if path.is_dir() {
                if rel != Path::new("bin") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let first = rel.components().next().expect("a path below src/");
            let top = first.as_os_str().to_string_lossy();
            let top = top.trim_end_matches(".rs").to_string();
            if top == "lib" || top == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("source is readable");
            let used = out.entry(top.clone()).or_default();
            for u in uses(&text) {
                if u != top {
                    used.entry(u).or_insert_with(|| rel.display().to_string());
                }
            }
        }
    }
    out
}

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = imports(&src);
    let mut wrong = Vec::new();
    for (module, used) in &graph {
        let Some(mine) = layer_of(module) else {
            wrong.push(format!(
                "`{module}` is in no layer: add it to LAYERS (and to docs/ARCHITECTURE.md's table)"
            ));
            continue;
        };
        for (other, file) in used {
            match layer_of(other) {
                Some(theirs) if theirs < mine => {}
                Some(_) => wrong.push(format!(
                    "src/{file} ({module}) uses `{other}`, which is not below it"
                )),
                // Not a module of ours (`crate::` in a string), or one of no
                // layer, reported above.
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "layering broken:\n{}", wrong.join("\n"));
    assert!(graph["core"].is_empty(), "core uses {:?}", graph["core"]);
}

/// The workspace's tooling crates: `cargo build --release` of the root package must
/// not compile them (`cargo tree -e normal` lists none of them).
const TOOLING: &[&str] = &["courier-testkit", "courier-drill"];

/// The dependency names of one `[section]` of a Cargo manifest.
fn section_deps<'a>(manifest: &'a str, section: &str) -> Vec<&'a str> {
    let header = format!("[{section}]");
    manifest
        .lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim()))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect()
}

#[test]
fn tooling_crates_are_dev_dependencies_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    for section in manifest.lines().filter(|l| {
        l.starts_with('[') && l.contains("dependencies") && !l.contains("dev-dependencies")
    }) {
        let section = section.trim().trim_matches(|c| c == '[' || c == ']');
        for dep in section_deps(&manifest, section) {
            assert!(
                !TOOLING.contains(&dep),
                "`{dep}` is a normal dependency of courier ([{section}]): release builds would compile it"
            );
        }
    }
    assert!(section_deps(&manifest, "dev-dependencies").contains(&"courier-testkit"));
    // The testkit is below Courier: it does not depend on it (so the library's tests
    // can use it without a cycle).
    let testkit = std::fs::read_to_string(root.join("crates/courier-testkit/Cargo.toml"))
        .expect("crates/courier-testkit/Cargo.toml");
    assert!(!section_deps(&testkit, "dependencies").contains(&"courier"));
    // The stand-ins are a normal dependency of Courier (`courier sink`, `courier
    // demo`): they cannot depend on it.
    assert!(section_deps(&manifest, "dependencies").contains(&"courier-standins"));
    let standins = std::fs::read_to_string(root.join("crates/courier-standins/Cargo.toml"))
        .expect("crates/courier-standins/Cargo.toml");
    assert!(!section_deps(&standins, "dependencies").contains(&"courier"));
    for moved in ["sink", "audit.rs", "loadgen.rs"] {
        assert!(
            !root.join("src").join(moved).exists(),
            "src/{moved} is in courier-standins"
        );
    }
    assert!(!root.join("src/testkit").exists() && !root.join("src/bin/courier-drill").exists());
}

#[test]
fn the_check_sees_a_use_in_any_form() {
    let text = "use crate::actors::x;\nfn f() { crate::runtime::now_ms(); super::super::kafka::Y }";
    assert_eq!(uses(text), ["actors", "runtime", "kafka"]);
    assert!(layer_of("core") < layer_of("delivery") && layer_of("delivery") < layer_of("actors"));
}

/// The top-level modules `lib` (the text of `src/lib.rs`) declares: `mod x;` with
/// any visibility.
fn declared_modules(lib: &str) -> Vec<String> {
    lib.lines()
        .map(str::trim)
        .filter_map(|l| {
            let l = if l.starts_with("pub") {
                l.split_once(' ')?.1
            } else {
                l
            };
            l.strip_prefix("mod ")?.strip_suffix(';')
        })
        .map(|m| m.trim().to_string())
        .collect()
}

/// The layer table of docs/ARCHITECTURE.md: in the section `## Layers`, each row
/// `| <number> | <modules> | <what> |`, the modules the `` `name` `` spans of the
/// second cell. Rows in order of their numbers; an error names a row it cannot read.
fn map_layers(map: &str) -> Result<Vec<(usize, Vec<String>)>, String> {
    let section = map
        .split("\n## ")
        .find(|s| s.starts_with("Layers\n"))
        .ok_or("docs/ARCHITECTURE.md has no section `## Layers`")?;
    let mut rows = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let Ok(layer) = cells[0].parse::<usize>() else {
            continue; // the header and its rule
        };
        let modules: Vec<String> = cells
            .get(1)
            .ok_or_else(|| format!("layer {layer}: no modules cell in `{line}`"))?
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .collect();
        if modules.iter().any(|m| {
            m.is_empty()
                || !m
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        }) {
            return Err(format!(
                "layer {layer}: the modules cell is not `a`, `b`, …: `{line}`"
            ));
        }
        rows.push((layer, modules));
    }
    Ok(rows)
}

#[test]
fn the_map_names_every_module_in_its_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let map = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).expect("the map");
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("src/lib.rs");
    let rows = map_layers(&map).unwrap_or_else(|e| panic!("{e}"));
    let mut wrong = Vec::new();

    let numbers: Vec<usize> = rows.iter().map(|(n, _)| *n).collect();
    let expected: Vec<usize> = (0..LAYERS.len()).collect();
    if numbers != expected {
        wrong.push(format!(
            "the table's layers are {numbers:?}, LAYERS has {expected:?}"
        ));
    }
    for (layer, modules) in &rows {
        for m in modules {
            match layer_of(m) {
                Some(l) if l == *layer => {}
                Some(l) => wrong.push(format!(
                    "`{m}` is in layer {layer} of the table, {l} of LAYERS"
                )),
                None => wrong.push(format!(
                    "`{m}` (layer {layer} of the table) is in no layer of LAYERS"
                )),
            }
        }
    }
    let in_table: Vec<&String> = rows.iter().flat_map(|(_, ms)| ms).collect();
    let declared = declared_modules(&lib);
    for m in &declared {
        match in_table.iter().filter(|t| *t == &m).count() {
            1 => {}
            0 => wrong.push(format!("`{m}` (src/lib.rs) is missing from the table")),
            n => wrong.push(format!("`{m}` is in the table {n} times")),
        }
    }
    for m in &in_table {
        if !declared.contains(m) {
            wrong.push(format!("`{m}` of the table is not a module of src/lib.rs"));
        }
    }
    for m in LAYERS.iter().flat_map(|l| l.iter()) {
        if !declared.iter().any(|d| d == m) {
            wrong.push(format!("`{m}` of LAYERS is not a module of src/lib.rs"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/ARCHITECTURE.md's layer table (\"## Layers\") does not match src/lib.rs and LAYERS:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_map_check_reads_the_table_and_the_declarations() {
    let map = "# x\n\n## Layers\n\n| layer | modules | what |\n|---|---|---|\n\
               | 0 | `core` | pure |\n| 1 | `clock`, `tls` | leaves, `not_a_module` |\n\n## Next\n| 2 | `x` | y |\n";
    let rows = map_layers(map).expect("a table");
    assert_eq!(
        rows,
        [
            (0, vec!["core".to_string()]),
            (1, vec!["clock".to_string(), "tls".to_string()])
        ]
    );
    assert!(map_layers("## Layers\n| 0 | core and `clock` | x |\n").is_err());
    let lib = "//! `mod doc;`\npub(crate) mod actors;\npub mod app;\nmod plain;\n// mod gone;\n";
    assert_eq!(declared_modules(lib), ["actors", "app", "plain"]);
}

/// Every `.rs` file below `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("readable directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Who may name the one reading of an answer: `(what, where it may be
/// named)`, each `what` matched in a file's code with its whitespace left
/// out (a call split over lines is still seen), comment lines left out.
/// The classifier (`core::answer::read`, and the status policy it applies)
/// is named by `delivery::hear` alone, whose `Ears::read` reads a request's
/// answer in `delivery::send` and each event's own result from its batch's
/// answer in `delivery::batch::answers` — nowhere else: every other place
/// takes the `Answered` those made (its fields are private to `hear`).
/// Issue 55 item 2; on 45109fa `delivery::attempt` read answers again
/// (`failure_in`: `ears.read(&answer)`).
const ONE_READING: &[(&str, &[&str])] = &[
    ("answer::read", &["core::answer", "delivery::hear"]),
    ("answer::{read", &["core::answer", "delivery::hear"]),
    (".classify(", &["core::answer", "core::status_policy"]),
    (
        "ears.read(",
        &[
            "delivery::hear",
            "delivery::send",
            "delivery::batch::answers",
        ],
    ),
    ("Ears::read(", &["delivery::hear"]),
];

/// The files of `src/` (as module paths) that name `what` outside `allowed`
/// (a module or one below it); a test module may name anything.
fn named_outside(src: &Path, what: &str, allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for file in rust_files(src) {
        let module = module_path(src, &file).join("::");
        let inside = |m: &str| module == m || module.starts_with(&format!("{m}::"));
        if allowed.iter().any(|m| inside(m)) || module.split("::").any(|p| p.ends_with("tests")) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .flat_map(str::chars)
            .filter(|c| !c.is_whitespace())
            .collect();
        if code.contains(what) {
            out.push(module);
        }
    }
    out
}

/// Each answer read once: only the modules that make a reading name the
/// classifier (`ONE_READING`).
#[test]
fn answers_are_read_in_one_place() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for (what, allowed) in ONE_READING {
        for module in named_outside(&src, what, allowed) {
            wrong.push(format!("{module} names `{what}` (only {allowed:?} may)"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Permits behind one gate: a semaphore's permit is taken (`acquire`,
/// `acquire_owned`, `try_acquire`) only in `delivery::permits` (an event's
/// pool permit, a DLQ round's share) and below the call's admission in
/// `delivery::limits` (the gate that keeps the pool at the limit, the
/// request slots) and `delivery::ratelimit` (the rate slots). Issue 55
/// item 3; on 45109fa `delivery::drain` took permits of a semaphore of
/// its own, and `delivery::call` kept the pool's gate.
#[test]
fn permits_are_taken_behind_one_gate() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed = [
        "delivery::permits",
        "delivery::limits",
        "delivery::ratelimit",
    ];
    let mut wrong = Vec::new();
    for what in [".acquire(", ".acquire_owned(", ".try_acquire"] {
        for module in named_outside(&src, what, &allowed) {
            wrong.push(format!(
                "{module} takes a permit (`{what}`): only {allowed:?} may"
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_reading_check_sees_split_calls_and_skips_comments() {
    let dir = std::env::temp_dir().join(format!("courier-layers-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("delivery")).expect("a temp dir");
    let split = "fn f() {\n    self.calls\n        .ears\n        .read(x, false);\n}\n";
    std::fs::write(dir.join("delivery/attempt.rs"), split).expect("written");
    std::fs::write(dir.join("delivery/report.rs"), "// ears.read(x)\n").expect("written");
    std::fs::write(dir.join("delivery/send.rs"), split).expect("written");
    let found = named_outside(&dir, "ears.read(", &["delivery::send"]);
    std::fs::remove_dir_all(&dir).expect("removed");
    assert_eq!(found, ["delivery::attempt"]);
}

/// The module path of a file below its crate's root directory:
/// `delivery/batch.rs` and `delivery/batch/mod.rs` are `delivery::batch`;
/// `lib.rs` and `main.rs` are the crate root (empty).
fn module_path(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("below the root");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The sibling modules `text` (the file of module `path`) uses: `super::x`,
/// or `crate::<parent>::x`, for a module `x` beside it. Comment lines are
/// left out (a doc link is no dependency).
fn sibling_uses(path: &[String], text: &str) -> Vec<String> {
    let Some((me, parent)) = path.split_last() else {
        return Vec::new();
    };
    let mut crate_prefix = String::from("crate::");
    for p in parent {
        crate_prefix.push_str(p);
        crate_prefix.push_str("::");
    }
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for prefix in ["super::", crate_prefix.as_str()] {
            for (i, _) in line.match_indices(prefix) {
                // `super::super::x` names a module further up; `xcrate::` is not `crate::`.
                let before = &line[..i];
                if before.ends_with("super::")
                    || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
                {
                    continue;
                }
                let name: String = line[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() && name != *me && name != "super" && !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// Circles among sibling modules below `root`: each as the modules on it.
fn sibling_circles(root: &Path) -> Vec<Vec<String>> {
    let mut edges: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in rust_files(root) {
        let path = module_path(root, &file);
        let text = std::fs::read_to_string(&file).expect("readable source");
        let parent = path[..path.len().saturating_sub(1)].join("::");
        let uses = sibling_uses(&path, &text).into_iter().map(|s| {
            if parent.is_empty() {
                s
            } else {
                format!("{parent}::{s}")
            }
        });
        edges.entry(path.join("::")).or_default().extend(uses);
    }
    // A circle: a module that reaches itself again through its siblings.
    let mut circles: Vec<Vec<String>> = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let mut c = trail.clone();
                    c.sort();
                    if !circles.contains(&c) {
                        circles.push(c);
                    }
                } else if !trail.contains(next) && next > start {
                    let mut t = trail.clone();
                    t.push(next.clone());
                    stack.push((next.clone(), t));
                }
            }
        }
    }
    circles
}

/// No two modules beside each other use each other, however many steps
/// apart (in `src/` and in the tooling crates): a circle is one module in
/// two files (the delivery's `batch` and `call`, and the drill's
/// `scenarios` and `destination_outage`, used each other before issue 55).
#[test]
fn sibling_modules_form_no_circle() {
    let roots = [
        "src",
        "crates/courier-drill/src",
        "crates/courier-standins/src",
    ];
    for root in roots {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(root);
        if !root.is_dir() {
            continue;
        }
        let circles = sibling_circles(&root);
        assert!(
            circles.is_empty(),
            "{}: circles {circles:?}",
            root.display()
        );
    }
}

#[test]
fn the_circle_check_reads_super_and_crate_paths() {
    let path = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let text = "use super::call::no_answer;\nuse crate::delivery::send::Calls;\n\
                // super::doc_only\nuse super::super::runtime;\nlet x = crate::config::X;\n";
    assert_eq!(
        sibling_uses(&path("delivery::batch"), text),
        ["call", "send"],
        "siblings, not a comment, a module further up or another branch"
    );
    assert_eq!(
        sibling_uses(&path("scenarios"), "use crate::faults::Faults;"),
        ["faults"]
    );
}
