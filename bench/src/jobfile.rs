//! fio's job-file format: an INI file whose `[section]`s are jobs (`[global]`
//! holds defaults for the jobs below it), one `option=value` or bare flag per
//! line, whole-line comments starting with `;` or `#`, and `include FILE`
//! lines that insert another file's options in place (relative paths are
//! taken from the including file's directory; included files hold no
//! sections).
//!
//! Values expand `${VAR}` from the environment (unset or empty: the empty
//! string, as in fio) and fio's reserved words `$pagesize`, `$mb_memory` and
//! `$ncpus`. Arithmetic on them is not supported: a value that still holds a
//! `$` word or starts with `(` after expansion is refused by the option it
//! reaches.

use std::path::{Path, PathBuf};

/// One `option[=value]` line, with where it came from for error messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    /// None for a bare flag (`time_based`).
    pub value: Option<String>,
    pub origin: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub entries: Vec<Entry>,
}

/// Nested includes deeper than this are taken as a loop.
const MAX_INCLUDE_DEPTH: usize = 16;

/// Read a job file into its sections, in order (`[global]` sections included).
pub fn read(path: &Path) -> Result<Vec<Section>, String> {
    let mut sections: Vec<Section> = Vec::new();
    read_into(path, &mut sections, 0, false)?;
    Ok(sections)
}

fn read_into(
    path: &Path,
    sections: &mut Vec<Section>,
    depth: usize,
    included: bool,
) -> Result<(), String> {
    if depth > MAX_INCLUDE_DEPTH {
        return Err(format!(
            "{}: includes nest deeper than {MAX_INCLUDE_DEPTH} (an include loop?)",
            path.display()
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("job file {}: {e}", path.display()))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    for (i, raw) in text.lines().enumerate() {
        let origin = format!("{}:{}", path.display(), i + 1);
        let line = raw.trim();
        if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            if included {
                return Err(format!(
                    "{origin}: an included file may not start sections ({line})"
                ));
            }
            let Some(name) = rest.strip_suffix(']') else {
                return Err(format!("{origin}: section header without ']': {line}"));
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(format!("{origin}: empty section name"));
            }
            sections.push(Section {
                name: name.to_string(),
                entries: Vec::new(),
            });
            continue;
        }
        if let Some(target) = include_target(line) {
            let p = PathBuf::from(target);
            let p = if p.is_absolute() { p } else { dir.join(p) };
            read_into(&p, sections, depth + 1, true)
                .map_err(|e| format!("{e} (included from {origin})"))?;
            continue;
        }
        let Some(section) = sections.last_mut() else {
            return Err(format!("{origin}: option outside any [section]: {line}"));
        };
        section.entries.push(parse_entry(line, &origin)?);
    }
    Ok(())
}

/// `include FILE` (the word, whitespace, a path).
fn include_target(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("include")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let t = rest.trim();
    (!t.is_empty()).then_some(t)
}

/// `key=value`, `key = value` or a bare `key`.
pub fn parse_entry(line: &str, origin: &str) -> Result<Entry, String> {
    let (key, value) = match line.split_once('=') {
        Some((k, v)) => (k.trim(), Some(expand(v.trim())?)),
        None => (line.trim(), None),
    };
    if key.is_empty() {
        return Err(format!("{origin}: option without a name: {line}"));
    }
    Ok(Entry {
        key: key.to_string(),
        value,
        origin: origin.to_string(),
    })
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as u64)
}

/// The value of one of fio's reserved words.
fn reserved(word: &str) -> Option<String> {
    match word {
        "pagesize" => Some(sysconf(libc::_SC_PAGESIZE).unwrap_or(4096).to_string()),
        "ncpus" => Some(sysconf(libc::_SC_NPROCESSORS_ONLN).unwrap_or(1).to_string()),
        "mb_memory" => {
            let pages = sysconf(libc::_SC_PHYS_PAGES)?;
            let page = sysconf(libc::_SC_PAGESIZE)?;
            Some((pages * page / (1 << 20)).to_string())
        }
        _ => None,
    }
}

/// Expand `${VAR}` and fio's reserved `$words` in an option value.
pub fn expand(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut rest = v;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                return Err(format!("'{v}': '${{' without a closing '}}'"));
            };
            let name = &body[..end];
            out.push_str(&std::env::var(name).unwrap_or_default());
            rest = &body[end + 1..];
            continue;
        }
        let word_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let word = &after[..word_len];
        match reserved(word) {
            Some(val) => out.push_str(&val),
            // Not ours to expand ($jobname in filename_format, for one): keep it.
            None => {
                out.push('$');
                out.push_str(word);
            }
        }
        rest = &after[word_len..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let base = std::env::var_os("HIPFILE_TEST_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let d = base.join(format!("jobfile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn sections_options_flags_and_comments() {
        let d = tmpdir("basic");
        let p = d.join("a.fio");
        std::fs::write(
            &p,
            "; comment\n# another\n[global]\nbs = 64k\n\n[first]\nrw=read\ntime_based\n[second]\nsize=1m\n",
        )
        .unwrap();
        let s = read(&p).unwrap();
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "global");
        assert_eq!(s[0].entries[0].key, "bs");
        assert_eq!(s[0].entries[0].value.as_deref(), Some("64k"));
        assert_eq!(s[1].entries[1].key, "time_based");
        assert_eq!(s[1].entries[1].value, None);
        assert!(s[1].entries[1].origin.ends_with("a.fio:8"));
        assert_eq!(s[2].name, "second");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn includes_insert_options_in_place_relative_to_the_file() {
        let d = tmpdir("include");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/common.fio"), "thread=1\ninclude more.fio\n").unwrap();
        std::fs::write(d.join("sub/more.fio"), "iodepth=4\n").unwrap();
        std::fs::write(
            d.join("main.fio"),
            "[global]\nbs=4k\ninclude sub/common.fio\n[job]\nrw=read\n",
        )
        .unwrap();
        let s = read(&d.join("main.fio")).unwrap();
        let keys: Vec<&str> = s[0].entries.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["bs", "thread", "iodepth"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn include_loops_and_sections_in_includes_are_refused() {
        let d = tmpdir("loop");
        std::fs::write(d.join("a.fio"), "[j]\ninclude b.fio\n").unwrap();
        std::fs::write(d.join("b.fio"), "include b.fio\n").unwrap();
        assert!(read(&d.join("a.fio")).unwrap_err().contains("nest"));
        std::fs::write(d.join("c.fio"), "[j]\ninclude d.fio\n").unwrap();
        std::fs::write(d.join("d.fio"), "[k]\n").unwrap();
        assert!(read(&d.join("c.fio"))
            .unwrap_err()
            .contains("may not start sections"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn options_before_a_section_are_refused() {
        let d = tmpdir("nosec");
        std::fs::write(d.join("a.fio"), "bs=4k\n[j]\n").unwrap();
        assert!(read(&d.join("a.fio"))
            .unwrap_err()
            .contains("outside any [section]"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn environment_and_reserved_words_expand() {
        std::env::set_var("JOBFILE_TEST_SIZE_FOR_EXPANSION", "64m");
        assert_eq!(expand("${JOBFILE_TEST_SIZE_FOR_EXPANSION}").unwrap(), "64m");
        assert_eq!(expand("x${JOBFILE_TEST_UNSET_VAR}y").unwrap(), "xy");
        let n: u64 = expand("$ncpus").unwrap().parse().unwrap();
        assert!(n >= 1);
        let p: u64 = expand("$pagesize").unwrap().parse().unwrap();
        assert!(p >= 4096);
        assert!(expand("$mb_memory").unwrap().parse::<u64>().unwrap() > 0);
        // filename_format's own words pass through.
        assert_eq!(expand("f.$jobnum.$filenum").unwrap(), "f.$jobnum.$filenum");
        assert!(expand("${OPEN").is_err());
    }
}
