//! How the domain's values read themselves from JSON and describe
//! themselves in the OpenAPI document. A value that is one JSON string is
//! [`FromText`]: serde hands the string to the same parser the rest of the
//! service calls, so a value's syntax and canonical form are checked once,
//! at the edge, and its error says what was wrong in the parser's words.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize as _;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use utoipa::openapi::schema::{
    ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type,
};
use utoipa::openapi::{RefOr, Schema};

/// A value read from one JSON string.
pub(crate) trait FromText: Sized {
    /// What the value is, for an error that found something else
    /// (`must be a URL string, not integer 5`).
    const EXPECTING: &'static str;

    fn from_text(text: &str) -> Result<Self, String>;
}

/// Reads a [`FromText`] value from a JSON string.
pub(crate) fn text<'de, D: Deserializer<'de>, T: FromText>(d: D) -> Result<T, D::Error> {
    d.deserialize_str(TextVisitor::<T>(PhantomData))
}

struct TextVisitor<T>(PhantomData<T>);

impl<T: FromText> Visitor<'_> for TextVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        T::from_text(v).map_err(E::custom)
    }
}

/// `impl Deserialize` through [`FromText`].
macro_rules! deserialize_from_text {
    ($t:ty) => {
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::domain::wire::text(d)
            }
        }
    };
}
pub(crate) use deserialize_from_text;

/// A [`FromText`] value where serde wants a type (an array's items).
struct Text<T>(T);

impl<'de, T: FromText> serde::Deserialize<'de> for Text<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        text(d).map(Text)
    }
}

impl FromText for String {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        Ok(text.to_owned())
    }
}

/// Most values one list of [`one_or_many`] holds.
pub(crate) const MAX_VALUES: usize = 32;

/// A condition's values: one value as itself, or an array of 1 to
/// [`MAX_VALUES`] of them (`"ios"` or `["ios", "android"]`). Written back
/// the same way: one value as itself.
pub(crate) mod one_or_many {
    use super::*;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>, T: FromText>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        d.deserialize_any(Many::<T>(PhantomData))
    }

    pub(crate) fn serialize<S: Serializer, T: fmt::Display>(
        values: &[T],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        if let [one] = values {
            return s.collect_str(one);
        }
        let mut seq = s.serialize_seq(Some(values.len()))?;
        for v in values {
            seq.serialize_element(&v.to_string())?;
        }
        seq.end()
    }

    struct Many<T>(PhantomData<T>);

    impl<'de, T: FromText> Visitor<'de> for Many<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{} or an array of them", T::EXPECTING)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<T>, E> {
            T::from_text(v).map(|t| vec![t]).map_err(E::custom)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let mut out = Vec::new();
            while let Some(Text(v)) = seq.next_element::<Text<T>>()? {
                if out.len() == MAX_VALUES {
                    return Err(de::Error::custom(format!(
                        "lists at most {MAX_VALUES} values"
                    )));
                }
                out.push(v);
            }
            if out.is_empty() {
                return Err(de::Error::custom("must list at least one value"));
            }
            Ok(out)
        }
    }

    /// The schema of a condition's values: a string, or an array of them.
    pub(crate) fn schema() -> RefOr<Schema> {
        let one = || ObjectBuilder::new().schema_type(Type::String);
        OneOfBuilder::new()
            .item(one())
            .item(
                ArrayBuilder::new()
                    .items(one())
                    .min_items(Some(1))
                    .max_items(Some(MAX_VALUES)),
            )
            .into()
    }
}

/// A CSV cell that a spreadsheet will not run as a formula: one starting
/// with `=`, `+`, `-`, `@`, a tab or a carriage return gets a `'` in front,
/// as OWASP advises, and so does one already starting with `'`, so that
/// [`from_csv_cell`] gives back exactly what was written.
pub(crate) fn csv_cell(value: &str) -> std::borrow::Cow<'_, str> {
    if value.starts_with(['=', '+', '-', '@', '\t', '\r', '\'']) {
        format!("'{value}").into()
    } else {
        value.into()
    }
}

/// A cell [`csv_cell`] wrote, as it was before.
pub(crate) fn from_csv_cell(cell: &str) -> &str {
    cell.strip_prefix('\'').unwrap_or(cell)
}

/// A string's schema, as each value describes itself.
pub(crate) struct StringSchema {
    pub format: Option<&'static str>,
    pub min_length: Option<usize>,
    pub max_length: Option<usize>,
    pub pattern: Option<&'static str>,
    pub description: &'static str,
}

impl StringSchema {
    pub(crate) fn build(self) -> RefOr<Schema> {
        let format = self.format.map(|f| match f {
            "date-time" => SchemaFormat::KnownFormat(KnownFormat::DateTime),
            other => SchemaFormat::Custom(other.to_owned()),
        });
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(format)
            .min_length(self.min_length)
            .max_length(self.max_length)
            .pattern(self.pattern)
            .description(Some(self.description))
            .into()
    }
}

/// `impl ToSchema` for a value that is one string, described once, beside
/// its parser.
macro_rules! string_schema {
    ($t:ty, $name:literal, $schema:expr) => {
        impl utoipa::PartialSchema for $t {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                $crate::domain::wire::StringSchema::build($schema)
            }
        }
        impl utoipa::ToSchema for $t {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed($name)
            }
        }
    };
}
pub(crate) use string_schema;

/// Why a JSON body could not be read as the type asked for, in words that
/// name the field and its place (`rules[1].if.device: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BodyError(pub String);

/// A message for a field that must be given and not null.
pub(crate) const REQUIRED: &str = "is required";

/// A `T` read from a JSON object only. serde's derived structs take an
/// array too, by position, and one whose fields all have defaults takes
/// `[]`: no schema of ours allows either.
#[derive(Debug)]
pub(crate) struct Object<T>(pub T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Only<T>(PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Only(PhantomData)).map(Object)
    }
}

/// An optional field holding an [`Object`] (`null`: none).
pub(crate) fn optional_object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    Option::<Object<T>>::deserialize(d).map(|o| o.map(|Object(t)| t))
}

/// An optional array of [`Object`]s (`null`: none).
pub(crate) fn optional_objects<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    Option::<Vec<Object<T>>>::deserialize(d)
        .map(|o| o.map(|v| v.into_iter().map(|Object(t)| t).collect()))
}

/// Reads `body` as a `T`, the whole of it: a syntax error, a field that is
/// missing, unknown, given twice or of the wrong type, and a value its
/// parser refuses each get a message naming where it is.
pub fn from_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, BodyError> {
    // serde reads a struct from an array too, by position: a body is an
    // object, and only an object.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|b| *b != b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok()
    {
        return Err(BodyError("body must be a JSON object".into()));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let syntax = !matches!(e.inner().classify(), serde_json::error::Category::Data);
        if syntax {
            return BodyError(format!("body is not valid JSON: {}", e.inner()));
        }
        BodyError(message(&e.path().to_string(), &e.inner().to_string()))
    })?;
    de.end()
        .map_err(|e| BodyError(format!("body is not valid JSON: {e}")))?;
    Ok(value)
}

/// Reads `value`, found under `field` of a record, as a `T`: its errors
/// name the place as [`from_json`]'s do (`rules[0].url: ...`).
pub(crate) fn from_value<T: serde::de::DeserializeOwned>(
    field: &str,
    value: &serde_json::Value,
) -> Result<T, BodyError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let at = e.path().to_string();
        let path = match at.as_str() {
            "." => field.to_owned(),
            p if p.starts_with('[') => format!("{field}{p}"),
            p => format!("{field}.{p}"),
        };
        BodyError(message(&path, &e.inner().to_string()))
    })
}

/// serde's words made into ours: `missing field `url`` becomes
/// `field 'url' is required`, and so on; `path` is `.` at the top.
fn message(path: &str, inner: &str) -> String {
    // serde_json adds " at line 1 column 9" to a message; the path says
    // where better.
    let inner = match inner.rfind(" at line ") {
        Some(at) => &inner[..at],
        None => inner,
    };
    let quoted = |rest: &str| rest.split('`').nth(1).map(str::to_owned);
    // A field's own name, with the object it is in (`.` at the top): an
    // unknown or repeated key is already on the path, a missing one not.
    let parent_of = |name: &str| -> String {
        let parent = path
            .strip_suffix(name)
            .map_or(path, |p| p.strip_suffix('.').unwrap_or(p));
        if parent.is_empty() {
            ".".to_owned()
        } else {
            parent.to_owned()
        }
    };
    let field = |parent: &str, name: &str| {
        if parent == "." {
            format!("field '{name}'")
        } else {
            format!("{parent}.{name}")
        }
    };
    if let Some(name) = inner.strip_prefix("missing field ").and_then(quoted) {
        return format!("{} {REQUIRED}", field(path, &name));
    }
    if let Some(rest) = inner.strip_prefix("unknown field ") {
        let name = quoted(rest).unwrap_or_default();
        let parent = parent_of(&name);
        let known: Vec<&str> = rest
            .split_once("expected ")
            .map(|(_, k)| k.split('`').skip(1).step_by(2).collect())
            .unwrap_or_default();
        let known = known.join(", ");
        return if parent == "." {
            format!("unknown field '{name}' (known: {known})")
        } else {
            format!("{parent}.{name}: unknown field (known: {known})")
        };
    }
    if let Some(name) = inner.strip_prefix("duplicate field ").and_then(quoted) {
        return format!("{} is given twice", field(&parent_of(&name), &name));
    }
    let top = path == ".";
    if let Some(rest) = inner.strip_prefix("invalid type: ") {
        if top {
            return "body must be a JSON object".to_owned();
        }
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return format!("{path}: must be {expected}, not {found}");
        }
    }
    if inner == REQUIRED && !top {
        return format!("field '{path}' {REQUIRED}");
    }
    if top {
        inner.to_owned()
    } else {
        format!("{path}: {inner}")
    }
}

/// A field that must be given, and not as `null`.
pub(crate) fn required<'de, D: Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Option::<T>::deserialize(d)?.ok_or_else(|| de::Error::custom(REQUIRED))
}

/// [`required`], for a field that may be left out (a PATCH's).
pub(crate) fn not_null<'de, D: Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    required(d).map(Some)
}

/// A field of a PATCH: left out, `null` (cleared), or set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Patch<T> {
    #[default]
    Keep,
    Clear,
    Set(T),
}

impl<T> Patch<T> {
    /// `None` to keep, `Some(None)` to clear, `Some(Some(v))` to set.
    pub(crate) fn into_option(self) -> Option<Option<T>> {
        match self {
            Patch::Keep => None,
            Patch::Clear => Some(None),
            Patch::Set(v) => Some(Some(v)),
        }
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Patch<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<T>::deserialize(d).map(|v| v.map_or(Patch::Clear, Patch::Set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        #[serde(deserialize_with = "required")]
        url: String,
        #[serde(default)]
        n: Option<u32>,
        #[serde(default)]
        p: Patch<u32>,
    }

    #[test]
    fn each_bad_body_has_its_own_message() {
        for (body, want) in [
            (&b"{"[..], "body is not valid JSON"),
            (b"", "body is not valid JSON"),
            (b"{\"url\":\"a\"} x", "body is not valid JSON"),
            (b"[1]", "body must be a JSON object"),
            (b"\"x\"", "body must be a JSON object"),
            (b"{}", "field 'url' is required"),
            (b"{\"url\":null}", "field 'url' is required"),
            (b"{\"url\":5}", "url: must be a string, not integer `5`"),
            (
                b"{\"url\":\"a\",\"x\":1}",
                "unknown field 'x' (known: url, n, p)",
            ),
            (
                b"{\"url\":\"a\",\"url\":\"b\"}",
                "field 'url' is given twice",
            ),
        ] {
            let e = from_json::<Body>(body).expect_err("refused");
            assert!(e.0.starts_with(want), "{e} / {want}");
        }
        let ok: Body = from_json(b"{\"url\":\"a\",\"p\":null}").expect("valid");
        assert_eq!(ok.p, Patch::Clear);
        let ok: Body = from_json(b"{\"url\":\"a\",\"p\":3}").expect("valid");
        assert_eq!(ok.p, Patch::Set(3));
        let ok: Body = from_json(b"{\"url\":\"a\"}").expect("valid");
        assert_eq!(ok.p, Patch::Keep);
    }
}
