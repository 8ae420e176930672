//! Reads the configuration's types from their source (`src/config/*.rs`, and the
//! enums and tables of `src/core` they use) with `syn`: each struct's and enum's
//! doc comment, fields (name, serde name, Rust type, doc comment, `with`) and
//! variants. Written to `$OUT_DIR/config_docs.rs` as a static table that
//! `src/config/reference.rs` walks from `Config` to print the configuration
//! reference (`courier config reference`). Only what the source says: the
//! defaults are read at run time from `Config::default()`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

struct Field {
    ident: String,
    rename: String,
    ty: String,
    doc: String,
    with: String,
    skip: bool,
    /// `#[serde(default)]` on the field.
    default: bool,
}

struct Item {
    name: String,
    doc: String,
    is_enum: bool,
    rename_all: String,
    tag: String,
    /// `#[serde(default)]` on the struct: a missing field takes the struct's default.
    default: bool,
    /// The enum's `#[default]` variant.
    default_variant: String,
    fields: Vec<Field>,
    /// (ident, serde name, doc, its fields).
    variants: Vec<(String, String, String, Vec<Field>)>,
}

/// The doc comment's text: each `///` line without its first space, joined by
/// newlines.
fn doc_of(attrs: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for a in attrs {
        if !a.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &a.meta {
            if let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
            {
                let v = s.value();
                lines.push(v.strip_prefix(' ').unwrap_or(&v).trim_end().to_string());
            }
        }
    }
    lines.join("\n").trim().to_string()
}

/// The `#[serde(...)]` settings of `attrs`: `name = "value"` pairs and bare words.
fn serde_of(attrs: &[syn::Attribute]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            let name = m
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            if m.input.peek(syn::Token![=]) {
                let v: syn::LitStr = m.value()?.parse()?;
                out.push((name, v.value()));
            } else {
                out.push((name, String::new()));
            }
            Ok(())
        });
    }
    out
}

fn setting(s: &[(String, String)], key: &str) -> String {
    s.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.clone())
        .unwrap_or_default()
}

/// A type as written, without spaces: `Option<BTreeMap<String,String>>`.
fn type_text(t: &syn::Type) -> String {
    match t {
        syn::Type::Path(p) => {
            let seg = p.path.segments.last().expect("a type path has a segment");
            let mut s = seg.ident.to_string();
            if let syn::PathArguments::AngleBracketed(a) = &seg.arguments {
                let args: Vec<String> = a
                    .args
                    .iter()
                    .filter_map(|g| match g {
                        syn::GenericArgument::Type(t) => Some(type_text(t)),
                        _ => None,
                    })
                    .collect();
                write!(s, "<{}>", args.join(",")).expect("a String takes writes");
            }
            s
        }
        syn::Type::Reference(r) => type_text(&r.elem),
        _ => "?".into(),
    }
}

fn fields_of(fields: &syn::Fields) -> Vec<Field> {
    let syn::Fields::Named(named) = fields else {
        return Vec::new();
    };
    named
        .named
        .iter()
        .map(|f| {
            let s = serde_of(&f.attrs);
            Field {
                ident: f.ident.as_ref().map(|i| i.to_string()).unwrap_or_default(),
                rename: setting(&s, "rename"),
                ty: type_text(&f.ty),
                doc: doc_of(&f.attrs),
                with: setting(&s, "with"),
                skip: s.iter().any(|(k, _)| k == "skip"),
                default: s.iter().any(|(k, _)| k == "default"),
            }
        })
        .collect()
}

/// Derives `Deserialize`: read from a config file.
fn deserialized(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .any(|a| {
            let mut yes = false;
            let _ = a.parse_nested_meta(|m| {
                yes |= m
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Deserialize");
                Ok(())
            });
            yes
        })
}

fn items_of(file: &syn::File, out: &mut Vec<Item>) {
    for item in &file.items {
        match item {
            syn::Item::Struct(s) if deserialized(&s.attrs) => {
                let serde = serde_of(&s.attrs);
                out.push(Item {
                    name: s.ident.to_string(),
                    doc: doc_of(&s.attrs),
                    is_enum: false,
                    rename_all: setting(&serde, "rename_all"),
                    tag: String::new(),
                    default: serde.iter().any(|(k, _)| k == "default"),
                    default_variant: String::new(),
                    fields: fields_of(&s.fields),
                    variants: Vec::new(),
                });
            }
            syn::Item::Enum(e) if deserialized(&e.attrs) => {
                let serde = serde_of(&e.attrs);
                let variants = e
                    .variants
                    .iter()
                    .filter(|v| !serde_of(&v.attrs).iter().any(|(k, _)| k == "skip"))
                    .map(|v| {
                        let s = serde_of(&v.attrs);
                        (
                            v.ident.to_string(),
                            setting(&s, "rename"),
                            doc_of(&v.attrs),
                            fields_of(&v.fields),
                        )
                    })
                    .collect();
                out.push(Item {
                    name: e.ident.to_string(),
                    doc: doc_of(&e.attrs),
                    is_enum: true,
                    rename_all: setting(&serde, "rename_all"),
                    tag: setting(&serde, "tag"),
                    default: false,
                    default_variant: e
                        .variants
                        .iter()
                        .find(|v| v.attrs.iter().any(|a| a.path().is_ident("default")))
                        .map(|v| v.ident.to_string())
                        .unwrap_or_default(),
                    fields: Vec::new(),
                    variants,
                });
            }
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    let f = syn::File {
                        shebang: None,
                        attrs: Vec::new(),
                        items: inner.clone(),
                    };
                    items_of(&f, out);
                }
            }
            _ => {}
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn field_code(f: &Field) -> String {
    format!(
        "FieldDoc {{ ident: {:?}, rename: {:?}, ty: {:?}, doc: {:?}, with: {:?}, skip: {}, default: {} }}",
        f.ident, f.rename, f.ty, f.doc, f.with, f.skip, f.default
    )
}

/// Writes `$OUT_DIR/config_docs.rs`; asks cargo to run again when the sources change.
pub(crate) fn generate(out_dir: &Path) {
    let mut files = Vec::new();
    for dir in ["src/config", "src/core"] {
        println!("cargo:rerun-if-changed={dir}");
        rust_files(Path::new(dir), &mut files);
    }
    let mut items = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        items_of(&parsed, &mut items);
    }
    let mut code = String::from(
        "// Generated by build.rs (build/config_docs.rs) from src/config and src/core.\n",
    );
    code.push_str("pub(super) static TYPES: &[TypeDoc] = &[\n");
    for i in &items {
        let fields: Vec<String> = i.fields.iter().map(field_code).collect();
        let variants: Vec<String> = i
            .variants
            .iter()
            .map(|(ident, rename, doc, fields)| {
                let fields: Vec<String> = fields.iter().map(field_code).collect();
                format!(
                    "VariantDoc {{ ident: {ident:?}, rename: {rename:?}, doc: {doc:?}, fields: &[{}] }}",
                    fields.join(", ")
                )
            })
            .collect();
        writeln!(
            code,
            "    TypeDoc {{ name: {:?}, doc: {:?}, is_enum: {}, rename_all: {:?}, tag: {:?}, default: {}, default_variant: {:?}, fields: &[{}], variants: &[{}] }},",
            i.name,
            i.doc,
            i.is_enum,
            i.rename_all,
            i.tag,
            i.default,
            i.default_variant,
            fields.join(", "),
            variants.join(", ")
        )
        .expect("a String takes writes");
    }
    code.push_str("];\n");
    std::fs::write(out_dir.join("config_docs.rs"), code).expect("OUT_DIR is writable");
}
