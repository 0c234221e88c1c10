//! A small JSON value and writer (no serde): enough for fio's report format.
//!
//! Objects keep their insertion order, as fio's output does. Non-finite
//! floats (which JSON cannot express) are written as 0.

use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_string())
    }
}
impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Json {
        Json::UInt(v)
    }
}
impl From<u32> for Json {
    fn from(v: u32) -> Json {
        Json::UInt(v as u64)
    }
}
impl From<usize> for Json {
    fn from(v: usize) -> Json {
        Json::UInt(v as u64)
    }
}
impl From<i64> for Json {
    fn from(v: i64) -> Json {
        Json::Int(v)
    }
}
impl From<i32> for Json {
    fn from(v: i32) -> Json {
        Json::Int(v as i64)
    }
}
impl From<f64> for Json {
    fn from(v: f64) -> Json {
        Json::Float(v)
    }
}
impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}

/// Builds an object field by field: `Obj::new().field("a", 1u64).build()`.
#[derive(Default)]
pub struct Obj(Vec<(String, Json)>);

impl Obj {
    pub fn new() -> Obj {
        Obj(Vec::new())
    }

    pub fn field(mut self, key: &str, v: impl Into<Json>) -> Obj {
        self.0.push((key.to_string(), v.into()));
        self
    }

    pub fn push(&mut self, key: &str, v: impl Into<Json>) {
        self.0.push((key.to_string(), v.into()));
    }

    pub fn build(self) -> Json {
        Json::Obj(self.0)
    }
}

/// Append `s` as a JSON string literal (quotes included).
pub fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_float(out: &mut String, v: f64) {
    if !v.is_finite() {
        out.push('0');
    } else if v == v.trunc() && v.abs() < 1e15 {
        // Whole numbers as fio prints them (1234.000000 would be valid too, but longer).
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v:.6}");
    }
}

impl Json {
    /// Pretty-printed with `indent` spaces a level, as `fio --output-format=json`.
    pub fn to_pretty(&self, indent: usize) -> String {
        let mut s = String::new();
        self.write(&mut s, indent, 0);
        s.push('\n');
        s
    }

    fn write(&self, out: &mut String, indent: usize, level: usize) {
        let pad = |out: &mut String, l: usize| {
            out.push('\n');
            for _ in 0..(l * indent) {
                out.push(' ');
            }
        };
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Json::UInt(v) => {
                let _ = write!(out, "{v}");
            }
            Json::Float(v) => write_float(out, *v),
            Json::Str(s) => write_str(out, s),
            Json::Arr(items) => {
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, level + 1);
                    it.write(out, indent, level + 1);
                }
                pad(out, level);
                out.push(']');
            }
            Json::Obj(fields) => {
                if fields.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    pad(out, level + 1);
                    write_str(out, k);
                    out.push_str(" : ");
                    v.write(out, indent, level + 1);
                }
                pad(out, level);
                out.push('}');
            }
        }
    }

    /// Field `key` of an object.
    #[cfg(test)]
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(f) => f.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

#[cfg(test)]
/// A minimal JSON checker: parses the text and returns the number of values,
/// so the tests do not depend on an external parser.
pub(crate) fn check_json(s: &str) -> Result<usize, String> {
    struct P<'a> {
        b: &'a [u8],
        i: usize,
        n: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && b" \n\r\t".contains(&self.b[self.i]) {
                self.i += 1;
            }
        }
        fn eat(&mut self, c: u8) -> Result<(), String> {
            self.ws();
            if self.b.get(self.i) == Some(&c) {
                self.i += 1;
                Ok(())
            } else {
                Err(format!("expected '{}' at {}", c as char, self.i))
            }
        }
        fn string(&mut self) -> Result<(), String> {
            self.eat(b'"')?;
            while let Some(&c) = self.b.get(self.i) {
                self.i += 1;
                match c {
                    b'"' => return Ok(()),
                    b'\\' => {
                        let e = *self.b.get(self.i).ok_or("eof in escape")?;
                        self.i += 1;
                        if e == b'u' {
                            let hex = self.b.get(self.i..self.i + 4).ok_or("short \\u")?;
                            if !hex.iter().all(|h| h.is_ascii_hexdigit()) {
                                return Err("bad \\u".into());
                            }
                            self.i += 4;
                        } else if !b"\"\\/bfnrt".contains(&e) {
                            return Err(format!("bad escape at {}", self.i));
                        }
                    }
                    c if c < 0x20 => return Err(format!("raw control char at {}", self.i)),
                    _ => {}
                }
            }
            Err("unterminated string".into())
        }
        fn value(&mut self) -> Result<(), String> {
            self.ws();
            self.n += 1;
            match self.b.get(self.i) {
                Some(b'{') => {
                    self.i += 1;
                    self.ws();
                    if self.b.get(self.i) == Some(&b'}') {
                        self.i += 1;
                        return Ok(());
                    }
                    loop {
                        self.ws();
                        self.string()?;
                        self.eat(b':')?;
                        self.value()?;
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => {
                                self.i += 1;
                                return Ok(());
                            }
                            _ => return Err(format!("bad object at {}", self.i)),
                        }
                    }
                }
                Some(b'[') => {
                    self.i += 1;
                    self.ws();
                    if self.b.get(self.i) == Some(&b']') {
                        self.i += 1;
                        return Ok(());
                    }
                    loop {
                        self.value()?;
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => {
                                self.i += 1;
                                return Ok(());
                            }
                            _ => return Err(format!("bad array at {}", self.i)),
                        }
                    }
                }
                Some(b'"') => self.string(),
                Some(b't') if self.b[self.i..].starts_with(b"true") => {
                    self.i += 4;
                    Ok(())
                }
                Some(b'f') if self.b[self.i..].starts_with(b"false") => {
                    self.i += 5;
                    Ok(())
                }
                Some(b'n') if self.b[self.i..].starts_with(b"null") => {
                    self.i += 4;
                    Ok(())
                }
                Some(c) if c.is_ascii_digit() || *c == b'-' => {
                    let start = self.i;
                    self.i += 1;
                    while self.i < self.b.len() && b"0123456789.eE+-".contains(&self.b[self.i]) {
                        self.i += 1;
                    }
                    let t = std::str::from_utf8(&self.b[start..self.i]).unwrap();
                    t.parse::<f64>().map_err(|_| format!("bad number {t}"))?;
                    Ok(())
                }
                _ => Err(format!("unexpected input at {}", self.i)),
            }
        }
    }
    let mut p = P {
        b: s.as_bytes(),
        i: 0,
        n: 0,
    };
    p.value()?;
    p.ws();
    if p.i != p.b.len() {
        return Err(format!("trailing data at {}", p.i));
    }
    Ok(p.n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars() {
        assert_eq!(Json::Null.to_pretty(2), "null\n");
        assert_eq!(Json::Bool(true).to_pretty(2), "true\n");
        assert_eq!(Json::Int(-5).to_pretty(2), "-5\n");
        assert_eq!(Json::UInt(u64::MAX).to_pretty(2), "18446744073709551615\n");
        assert_eq!(Json::Float(2.0).to_pretty(2), "2\n");
        assert_eq!(Json::Float(1.25).to_pretty(2), "1.250000\n");
        assert_eq!(Json::Float(f64::NAN).to_pretty(2), "0\n");
        assert_eq!(Json::Float(f64::INFINITY).to_pretty(2), "0\n");
    }

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        write_str(&mut s, "a\"b\\c\nd\te\u{1}f/é");
        assert_eq!(s, "\"a\\\"b\\\\c\\nd\\te\\u0001f/é\"");
        check_json(&s).unwrap();
    }

    #[test]
    fn nested_structure_is_valid_json_in_order() {
        let v = Obj::new()
            .field("fio version", "hipfile-bench-0.2.0")
            .field(
                "jobs",
                Json::Arr(vec![Obj::new()
                    .field("jobname", "x\"y")
                    .field("groupid", 0u32)
                    .field("job options", Obj::new().field("rw", "read").build())
                    .field(
                        "read",
                        Obj::new()
                            .field("bw", 12.5)
                            .field("empty", Json::Arr(vec![]))
                            .build(),
                    )
                    .field("none", Obj::new().build())
                    .build()]),
            )
            .build();
        let s = v.to_pretty(2);
        assert_eq!(check_json(&s), Ok(12));
        assert!(s.find("\"fio version\"").unwrap() < s.find("\"jobs\"").unwrap());
        assert!(s.contains("\"bw\" : 12.500000"));
        assert!(s.contains("\"empty\" : []"));
        assert!(s.contains("\"none\" : {}"));
        assert_eq!(
            v.get("jobs")
                .map(|j| matches!(j, Json::Arr(a) if a.len() == 1)),
            Some(true)
        );
    }

    #[test]
    fn checker_rejects_broken_json() {
        assert!(check_json("{\"a\" : 1,}").is_err());
        assert!(check_json("[1 2]").is_err());
        assert!(check_json("\"a\nb\"").is_err());
        assert!(check_json("{} x").is_err());
    }
}
