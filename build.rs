//! Embeds the git commit the binary was built from, for `/status`
//! (`COURIER_GIT_COMMIT`): `git` is asked if it is there; a build without it (or
//! outside a repository, e.g. a container build without `.git`) shows the version
//! alone, unless `COURIER_GIT_COMMIT` is set for the build.
//!
//! And reads the configuration's types and their doc comments from the source
//! (`build/config_docs.rs`, with `syn`) for `courier config reference`.

#[path = "build/config_docs.rs"]
mod config_docs;

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    let out_dir = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR");
    config_docs::generate(std::path::Path::new(&out_dir));
    println!("cargo:rerun-if-env-changed=COURIER_GIT_COMMIT");
    let given = std::env::var("COURIER_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty());
    let commit = given.or_else(|| {
        // Rebuild when HEAD moves: HEAD itself (a branch switch) and the branch's
        // ref (a commit), in this worktree's git directory and the common one.
        for dir in [
            git(&["rev-parse", "--git-dir"]),
            git(&["rev-parse", "--git-common-dir"]),
        ]
        .into_iter()
        .flatten()
        {
            for f in ["HEAD", "packed-refs"] {
                let p = std::path::Path::new(&dir).join(f);
                if p.exists() {
                    println!("cargo:rerun-if-changed={}", p.display());
                }
            }
            if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
                let p = std::path::Path::new(&dir).join(r);
                if p.exists() {
                    println!("cargo:rerun-if-changed={}", p.display());
                }
            }
        }
        git(&["rev-parse", "--short=12", "HEAD"])
    });
    if let Some(c) = commit {
        println!("cargo:rustc-env=COURIER_GIT_COMMIT={c}");
    }
}
