use std::fmt;

use rand::RngExt;
use rand::distr::{Alphanumeric, SampleString};

/// The longest code accepted on the read path. Generated codes are shorter;
/// the headroom is for custom aliases.
pub const MAX_CODE_LEN: usize = 64;

/// A short code as it appears in `/{code}` and `/link/{code}`.
///
/// Holding a `ShortCode` means the string was checked: 1 to 64 characters of
/// `[A-Za-z0-9_-]`. Generated codes only use `[A-Za-z0-9]`; `-` and `_` are
/// accepted so that custom aliases can use them later without a migration.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ShortCode(Box<str>);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ShortCodeError {
    #[error("short code is empty")]
    Empty,
    #[error("short code is longer than {MAX_CODE_LEN} characters")]
    TooLong,
    #[error("short code may only contain the characters A-Z, a-z, 0-9, '-' and '_'")]
    BadCharacter,
}

impl ShortCode {
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

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

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
#[derive(Debug, Clone, Copy)]
pub struct CodeGenerator {
    length: usize,
}

/// Shortest configurable length: 62^6 is about 5.7e10 codes, enough that a
/// collision retry stays rare for tens of millions of links.
pub const MIN_GENERATED_LEN: usize = 6;
/// Longest configurable length; generated codes must stay parseable.
pub const MAX_GENERATED_LEN: usize = 32;

impl CodeGenerator {
    /// Panics on a length outside `MIN_GENERATED_LEN..=MAX_GENERATED_LEN`;
    /// the command line checks the range before this is reached.
    pub fn new(length: usize) -> Self {
        assert!(
            (MIN_GENERATED_LEN..=MAX_GENERATED_LEN).contains(&length),
            "code length {length} out of range"
        );
        Self { length }
    }

    pub fn length(&self) -> usize {
        self.length
    }

    pub fn generate(&self) -> ShortCode {
        let mut rng = rand::rng();
        let s = Alphanumeric.sample_string(&mut rng, self.length);
        ShortCode(s.into())
    }

    /// A code guaranteed not to be generated: used for unknown-code tests and
    /// load that should miss. Generated codes never contain `_`.
    pub fn unknown(&self) -> ShortCode {
        let mut rng = rand::rng();
        let mut s = Alphanumeric.sample_string(&mut rng, self.length - 1);
        s.insert(rng.random_range(0..self.length), '_');
        ShortCode(s.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_generated_codes_and_aliases() {
        let g = CodeGenerator::new(10);
        for _ in 0..1000 {
            let c = g.generate();
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

    #[test]
    fn unknown_codes_are_never_generated_shapes() {
        let g = CodeGenerator::new(8);
        let u = g.unknown();
        assert_eq!(u.as_str().len(), 8);
        assert!(u.as_str().contains('_'));
        assert!(ShortCode::parse(u.as_str()).is_ok());
    }
}
