//! Scene params (issue 10, item 6): every scene declares each param it reads — name, inclusive
//! range, default, a one-line doc — and a case's `params` table is checked against those
//! declarations when the file loads.
//!
//! A value outside its range, of the wrong type, or under an undeclared key is a load error
//! that names the key, the value and the allowed range, e.g.
//! `params.clusters = 4294967297 is out of range (allowed 1..=64)`. Scenes read values only
//! through [`Params::get`] (via `CaseRun::param`), which converts with `TryFrom`, so a value can
//! never be truncated on its way to a size or a count.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use toml::{Table, Value};

/// The longest user-supplied string echoed in a message; longer ones are cut with "…".
pub const MAX_ECHO_CHARS: usize = 80;
/// The most unknown keys listed in one message; the rest are counted.
const MAX_LISTED_KEYS: usize = 10;

/// One declared param of a scene.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub name: &'static str,
    /// Smallest allowed value.
    pub min: u64,
    /// Largest allowed value (inclusive).
    pub max: u64,
    /// The value when the case does not give one.
    pub default: u64,
    /// The value under `--fast` when the case does not give one (`None`: `default`).
    pub fast_default: Option<u64>,
    /// What the param means, in one line.
    pub doc: &'static str,
}

impl Param {
    /// A param `name` in `min..=max` with `default`.
    pub const fn new(
        name: &'static str,
        min: u64,
        max: u64,
        default: u64,
        doc: &'static str,
    ) -> Param {
        Param {
            name,
            min,
            max,
            default,
            fast_default: None,
            doc,
        }
    }

    /// The same param with a smaller default under `--fast`.
    pub const fn with_fast_default(self, fast_default: u64) -> Param {
        Param {
            fast_default: Some(fast_default),
            ..self
        }
    }

    /// `MIN..=MAX`.
    pub fn range(&self) -> String {
        format!("{}..={}", self.min, self.max)
    }
}

/// `s` itself, or its first [`MAX_ECHO_CHARS`] characters followed by "…"; control
/// characters are escaped (`\n`), so a message stays one line.
pub fn cut(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i == MAX_ECHO_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// A TOML value as it appears in a message: numbers and booleans as written, strings quoted
/// and cut, arrays and tables by kind (they can be arbitrarily large).
pub fn show_value(value: &Value) -> String {
    match value {
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Boolean(b) => b.to_string(),
        Value::String(s) => format!("{:?}", cut(s)),
        Value::Datetime(d) => cut(&d.to_string()),
        Value::Array(items) => format!("an array of {}", items.len()),
        Value::Table(_) => "a table".to_string(),
    }
}

/// `a, b and 3 more`: a list of keys for a message, each [`cut`], at most 10 shown.
pub fn key_list<'k>(keys: impl IntoIterator<Item = &'k str>) -> String {
    let keys: Vec<&str> = keys.into_iter().collect();
    let mut out = keys
        .iter()
        .take(MAX_LISTED_KEYS)
        .map(|k| cut(k))
        .collect::<Vec<_>>()
        .join(", ");
    if keys.len() > MAX_LISTED_KEYS {
        let _ = write!(out, " and {} more", keys.len() - MAX_LISTED_KEYS);
    }
    out
}

/// `KEY = VALUE is out of range (allowed MIN..=MAX)`.
pub fn out_of_range(key: &str, value: impl std::fmt::Display, min: u64, max: u64) -> String {
    format!("{key} = {value} is out of range (allowed {min}..={max})")
}

/// A case's params after load: every given value is declared and in its range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    specs: &'static [Param],
    values: BTreeMap<&'static str, u64>,
}

/// Why [`Params::get`] could not produce a value: a bug in the scene, not in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("the scene reads param {0:?}, which it does not declare")]
    Undeclared(String),
    #[error("params.{key} = {value} does not fit the scene's {ty}")]
    DoesNotFit {
        key: &'static str,
        value: u64,
        ty: &'static str,
    },
}

impl Params {
    /// Every param at its default (no value given).
    pub fn defaults(specs: &'static [Param]) -> Params {
        Params {
            specs,
            values: BTreeMap::new(),
        }
    }

    /// Checks a case's `params` table against `specs`. The error is one line starting with
    /// the key path (`params.KEY = …` or `params: unknown key(s) …`).
    pub fn parse(specs: &'static [Param], table: &Table) -> Result<Params, String> {
        let mut unknown: Vec<&str> = table
            .keys()
            .map(String::as_str)
            .filter(|k| !specs.iter().any(|p| p.name == *k))
            .collect();
        if !unknown.is_empty() {
            unknown.sort_unstable();
            let allowed = if specs.is_empty() {
                "none".to_string()
            } else {
                key_list(specs.iter().map(|p| p.name))
            };
            return Err(format!(
                "params: unknown key(s) in params: {} (allowed: {allowed})",
                key_list(unknown)
            ));
        }
        let mut values = BTreeMap::new();
        for spec in specs {
            let Some(value) = table.get(spec.name) else {
                continue;
            };
            let key = format!("params.{}", spec.name);
            let n = match value {
                Value::Integer(i) => *i,
                other => {
                    return Err(format!(
                        "{key} = {} is not an integer (allowed {})",
                        show_value(other),
                        spec.range()
                    ));
                }
            };
            match u64::try_from(n) {
                Ok(v) if (spec.min..=spec.max).contains(&v) => values.insert(spec.name, v),
                _ => return Err(out_of_range(&key, n, spec.min, spec.max)),
            };
        }
        Ok(Params { specs, values })
    }

    /// The declarations these params were checked against.
    pub fn specs(&self) -> &'static [Param] {
        self.specs
    }

    /// The value the case gave for `key`, if any.
    pub fn given(&self, key: &str) -> Option<u64> {
        self.values.get(key).copied()
    }

    /// `key`'s value (given, else the default; the fast default when `fast`) as a `T`.
    pub fn get<T: TryFrom<u64>>(&self, key: &str, fast: bool) -> Result<T, ParamError> {
        let spec = self
            .specs
            .iter()
            .find(|p| p.name == key)
            .ok_or_else(|| ParamError::Undeclared(key.to_string()))?;
        let value = match (self.given(key), spec.fast_default) {
            (Some(v), _) => v,
            (None, Some(fast_default)) if fast => fast_default,
            (None, _) => spec.default,
        };
        T::try_from(value).map_err(|_| ParamError::DoesNotFit {
            key: spec.name,
            value,
            ty: std::any::type_name::<T>(),
        })
    }

    /// `params.KEY = VALUE` for messages of cross-param checks, marking defaults.
    pub fn show(&self, key: &str) -> String {
        match (self.given(key), self.get::<u64>(key, false)) {
            (Some(v), _) => format!("params.{key} = {v}"),
            (None, Ok(v)) => format!("params.{key} = {v} (default)"),
            (None, Err(_)) => format!("params.{key} (undeclared)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SPECS: &[Param] = &[
        Param::new("n", 1, 1 << 24, 4096, "elements").with_fast_default(64),
        Param::new("flag", 0, 1, 0, "a switch"),
    ];

    fn parse(text: &str) -> Result<Params, String> {
        Params::parse(SPECS, &toml::from_str::<Table>(text).unwrap())
    }

    #[test]
    fn values_in_range_load_and_defaults_fill_in() {
        let p = parse("n = 16777216").unwrap();
        assert_eq!(p.get::<u32>("n", false), Ok(16777216));
        assert_eq!(p.get::<u8>("flag", false), Ok(0));
        assert_eq!(parse("").unwrap().get::<u64>("n", true), Ok(64));
        assert_eq!(parse("").unwrap().get::<u64>("n", false), Ok(4096));
        assert_eq!(p.show("flag"), "params.flag = 0 (default)");
    }

    #[test]
    fn out_of_range_names_key_value_and_range() {
        for (text, value) in [
            ("n = 0", "0"),
            ("n = 16777217", "16777217"),
            ("n = -1", "-1"),
            ("n = 4294967297", "4294967297"),
            ("n = 9223372036854775807", "9223372036854775807"),
        ] {
            assert_eq!(
                parse(text).unwrap_err(),
                format!("params.n = {value} is out of range (allowed 1..=16777216)")
            );
        }
    }

    #[test]
    fn wrong_types_are_named() {
        assert_eq!(
            parse("n = 1.5").unwrap_err(),
            "params.n = 1.5 is not an integer (allowed 1..=16777216)"
        );
        assert_eq!(
            parse("flag = true").unwrap_err(),
            "params.flag = true is not an integer (allowed 0..=1)"
        );
        let long = "x".repeat(500);
        let err = parse(&format!("n = \"{long}\"")).unwrap_err();
        assert!(err.len() < 200 && err.contains("…"), "{err}");
    }

    #[test]
    fn unknown_keys_are_listed_and_capped() {
        assert_eq!(
            parse("m = 1").unwrap_err(),
            "params: unknown key(s) in params: m (allowed: n, flag)"
        );
        let many: String = (0..50).map(|i| format!("k{i:02} = 1\n")).collect();
        let err = parse(&many).unwrap_err();
        assert!(err.contains("k09 and 40 more (allowed"), "{err}");
    }

    #[test]
    fn get_cannot_truncate() {
        let p = parse("n = 300").unwrap();
        assert!(matches!(
            p.get::<u8>("n", false),
            Err(ParamError::DoesNotFit { value: 300, .. })
        ));
        assert_eq!(
            p.get::<u64>("nope", false),
            Err(ParamError::Undeclared("nope".into()))
        );
    }

    #[test]
    fn cut_keeps_short_strings_and_char_boundaries() {
        assert_eq!(cut("abc"), "abc");
        let s = "é".repeat(100);
        assert_eq!(cut(&s).chars().count(), MAX_ECHO_CHARS + 1);
        assert_eq!(cut("a\nb"), "a\\nb");
    }
}
