//! What people find a link by: its title and its tags. Neither is ever
//! fetched from the target; each is checked once, at the edge.
//!
//! A tag is compared regardless of case and shown as it was first
//! written: the store keeps one form per tag.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::user::is_hidden_formatting;
use super::wire::{FromText, StringSchema};

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 512;
/// Most tags one link has.
pub const MAX_TAGS: usize = 32;
/// Longest tag, in characters.
pub const MAX_TAG_CHARS: usize = 64;

/// A link's title and tags; both absent on most links.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels {
    pub title: Option<String>,
    /// As shown, in the order given.
    pub tags: Vec<String>,
}

impl Labels {
    pub fn is_empty(&self) -> bool {
        self.title.is_none() && self.tags.is_empty()
    }
}

/// A tag as compared: in lower case.
pub fn fold_tag(tag: &str) -> String {
    tag.to_lowercase()
}

fn unprintable(text: &str) -> bool {
    text.chars()
        .any(|c| c.is_control() || is_hidden_formatting(c))
}

/// A title: 1 to [`MAX_TITLE_CHARS`] characters, none of them control or
/// bidirectional-formatting characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Title(pub String);

impl Title {
    pub fn parse(text: &str) -> Result<Self, String> {
        let chars = text.chars().count();
        if text.trim().is_empty() || chars > MAX_TITLE_CHARS {
            return Err(format!("a title is 1 to {MAX_TITLE_CHARS} characters"));
        }
        if unprintable(text) {
            return Err("a title has no control or bidirectional-formatting characters".into());
        }
        Ok(Self(text.to_owned()))
    }
}

impl FromText for Title {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

super::wire::deserialize_from_text!(Title);

super::wire::string_schema!(
    Title,
    "Title",
    StringSchema {
        format: None,
        min_length: Some(1),
        max_length: Some(MAX_TITLE_CHARS),
        pattern: None,
        description: "The link's title, as its owner gives it (never fetched from the target)",
    }
);

/// One tag: 1 to [`MAX_TAG_CHARS`] characters, none of them `|`, control
/// or bidirectional-formatting characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag(pub String);

impl Tag {
    pub fn parse(text: &str) -> Result<Self, String> {
        let chars = text.chars().count();
        if text.trim().is_empty() || chars > MAX_TAG_CHARS {
            return Err(format!("a tag is 1 to {MAX_TAG_CHARS} characters"));
        }
        if text.contains('|') || unprintable(text) {
            return Err("a tag has no '|', control or bidirectional-formatting characters".into());
        }
        Ok(Self(text.to_owned()))
    }
}

impl FromText for Tag {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text)
    }
}

super::wire::deserialize_from_text!(Tag);

super::wire::string_schema!(
    Tag,
    "Tag",
    StringSchema {
        format: None,
        min_length: Some(1),
        max_length: Some(MAX_TAG_CHARS),
        pattern: Some("^[^|]+$"),
        description: "A tag: compared regardless of case, shown as first written",
    }
);

/// A link's tags: at most [`MAX_TAGS`]; a tag given twice (in any case)
/// counts once, as first given. `[]` is none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tags(pub Vec<String>);

impl Tags {
    /// `tags`, each checked, repeats dropped.
    pub fn parse<'a>(tags: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut out = Self::default();
        for tag in tags {
            out.push(Tag::parse(tag)?)?;
        }
        Ok(out)
    }

    fn push(&mut self, tag: Tag) -> Result<(), String> {
        let folded = fold_tag(&tag.0);
        if self.0.iter().any(|t| fold_tag(t) == folded) {
            return Ok(());
        }
        if self.0.len() == MAX_TAGS {
            return Err(format!("a link has at most {MAX_TAGS} tags"));
        }
        self.0.push(tag.0);
        Ok(())
    }
}

impl<'de> serde::Deserialize<'de> for Tags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Many;
        impl<'de> Visitor<'de> for Many {
            type Value = Tags;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of strings")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Tags, A::Error> {
                let mut out = Tags::default();
                while let Some(tag) = seq.next_element::<Tag>()? {
                    out.push(tag).map_err(de::Error::custom)?;
                }
                Ok(out)
            }
        }
        d.deserialize_seq(Many)
    }
}

impl utoipa::PartialSchema for Tags {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::schema::ArrayBuilder::new()
            .items(<Tag as utoipa::PartialSchema>::schema())
            .max_items(Some(MAX_TAGS))
            .description(Some(
                "The link's tags, at most 32; a tag given twice (in any case) counts once",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Tags {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("Tags")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::wire::from_json;

    #[test]
    fn titles_and_tags_refuse_what_they_cannot_show() {
        assert!(Title::parse("Spring sale: 20% off").is_ok());
        assert!(Title::parse(&"é".repeat(MAX_TITLE_CHARS)).is_ok());
        for bad in ["", "  ", "a\u{202E}b", "line\nbreak"] {
            assert!(Title::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Title::parse(&"x".repeat(MAX_TITLE_CHARS + 1)).is_err());
        assert!(Tag::parse("Q3 launch").is_ok());
        for bad in [
            "",
            "a|b",
            "tab\there",
            "\u{200F}rtl",
            &"t".repeat(MAX_TAG_CHARS + 1),
        ] {
            assert!(Tag::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        tags: Tags,
    }

    fn read(tags: &str) -> Result<Tags, String> {
        from_json::<Body>(format!(r#"{{"tags": {tags}}}"#).as_bytes())
            .map(|b| b.tags)
            .map_err(|e| e.0)
    }

    #[test]
    fn tags_count_once_regardless_of_case_and_are_bounded() {
        let tags = read(r#"["Sales", "news", "SALES", "News"]"#).expect("tags");
        assert_eq!(tags.0, vec!["Sales", "news"]);
        let many: Vec<String> = (0..=MAX_TAGS).map(|i| format!("\"t{i}\"")).collect();
        let e = read(&format!("[{}]", many.join(","))).expect_err("too many");
        assert!(e.contains("at most 32"), "{e}");
        let e = read(r#"["a|b"]"#).expect_err("pipe");
        assert!(e.starts_with("tags") && e.contains("'|'"), "{e}");
        let e = read(r#""one""#).expect_err("not an array");
        assert!(e.contains("array"), "{e}");
    }
}
