use std::fmt;

use rand::distr::{Alphanumeric, SampleString};

/// The longest code accepted on the read path. Generated codes are shorter;
/// the headroom is for custom aliases.
pub(crate) const MAX_CODE_LEN: usize = 64;

/// A short code as it appears in `/{code}` and `/link/{code}`.
///
/// Holding a `ShortCode` means the string was checked: 1 to 64 characters of
/// `[A-Za-z0-9_-]`. Generated codes only use `[A-Za-z0-9]`; `-` and `_` are
/// accepted so that custom aliases can use them later without a migration.
///
/// Held inline up to 24 bytes (every generated code): a cache or tally
/// lookup compares the key without following a pointer, which on a random
/// code is a cache miss (measured in docs/benchmarks.md).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ShortCode(compact_str::CompactString);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShortCodeError {
    #[error("short code is empty")]
    Empty,
    #[error("short code is longer than {MAX_CODE_LEN} characters")]
    TooLong,
    #[error("short code may only contain the characters A-Z, a-z, 0-9, '-' and '_'")]
    BadCharacter,
}

/// Names that are, or will be, routes or files of litelink's own: never an
/// alias and never a generated code, so that no route ever shadows a link.
pub(crate) const RESERVED: &[&str] = &[
    "account",
    "admin",
    "api",
    "app",
    "assets",
    "auth",
    "docs",
    "favicon.ico",
    "health",
    "heart-beat",
    "link",
    "links",
    "login",
    "logout",
    "manage",
    "metrics",
    "openapi.json",
    "qr",
    "robots.txt",
    "static",
    "stats",
];

/// Whether `code` is reserved: one of [`RESERVED`], or starting with `_`
/// or `.`.
pub fn is_reserved(code: &str) -> bool {
    code.starts_with(['_', '.']) || RESERVED.binary_search(&code).is_ok()
}

/// Shortest custom alias.
pub(crate) const MIN_ALIAS_LEN: usize = 3;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AliasError {
    #[error("code must be {MIN_ALIAS_LEN} to {MAX_CODE_LEN} characters")]
    Length,
    #[error("code may only contain the characters A-Z, a-z, 0-9, '-' and '_'")]
    BadCharacter,
    #[error("code '{0}' is reserved")]
    Reserved(String),
}

impl ShortCode {
    /// A custom alias: 3-64 characters of `[A-Za-z0-9_-]`, not reserved in
    /// any case (`Manage` would read as the page's name to a person).
    pub fn parse_alias(raw: &str) -> Result<Self, AliasError> {
        if raw.len() < MIN_ALIAS_LEN || raw.len() > MAX_CODE_LEN {
            return Err(AliasError::Length);
        }
        let code = Self::parse(raw).map_err(|_| AliasError::BadCharacter)?;
        if is_reserved(&raw.to_ascii_lowercase()) {
            return Err(AliasError::Reserved(raw.to_owned()));
        }
        Ok(code)
    }

    pub fn parse(raw: &str) -> Result<Self, ShortCodeError> {
        if raw.is_empty() {
            return Err(ShortCodeError::Empty);
        }
        if raw.len() > MAX_CODE_LEN {
            return Err(ShortCodeError::TooLong);
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ShortCodeError::BadCharacter);
        }
        Ok(Self(raw.into()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// Wraps a code read back from the store, which was checked on the way in.
    pub(crate) fn from_trusted(stored: &str) -> Self {
        Self(stored.into())
    }
}

/// A code a client chose for its link: a [`ShortCode`] that is also a
/// valid alias ([`ShortCode::parse_alias`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias(pub ShortCode);

impl super::wire::FromText for Alias {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        ShortCode::parse_alias(text)
            .map(Alias)
            .map_err(|e| e.to_string())
    }
}

super::wire::deserialize_from_text!(Alias);

super::wire::string_schema!(
    Alias,
    "Alias",
    super::wire::StringSchema {
        format: None,
        min_length: Some(MIN_ALIAS_LEN),
        max_length: Some(MAX_CODE_LEN),
        pattern: Some("^[A-Za-z0-9_-]{3,64}$"),
        description: "A custom code (needs an API key): not a reserved name; 409 when taken",
    }
);

impl fmt::Display for ShortCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ShortCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ShortCode({})", self.0)
    }
}

/// Makes fresh random codes.
///
/// `rand::rng()` is a ChaCha-based CSPRNG seeded from the OS and reseeded
/// periodically, so codes cannot be predicted from earlier ones: a link is
/// only as private as its code is hard to guess.
///
/// With locality on and codes of at least [`MIN_LOCALITY_LEN`] characters,
/// the first [`LOCALITY_PREFIX`] characters name a bucket that
/// [`LOCALITY_RUN`] consecutive creates share, so that a batch's index
/// entries land on a few pages. What it buys and what it costs in entropy:
/// docs/api.md and docs/benchmarks.md section 5.
#[derive(Debug, Clone, Copy)]
pub struct CodeGenerator {
    length: usize,
    locality: bool,
}

/// Consecutive creates that share one prefix: few enough that the bucket's
/// index entries (about 20 bytes each) fit on a handful of 4 KiB pages.
pub(crate) const LOCALITY_RUN: u64 = 1024;
/// Characters of bucket prefix: 62^2 buckets, so prefixes repeat only
/// every 3.9 million creates.
pub(crate) const LOCALITY_PREFIX: usize = 2;
/// Shorter codes stay fully random: their few random characters are all
/// the protection they have.
pub(crate) const MIN_LOCALITY_LEN: usize = 8;

pub(crate) const ALPHABET: &[u8; 62] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Shortest configurable length: 62^6 is about 5.7e10 codes, enough that a
/// collision retry stays rare for tens of millions of links.
pub const MIN_GENERATED_LEN: usize = 6;
/// Longest configurable length; generated codes must stay parseable.
pub const MAX_GENERATED_LEN: usize = 32;

/// How codes are generated: `--code-length` and `--code-locality`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeSettings {
    /// Characters of `[A-Za-z0-9]`, `MIN_GENERATED_LEN..=MAX_GENERATED_LEN`.
    pub length: usize,
    /// Codes of 8+ characters start with a bucket prefix (see above).
    pub locality: bool,
}

impl Default for CodeSettings {
    fn default() -> Self {
        Self {
            length: 10,
            // Off: a bucket prefix tells creation order and, while there
            // are fewer than 62^2 * 1,024 links, cuts the guessing space.
            locality: false,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("code length must be {MIN_GENERATED_LEN} to {MAX_GENERATED_LEN}, not {0}")]
pub struct CodeLengthError(pub usize);

impl CodeGenerator {
    pub(crate) fn new(settings: CodeSettings) -> Result<Self, CodeLengthError> {
        let CodeSettings { length, locality } = settings;
        if !(MIN_GENERATED_LEN..=MAX_GENERATED_LEN).contains(&length) {
            return Err(CodeLengthError(length));
        }
        Ok(Self { length, locality })
    }

    pub(crate) fn length(&self) -> usize {
        self.length
    }

    /// Whether codes are drawn at random (`--code-locality on`) rather than
    /// made from row ids by the store's codebook (domain/codebook.rs).
    pub(crate) fn draws_random(&self) -> bool {
        self.locality
    }

    /// Whether generated codes start with a bucket prefix.
    pub(crate) fn has_locality(&self) -> bool {
        self.locality && self.length >= MIN_LOCALITY_LEN
    }

    /// A fresh code for the `sequence`-th create: the store numbers its
    /// creates so that consecutive ones share a bucket, also across restarts.
    /// Never a reserved word (a 6-character code could be `health`).
    pub(crate) fn generate(&self, sequence: u64) -> ShortCode {
        loop {
            let code = self.draw(sequence);
            if !is_reserved(code.as_str()) {
                return code;
            }
        }
    }

    fn draw(&self, sequence: u64) -> ShortCode {
        let mut rng = rand::rng();
        if !self.has_locality() {
            return ShortCode(Alphanumeric.sample_string(&mut rng, self.length).into());
        }
        let bucket = (sequence / LOCALITY_RUN) % (62 * 62);
        let mut s = String::with_capacity(self.length);
        s.push(char::from(ALPHABET[(bucket / 62) as usize]));
        s.push(char::from(ALPHABET[(bucket % 62) as usize]));
        Alphanumeric.append_string(&mut rng, &mut s, self.length - LOCALITY_PREFIX);
        ShortCode(s.into())
    }
}

/// Lets maps keyed by code be searched with the `&str` of a request.
impl std::borrow::Borrow<str> for ShortCode {
    fn borrow(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator(length: usize, locality: bool) -> CodeGenerator {
        CodeGenerator::new(CodeSettings { length, locality }).expect("valid length")
    }

    #[test]
    fn the_reserved_list_is_sorted_and_aliases_avoid_it() {
        assert!(
            RESERVED.windows(2).all(|w| w[0] < w[1]),
            "binary search needs order"
        );
        for word in RESERVED {
            assert!(is_reserved(word));
        }
        assert!(is_reserved("_x") && is_reserved(".well-known"));
        assert_eq!(
            ShortCode::parse_alias("health"),
            Err(AliasError::Reserved("health".into()))
        );
        for variant in ["Manage", "API", "Heart-Beat", "STATS"] {
            assert_eq!(
                ShortCode::parse_alias(variant),
                Err(AliasError::Reserved(variant.into())),
                "{variant}"
            );
        }
        assert_eq!(ShortCode::parse_alias("ab"), Err(AliasError::Length));
        assert_eq!(
            ShortCode::parse_alias("a b c"),
            Err(AliasError::BadCharacter)
        );
        assert!(ShortCode::parse_alias("spring-sale").is_ok());
        // Generated codes are not aliases: a case variant may be one.
        assert!(!is_reserved("Health"));
    }

    #[test]
    fn refuses_lengths_outside_the_range() {
        assert_eq!(generator(6, true).length(), 6);
        assert_eq!(generator(32, true).length(), 32);
        for bad in [0, 5, 33] {
            let e = CodeGenerator::new(CodeSettings {
                length: bad,
                locality: true,
            });
            assert_eq!(e.unwrap_err(), CodeLengthError(bad));
        }
    }

    #[test]
    fn accepts_generated_codes_and_aliases() {
        let g = generator(10, true);
        for i in 0..1000 {
            let c = g.generate(i * 977);
            assert_eq!(c.as_str().len(), 10);
            assert!(c.as_str().bytes().all(|b| b.is_ascii_alphanumeric()));
            assert_eq!(ShortCode::parse(c.as_str()).unwrap(), c);
        }
        assert!(ShortCode::parse("my-alias_2").is_ok());
    }

    #[test]
    fn rejects_malformed_codes() {
        assert_eq!(ShortCode::parse(""), Err(ShortCodeError::Empty));
        assert_eq!(
            ShortCode::parse(&"a".repeat(65)),
            Err(ShortCodeError::TooLong)
        );
        for bad in ["abc.def", "abc def", "ab/c", "é", "abc%20", "a\n"] {
            assert_eq!(ShortCode::parse(bad), Err(ShortCodeError::BadCharacter));
        }
    }

    fn prefix(c: &ShortCode) -> &str {
        &c.as_str()[..LOCALITY_PREFIX]
    }

    #[test]
    fn consecutive_creates_share_a_prefix_and_nothing_else() {
        let g = generator(10, true);
        let run: Vec<_> = (LOCALITY_RUN..2 * LOCALITY_RUN)
            .map(|i| g.generate(i))
            .collect();
        assert!(run.iter().all(|c| prefix(c) == prefix(&run[0])));
        // The rest is random: 1024 draws of 62^8 do not repeat.
        let mut rest: Vec<_> = run.iter().map(|c| &c.as_str()[LOCALITY_PREFIX..]).collect();
        rest.sort_unstable();
        rest.dedup();
        assert_eq!(rest.len(), run.len());
        // The next run moves to the next bucket; after 62^2 runs it comes back.
        assert_ne!(prefix(&g.generate(2 * LOCALITY_RUN)), prefix(&run[0]));
        let cycle = 62 * 62 * LOCALITY_RUN;
        assert_eq!(prefix(&g.generate(LOCALITY_RUN + cycle)), prefix(&run[0]));
        assert_eq!(prefix(&g.generate(0)), "AA");
        assert_eq!(prefix(&g.generate(cycle - 1)), "99");
    }

    #[test]
    fn short_codes_and_locality_off_stay_fully_random() {
        for g in [generator(7, true), generator(10, false)] {
            assert!(!g.has_locality());
            let mut prefixes: Vec<_> = (0..64).map(|_| g.generate(5)).collect();
            prefixes.sort_unstable_by(|a, b| prefix(a).cmp(prefix(b)));
            prefixes.dedup_by(|a, b| prefix(a) == prefix(b));
            // 64 random draws from 3844 two-character prefixes: a handful
            // may repeat, but far from all.
            assert!(prefixes.len() > 32, "{}", prefixes.len());
        }
    }
}
