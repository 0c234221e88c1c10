//! docs/configuration.md against the code: every variable the sources read,
//! every cuFile key the file maps and every parameter of include/hipfile.h
//! is documented; every variable a table there names is still read.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn doc() -> String {
    std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `HIPFILE_*` and `CUFILE_*` names in `text` that follow `lead`.
fn names(text: &str, lead: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for prefix in ["HIPFILE_", "CUFILE_"] {
        let pat = format!("{lead}{prefix}");
        let mut rest = text;
        while let Some(i) = rest.find(&pat) {
            let tail = &rest[i + lead.len()..];
            let end = tail
                .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            out.insert(tail[..end].to_string());
            rest = &tail[end..];
        }
    }
    out
}

/// Variables the sources read: string literals naming one.
fn read_by_code() -> BTreeSet<String> {
    let mut files = Vec::new();
    for d in [
        "engine/src",
        "engine/tests",
        "ffi/src",
        "ffi/tests",
        "tests/support",
        "bench/src",
        "tools",
        "gds/src",
        "cufile/src",
    ] {
        rust_files(&repo().join(d), &mut files);
    }
    let mut out = BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        out.extend(names(&text, "\""));
    }
    // Bare prefixes ("HIPFILE_" + a file key's name) are not variables.
    out.retain(|v| !v.ends_with('_'));
    out
}

/// Variables the doc's tables name in their first column.
fn in_doc_tables(doc: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap_or("");
        out.extend(names(first, "`"));
    }
    out
}

#[test]
fn every_variable_the_code_reads_is_documented() {
    let doc = doc();
    let missing: Vec<String> = read_by_code()
        .into_iter()
        .filter(|v| !doc.contains(&format!("`{v}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
}

#[test]
fn every_documented_variable_is_still_read() {
    let code = read_by_code();
    let stale: Vec<String> = in_doc_tables(&doc())
        .into_iter()
        .filter(|v| !code.contains(v))
        .collect();
    assert!(stale.is_empty(), "documented but no longer read: {stale:?}");
}

#[test]
fn every_mapped_file_key_is_documented() {
    let doc = doc();
    let missing: Vec<&str> = hipfile_engine::config_file::MAPPINGS
        .iter()
        .map(|m| m.key)
        .filter(|k| !doc.contains(&format!("| `{k}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "file keys not in docs/configuration.md: {missing:?}"
    );
}

#[test]
fn every_parameter_of_the_header_is_documented() {
    let header = std::fs::read_to_string(repo().join("include/hipfile.h")).unwrap();
    let doc = doc();
    let params: Vec<&str> = header
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("hipFileParam") && w.len() > "hipFileParam".len())
        .collect();
    assert!(params.len() >= 27, "found {} parameters", params.len());
    let missing: Vec<&&str> = params
        .iter()
        .filter(|p| !doc.contains(&format!("| `{p}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "parameters not in docs/configuration.md: {missing:?}"
    );
}
