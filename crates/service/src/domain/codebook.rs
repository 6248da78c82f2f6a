//! Generated codes as a keyed permutation of row ids.
//!
//! A generated code is FF1 (NIST SP 800-38G, format-preserving encryption
//! over AES-128, from the `fpe` crate) of the link's row id, written as
//! `length` base-62 digits. Without the key the codes look as random as
//! drawn ones; with it the store finds a link by decrypting its code to the
//! row id, one B-tree instead of a code index and the table, and creates
//! append to the table instead of dirtying a random leaf of an index
//! (docs/benchmarks.md, "Data scale"). Each length is its own permutation
//! (FF1 mixes the length in), so codes of every length stay distinct.

use fpe::ff1::{FF1, NumeralString, Operations};

use super::code::{ALPHABET, MAX_GENERATED_LEN, MIN_GENERATED_LEN, ShortCode, is_reserved};

/// The secret of a codebook: whoever holds it can list every code.
pub(crate) type CodeKey = [u8; 16];

/// Encrypts row ids into codes of one length, and codes of any generated
/// length back into row ids.
pub(crate) struct Codebook {
    ff1: FF1<aes::Aes128>,
    length: usize,
    /// Codes decrypted by [`Codebook::id_of_recent`], and their ids.
    recent: quick_cache::sync::Cache<ShortCode, Option<u64>>,
}

/// How many decrypted codes [`Codebook::id_of_recent`] keeps: every code
/// a visit flush writes at once, for up to 64 Ki links visited a second
/// (a few MiB at most).
const RECENT_IDS: usize = 1 << 16;

impl std::fmt::Debug for Codebook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Codebook")
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

impl Codebook {
    /// `length` must be a generated length (checked by `CodeGenerator`).
    pub(crate) fn new(key: &CodeKey, length: usize) -> Self {
        debug_assert!((MIN_GENERATED_LEN..=MAX_GENERATED_LEN).contains(&length));
        Self {
            // Radix 62 is in FF1's range (2..=2^16): this cannot fail.
            ff1: FF1::new(key, 62).unwrap_or_else(|_| unreachable!("radix 62 is valid")),
            length,
            recent: quick_cache::sync::Cache::new(RECENT_IDS),
        }
    }

    /// The code of row `id`, or `None` when it has none: the id does not fit
    /// in `length` digits, or its code is a reserved word (the id is then
    /// skipped, so that no route ever shadows a link).
    pub(crate) fn code_of(&self, id: u64) -> Option<ShortCode> {
        let plain = Digits::of_number(u128::from(id), self.length)?;
        let code = self.ff1.encrypt(&[], &plain).ok()?.to_code();
        (!is_reserved(code.as_str())).then_some(code)
    }

    /// The row id that `code` is the code of, if a code of its length and
    /// characters can be generated at all; whether that row has this code
    /// is for the store to check.
    pub(crate) fn id_of(&self, code: &str) -> Option<u64> {
        let cipher = Digits::of_code(code)?;
        let plain = self.ff1.decrypt(&[], &cipher).ok()?;
        u64::try_from(plain.number()?).ok()
    }

    /// [`Codebook::id_of`], remembered for the codes decrypted lately: a
    /// visit flush decrypts every hot link's code again each second, and
    /// a decryption (FF1's ten AES rounds) costs about 7,000 instructions,
    /// a fifth of what writing the link's counts does. A code's id never
    /// changes, so what is remembered is never stale.
    pub(crate) fn id_of_recent(&self, code: &ShortCode) -> Option<u64> {
        if let Some(id) = self.recent.get(code) {
            return id;
        }
        let id = self.id_of(code.as_str());
        self.recent.insert(code.clone(), id);
        id
    }
}

/// 62^i for every half of a generated code (at most 16 digits).
const POW: [u128; 17] = {
    let mut t = [1u128; 17];
    let mut i = 1;
    while i < t.len() {
        t[i] = t[i - 1] * 62;
        i += 1;
    }
    t
};

fn digit_of(b: u8) -> Option<u128> {
    let d = match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        _ => return None,
    };
    Some(u128::from(d))
}

/// A numeral string of radix 62 held as its two FF1 halves, each a number
/// below 62^16 < 2^96: FF1's arithmetic on machine integers, where the
/// crate's general numeral strings use big integers (three times slower).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digits {
    /// The first `count / 2` digits.
    a: u128,
    /// The other `count - count / 2`.
    b: u128,
    count: u8,
}

impl Digits {
    fn split_at(count: usize) -> (usize, usize) {
        (count / 2, count - count / 2)
    }

    fn of_number(n: u128, count: usize) -> Option<Self> {
        let (u, v) = Self::split_at(count);
        let a = n / POW[v];
        (a < POW[u]).then_some(Self {
            a,
            b: n % POW[v],
            count: count as u8,
        })
    }

    fn of_code(code: &str) -> Option<Self> {
        let bytes = code.as_bytes();
        if !(MIN_GENERATED_LEN..=MAX_GENERATED_LEN).contains(&bytes.len()) {
            return None;
        }
        let (u, _) = Self::split_at(bytes.len());
        let number = |digits: &[u8]| {
            digits
                .iter()
                .try_fold(0u128, |n, &c| Some(n * 62 + digit_of(c)?))
        };
        Some(Self {
            a: number(&bytes[..u])?,
            b: number(&bytes[u..])?,
            count: bytes.len() as u8,
        })
    }

    fn number(&self) -> Option<u128> {
        let (_, v) = Self::split_at(self.count as usize);
        self.a.checked_mul(POW[v])?.checked_add(self.b)
    }

    fn to_code(self) -> ShortCode {
        let (u, v) = Self::split_at(self.count as usize);
        let mut out = [0u8; MAX_GENERATED_LEN];
        for (half, at, len) in [(self.a, 0, u), (self.b, u, v)] {
            let mut n = half;
            for c in out[at..at + len].iter_mut().rev() {
                *c = ALPHABET[(n % 62) as usize];
                n /= 62;
            }
        }
        let s = std::str::from_utf8(&out[..self.count as usize])
            .unwrap_or_else(|_| unreachable!("the alphabet is ASCII"));
        ShortCode::from_trusted(s)
    }
}

/// One FF1 half: a number below 62^`count`.
#[derive(Debug, Clone, Copy)]
struct Half {
    value: u128,
    count: u8,
}

/// A half's big-endian bytes: FF1 asks for at most 12 (62^16 < 2^96).
struct BigEndian {
    bytes: [u8; 16],
    len: usize,
}

impl AsRef<[u8]> for BigEndian {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[16 - self.len..]
    }
}

/// FF1's `y`: at most 16 bytes for halves of up to 16 digits.
fn number_of(bytes: impl Iterator<Item = u8>) -> u128 {
    bytes.fold(0u128, |n, b| (n << 8) | u128::from(b))
}

impl Operations for Half {
    type Bytes = BigEndian;

    fn numeral_count(&self) -> usize {
        self.count as usize
    }

    fn to_be_bytes(&self, _radix: u32, b: usize) -> BigEndian {
        BigEndian {
            bytes: self.value.to_be_bytes(),
            len: b.min(16),
        }
    }

    fn add_mod_exp(self, other: impl Iterator<Item = u8>, _radix: u32, m: usize) -> Self {
        let modulus = POW[m];
        let y = number_of(other) % modulus;
        Self {
            value: (self.value % modulus + y) % modulus,
            count: m as u8,
        }
    }

    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, _radix: u32, m: usize) -> Self {
        let modulus = POW[m];
        let y = number_of(other) % modulus;
        Self {
            value: (self.value % modulus + modulus - y) % modulus,
            count: m as u8,
        }
    }
}

impl NumeralString for Digits {
    type Ops = Half;

    fn is_valid(&self, radix: u32) -> bool {
        let (u, v) = Self::split_at(self.count as usize);
        radix == 62 && v <= 16 && self.a < POW[u] && self.b < POW[v]
    }

    fn numeral_count(&self) -> usize {
        self.count as usize
    }

    fn split(&self) -> (Half, Half) {
        let (u, v) = Self::split_at(self.count as usize);
        (
            Half {
                value: self.a,
                count: u as u8,
            },
            Half {
                value: self.b,
                count: v as u8,
            },
        )
    }

    fn concat(a: Half, b: Half) -> Self {
        Self {
            a: a.value,
            b: b.value,
            count: a.count + b.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fpe::ff1::FlexibleNumeralString;
    use proptest::prelude::*;

    fn radix62(d: &Digits) -> Vec<u16> {
        d.to_code()
            .as_str()
            .bytes()
            .map(|c| digit_of(c).map(|d| d as u16).unwrap_or(u16::MAX))
            .collect()
    }

    proptest! {
        /// Our numeral string gives exactly what the crate's own general
        /// one gives, at every generated length.
        #[test]
        fn agrees_with_the_crates_numeral_strings(
            key in any::<[u8; 16]>(),
            id in any::<u64>(),
            length in MIN_GENERATED_LEN..=MAX_GENERATED_LEN,
        ) {
            let book = Codebook::new(&key, length);
            let Some(plain) = Digits::of_number(u128::from(id), length) else {
                // Only ids of more digits than the length have no code.
                prop_assert!(length <= 10 && u128::from(id) >= 62u128.pow(length as u32));
                return Ok(());
            };
            let ours = book.ff1.encrypt(&[], &plain).unwrap();
            let theirs: Vec<u16> = book
                .ff1
                .encrypt(&[], &FlexibleNumeralString::from(radix62(&plain)))
                .unwrap()
                .into();
            prop_assert_eq!(radix62(&ours), theirs);
            prop_assert_eq!(book.ff1.decrypt(&[], &ours).unwrap(), plain);
        }

        #[test]
        fn a_code_decrypts_to_its_id(key in any::<[u8; 16]>(), id in 0u64..1 << 40) {
            let book = Codebook::new(&key, 10);
            if let Some(code) = book.code_of(id) {
                prop_assert_eq!(code.as_str().len(), 10);
                prop_assert!(code.as_str().bytes().all(|b| b.is_ascii_alphanumeric()));
                prop_assert_eq!(book.id_of(code.as_str()), Some(id));
            }
        }

        /// The remembered decryption answers as the decryption itself, the
        /// first time and every time after, for codes of every kind.
        #[test]
        fn a_remembered_id_is_the_decrypted_one(
            key in any::<[u8; 16]>(),
            ids in proptest::collection::vec(0u64..1 << 40, 1..20),
            names in proptest::collection::vec("[A-Za-z0-9_-]{1,14}", 1..20),
        ) {
            let book = Codebook::new(&key, 10);
            let codes: Vec<ShortCode> = ids
                .iter()
                .filter_map(|id| book.code_of(*id))
                .chain(names.iter().filter_map(|n| ShortCode::parse(n).ok()))
                .collect();
            for _ in 0..2 {
                for code in &codes {
                    prop_assert_eq!(book.id_of_recent(code), book.id_of(code.as_str()));
                }
            }
        }
    }

    #[test]
    fn consecutive_ids_give_unrelated_codes_and_keys_differ() {
        let book = Codebook::new(&[7; 16], 10);
        let codes: Vec<String> = (1..=2000)
            .filter_map(|id| book.code_of(id))
            .map(|c| c.to_string())
            .collect();
        let mut unique = codes.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), codes.len(), "a permutation repeats nothing");
        // Neighbours share a first character about as often as random
        // strings do (1 in 62), not as counters do.
        let shared = codes.windows(2).filter(|w| w[0][..1] == w[1][..1]).count();
        assert!(shared < 100, "{shared} of 2000 neighbours share a prefix");
        let other = Codebook::new(&[8; 16], 10);
        let same = (1..=2000)
            .filter(|&id| book.code_of(id) == other.code_of(id))
            .count();
        assert_eq!(same, 0);
    }

    #[test]
    fn lengths_are_separate_permutations() {
        let book = Codebook::new(&[1; 16], 10);
        let code = book.code_of(42).unwrap();
        let short = Codebook::new(&[1; 16], 8).code_of(42).unwrap();
        assert_eq!(short.as_str().len(), 8);
        // Either book decodes a code at the code's own length.
        assert_eq!(Codebook::new(&[1; 16], 8).id_of(code.as_str()), Some(42));
        assert_eq!(book.id_of(short.as_str()), Some(42));
    }

    #[test]
    fn only_alphanumeric_codes_of_generated_lengths_decode() {
        let book = Codebook::new(&[3; 16], 10);
        for code in ["abc", "my-alias-1", "my_alias_1", &"a".repeat(33), "abcdé"] {
            assert_eq!(book.id_of(code), None, "{code}");
        }
        assert!(book.id_of("abcdef").is_some());
    }

    #[test]
    fn no_code_is_a_reserved_word() {
        // The ids that would encrypt to a reserved word have no code: they
        // are skipped, so that no route ever shadows a link.
        for length in [6, 7] {
            let book = Codebook::new(&[9; 16], length);
            let words: Vec<_> = crate::domain::code::RESERVED
                .iter()
                .filter(|w| w.len() == length && w.bytes().all(|b| b.is_ascii_alphanumeric()))
                .collect();
            assert!(!words.is_empty());
            for word in words {
                let id = book
                    .id_of(word)
                    .expect("a word of a generated length decodes");
                assert_eq!(book.code_of(id), None, "{word}");
                assert!(book.code_of(id + 1).is_some());
            }
        }
    }
}
