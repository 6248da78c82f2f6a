//! The name index: each named code (an alias, an imported code) on its
//! domain, with what a redirect needs of its link, in a hash table of
//! 128-byte buckets, so that a named code is resolved by reading one
//! bucket, as a generated code is by reading one slot (slots.rs).
//!
//! A bucket holds the code itself, its row id, the link's expiry and visit
//! limit, and its target when code and target fit in 80 bytes (a longer
//! target is read from SQLite by the row id). The table is a file without
//! a name, mapped beside the slots, with open addressing; a lookup hashes
//! (domain, code) with a key drawn at random for each index (SipHash, so
//! that nobody who picks aliases can pick collisions), walks the buckets
//! from the hash's place, and compares a candidate's code with the one
//! asked for, whole. A code the index does not hold is asked of SQLite, so
//! the index may hold fewer codes than the table (while it is built, or
//! past its limits) and never gives a wrong row.
//!
//! Only the writer thread writes, after the commit and before the reply,
//! as with the slots. A bucket, once given to a code, is that code's for
//! the table's life: a named row keeps its code, and a deleted row keeps
//! it as a tombstone. Each bucket is a sequence lock, as a slot is; its
//! hash word never changes after the bucket's first write. A table that is
//! 70% full is copied into one twice its size, which then replaces it; a
//! reader still on the old one reads what was true when it began. When the
//! slots are forgotten (another process wrote), the index starts again
//! empty.

use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use super::mapped::{BLOCK_BYTES, BLOCK_WORDS, Mapped, read_block as read, write_block};
use crate::domain::TargetUrl;

/// Bytes of one bucket: a block of the mapped file, as a slot.
const BUCKET_BYTES: u64 = BLOCK_BYTES;
const WORDS: usize = BLOCK_WORDS;
/// Words before the code's and the target's bytes.
const HEAD: usize = 6;
/// Bytes for the code and the target together.
const BYTES: usize = (WORDS - HEAD) * 8;
/// Buckets of a new table (1 MiB).
const FIRST_BUCKETS: u64 = 1 << 13;
/// A table is replaced by one twice its size when it is this full (of 10).
const MAX_LOAD_TENTHS: u64 = 7;

// Word 1: the state, flags, lengths and domain.
const STATE_MASK: u64 = 0b11;
/// A live link whose target is in the bucket.
const LIVE: u64 = 1;
/// A deleted link: the code names no link.
const GONE: u64 = 2;
/// A live link the bucket cannot answer for (a target too long for it, a
/// password or rules): read the row.
const LONG: u64 = 3;
const HAS_EXPIRY: u64 = 1 << 2;
const HAS_MAX: u64 = 1 << 3;
const CODE_LEN_SHIFT: u32 = 8;
const TARGET_LEN_SHIFT: u32 = 16;
const DOMAIN_SHIFT: u32 = 32;

/// What the index says of a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Named {
    /// The code's live link, whole.
    Live(NamedLink),
    /// The code's link was deleted.
    Gone,
    /// The code is this row's, whose target the bucket does not hold.
    Row(u64),
    /// The index does not hold the code: ask SQLite.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NamedLink {
    pub row: u64,
    pub target: TargetUrl,
    pub expires_at: Option<i64>,
    pub max_visits: Option<u64>,
}

/// What the writer puts in a code's bucket.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry<'a> {
    pub domain: i64,
    pub code: &'a str,
    pub row: i64,
    pub deleted: bool,
    pub target: &'a str,
    pub expires_at: Option<i64>,
    pub max_visits: Option<i64>,
    /// A password, rules or an expired target: the row is always read.
    pub has_extra: bool,
}

impl Named {
    /// The row the code is at, when the index holds it.
    pub(super) fn row(&self) -> Option<u64> {
        match self {
            Named::Live(l) => Some(l.row),
            Named::Row(row) => Some(*row),
            Named::Gone | Named::Unknown => None,
        }
    }
}

pub(super) struct Names {
    dir: PathBuf,
    table: ArcSwap<Table>,
}

impl Names {
    pub(super) fn create(dir: &Path) -> std::io::Result<Self> {
        let key = std::hash::RandomState::new();
        Ok(Self {
            dir: dir.to_owned(),
            table: ArcSwap::from_pointee(Table::create(dir, FIRST_BUCKETS, key)?),
        })
    }

    /// What the index says of `code` on `domain`.
    pub(super) fn find(&self, domain: i64, code: &str) -> Named {
        let Ok(domain) = u32::try_from(domain) else {
            return Named::Unknown;
        };
        self.table.load().find(domain, code.as_bytes())
    }

    /// Writes a code's bucket, adding the code if it is new (writer thread
    /// only). A code the index cannot hold (past its limits, or a full
    /// disk) is left out, and read from SQLite.
    pub(super) fn put(&self, e: &Entry<'_>) {
        let (Ok(domain), Ok(row)) = (u32::try_from(e.domain), u64::try_from(e.row)) else {
            return;
        };
        let code = e.code.as_bytes();
        if row == 0 || code.len() > BYTES || code.len() > usize::from(u8::MAX) {
            return;
        }
        let mut table = self.table.load_full();
        let hash = table.hash(domain, code);
        let at = match table.place_of(hash, domain, code) {
            Some(at) => at,
            None => {
                if (table.len() + 1) * 10 > table.buckets * MAX_LOAD_TENTHS {
                    match table.doubled(&self.dir) {
                        Ok(bigger) => {
                            let bigger = Arc::new(bigger);
                            self.table.store(Arc::clone(&bigger));
                            table = bigger;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the name index cannot grow; \
                                named codes past it are read from SQLite");
                            return;
                        }
                    }
                }
                table.len.fetch_add(1, Ordering::Relaxed);
                table.empty_place(hash)
            }
        };
        table.write(at, &encode(e, domain, row, hash));
    }

    /// Forgets every code (writer thread only): the index starts again,
    /// with a new hash key.
    pub(super) fn clear(&self) {
        match Table::create(&self.dir, FIRST_BUCKETS, std::hash::RandomState::new()) {
            Ok(table) => self.table.store(Arc::new(table)),
            Err(e) => {
                // An index that cannot start again empty would keep codes
                // that may no longer be their rows': it answers for none.
                tracing::warn!(error = %e, "the name index cannot be made again; \
                    named codes are read from SQLite");
                self.table.load().disable();
            }
        }
    }

    /// Codes held.
    pub(super) fn len(&self) -> u64 {
        self.table.load().len()
    }

    /// Bytes of the table's file.
    pub(super) fn bytes(&self) -> u64 {
        self.table.load().map.extent()
    }
}

/// One hash table of buckets.
struct Table {
    map: Mapped,
    /// A power of two.
    buckets: u64,
    /// Buckets given to a code (the writer only writes it).
    len: AtomicU64,
    /// Set when the table must no longer answer.
    disabled: std::sync::atomic::AtomicBool,
    key: std::hash::RandomState,
}

impl Table {
    fn create(dir: &Path, buckets: u64, key: std::hash::RandomState) -> std::io::Result<Self> {
        let bytes = buckets * BUCKET_BYTES;
        let map = Mapped::create(dir, bytes, "name index", false)?;
        if !map.cover(bytes, bytes) {
            return Err(std::io::Error::other("no room on disk for the name index"));
        }
        Ok(Self {
            map,
            buckets,
            len: AtomicU64::new(0),
            disabled: std::sync::atomic::AtomicBool::new(false),
            key,
        })
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    fn disable(&self) {
        self.disabled.store(true, Ordering::Release);
    }

    fn hash(&self, domain: u32, code: &[u8]) -> u64 {
        // Never 0, the hash word of a bucket never written.
        self.key.hash_one((domain, code)) | 1
    }

    fn bucket(&self, i: u64) -> &[AtomicU64; WORDS] {
        debug_assert!(i < self.buckets);
        self.map.block(i)
    }

    fn find(&self, domain: u32, code: &[u8]) -> Named {
        if self.disabled.load(Ordering::Acquire) {
            return Named::Unknown;
        }
        let hash = self.hash(domain, code);
        let mask = self.buckets - 1;
        let mut i = hash & mask;
        // Bounded: the table is never full, so a bucket never written ends
        // the walk.
        for _ in 0..self.buckets {
            let b = self.bucket(i);
            // The hash word is written before the bucket's first sequence
            // number is published, and never again.
            if b[0].load(Ordering::Acquire) == 0 {
                return Named::Unknown;
            }
            if b[2].load(Ordering::Relaxed) == hash {
                return match read(b) {
                    Some(words) if holds(&words, domain, code) => decode(&words),
                    Some(_) => {
                        i = (i + 1) & mask;
                        continue;
                    }
                    None => Named::Unknown,
                };
            }
            i = (i + 1) & mask;
        }
        Named::Unknown
    }

    /// The bucket of the code, if it has one (writer only).
    fn place_of(&self, hash: u64, domain: u32, code: &[u8]) -> Option<u64> {
        let mask = self.buckets - 1;
        let mut i = hash & mask;
        for _ in 0..self.buckets {
            let b = self.bucket(i);
            if b[0].load(Ordering::Relaxed) == 0 {
                return None;
            }
            if b[2].load(Ordering::Relaxed) == hash
                && let Some(words) = read(b)
                && holds(&words, domain, code)
            {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// The first bucket never written from `hash`'s place (writer only;
    /// the table is never full).
    fn empty_place(&self, hash: u64) -> u64 {
        let mask = self.buckets - 1;
        let mut i = hash & mask;
        while self.bucket(i)[0].load(Ordering::Relaxed) != 0 {
            i = (i + 1) & mask;
        }
        i
    }

    /// Writes the words of bucket `at` under its sequence lock (writer only).
    fn write(&self, at: u64, words: &[u64; WORDS]) {
        write_block(self.bucket(at), |b| {
            for (word, v) in b.iter().zip(words.iter()).skip(1) {
                word.store(*v, Ordering::Relaxed);
            }
        });
    }

    /// A table twice the size with the same buckets.
    fn doubled(&self, dir: &Path) -> std::io::Result<Table> {
        let bigger = Table::create(dir, self.buckets * 2, self.key.clone())?;
        for i in 0..self.buckets {
            let b = self.bucket(i);
            if b[0].load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut words = [0u64; WORDS];
            for (w, word) in words.iter_mut().zip(b.iter()) {
                *w = word.load(Ordering::Relaxed);
            }
            bigger.write(bigger.empty_place(words[2]), &words);
        }
        bigger.len.store(self.len(), Ordering::Relaxed);
        Ok(bigger)
    }
}

/// The bucket's code and target bytes.
fn bytes(words: &[u64; WORDS]) -> [u8; BYTES] {
    let mut bytes = [0u8; BYTES];
    for (i, w) in words[HEAD..].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    bytes
}

/// Whether the bucket is `code`'s on `domain`, compared whole.
fn holds(words: &[u64; WORDS], domain: u32, code: &[u8]) -> bool {
    let meta = words[1];
    let len = ((meta >> CODE_LEN_SHIFT) & 0xff) as usize;
    (meta >> DOMAIN_SHIFT) as u32 == domain && len == code.len() && &bytes(words)[..len] == code
}

fn encode(e: &Entry<'_>, domain: u32, row: u64, hash: u64) -> [u64; WORDS] {
    let code = e.code.as_bytes();
    let target = e.target.as_bytes();
    let fits = code.len() + target.len() <= BYTES;
    let state = match () {
        _ if e.deleted => GONE,
        _ if fits && !e.has_extra => LIVE,
        _ => LONG,
    };
    let mut words = [0u64; WORDS];
    let mut meta =
        state | ((code.len() as u64) << CODE_LEN_SHIFT) | (u64::from(domain) << DOMAIN_SHIFT);
    if let Some(x) = e.expires_at {
        meta |= HAS_EXPIRY;
        words[4] = x as u64;
    }
    if let Some(m) = e.max_visits {
        meta |= HAS_MAX;
        words[5] = m.max(0) as u64;
    }
    let mut bytes = [0u8; BYTES];
    bytes[..code.len()].copy_from_slice(code);
    if state == LIVE {
        meta |= (target.len() as u64) << TARGET_LEN_SHIFT;
        bytes[code.len()..code.len() + target.len()].copy_from_slice(target);
    }
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        words[HEAD + i] = u64::from_le_bytes(b);
    }
    words[1] = meta;
    words[2] = hash;
    words[3] = row;
    words
}

fn decode(words: &[u64; WORDS]) -> Named {
    let meta = words[1];
    let row = words[3];
    match meta & STATE_MASK {
        GONE => return Named::Gone,
        LIVE => {}
        _ => return Named::Row(row),
    }
    let code_len = ((meta >> CODE_LEN_SHIFT) & 0xff) as usize;
    let len = ((meta >> TARGET_LEN_SHIFT) & 0xffff) as usize;
    if code_len + len > BYTES {
        return Named::Row(row);
    }
    let bytes = bytes(words);
    let Ok(target) = std::str::from_utf8(&bytes[code_len..code_len + len]) else {
        return Named::Row(row);
    };
    Named::Live(NamedLink {
        row,
        target: TargetUrl::from_trusted(target),
        expires_at: (meta & HAS_EXPIRY != 0).then_some(words[4] as i64),
        max_visits: (meta & HAS_MAX != 0).then_some(words[5]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> (tempfile::TempDir, Names) {
        let dir = tempfile::tempdir().unwrap();
        let n = Names::create(dir.path()).unwrap();
        (dir, n)
    }

    fn entry<'a>(domain: i64, code: &'a str, row: i64, target: &'a str) -> Entry<'a> {
        Entry {
            domain,
            code,
            row,
            deleted: false,
            target,
            expires_at: None,
            max_visits: None,
            has_extra: false,
        }
    }

    fn live(row: u64, target: &str) -> Named {
        Named::Live(NamedLink {
            row,
            target: TargetUrl::from_trusted(target),
            expires_at: None,
            max_visits: None,
        })
    }

    #[test]
    fn a_code_is_found_on_its_domain_only_and_whole() {
        let (_d, n) = names();
        n.put(&entry(0, "spring", 7, "https://a.example/"));
        n.put(&entry(3, "spring", 9, "https://b.example/"));
        assert_eq!(n.find(0, "spring"), live(7, "https://a.example/"));
        assert_eq!(n.find(3, "spring"), live(9, "https://b.example/"));
        assert_eq!(n.find(1, "spring"), Named::Unknown);
        for other in ["sprin", "springs", "Spring", ""] {
            assert_eq!(n.find(0, other), Named::Unknown, "{other}");
        }
        // An edit rewrites the code's own bucket; a delete leaves it gone.
        n.put(&Entry {
            expires_at: Some(5),
            max_visits: Some(3),
            ..entry(0, "spring", 7, "https://c.example/")
        });
        assert_eq!(
            n.find(0, "spring"),
            Named::Live(NamedLink {
                row: 7,
                target: TargetUrl::from_trusted("https://c.example/"),
                expires_at: Some(5),
                max_visits: Some(3),
            })
        );
        n.put(&Entry {
            deleted: true,
            ..entry(3, "spring", 9, "")
        });
        assert_eq!(n.find(3, "spring"), Named::Gone);
        assert_eq!(n.len(), 2);
        // A target that does not fit beside its code: the row is named.
        let long = format!("https://example.com/{}", "a".repeat(BYTES));
        n.put(&entry(0, "long", 11, &long));
        assert_eq!(n.find(0, "long"), Named::Row(11));
        let exact = format!("https://e.com/{}", "x".repeat(BYTES - 14 - 5));
        n.put(&entry(0, "exact", 12, &exact));
        assert_eq!(n.find(0, "exact"), live(12, &exact));
        // A link with a password or rules: only its row says so.
        n.put(&Entry {
            has_extra: true,
            ..entry(0, "exact", 12, &exact)
        });
        assert_eq!(n.find(0, "exact"), Named::Row(12));
        // What the index cannot hold is left to SQLite.
        n.put(&entry(-1, "neg", 3, "https://a.example/"));
        n.put(&entry(0, "zero", 0, "https://a.example/"));
        assert_eq!(n.find(0, "zero"), Named::Unknown);
        n.clear();
        assert_eq!(n.find(0, "spring"), Named::Unknown);
        assert_eq!(n.len(), 0);
    }

    #[test]
    fn growing_keeps_every_code() {
        let (_d, n) = names();
        let count = FIRST_BUCKETS * 3;
        for i in 1..=count {
            n.put(&entry(
                (i % 3) as i64,
                &format!("code-{i}"),
                i as i64,
                &format!("https://e.example/{i}"),
            ));
        }
        assert_eq!(n.len(), count);
        assert!(n.table.load().buckets >= FIRST_BUCKETS * 4);
        for i in 1..=count {
            let code = format!("code-{i}");
            assert_eq!(
                n.find((i % 3) as i64, &code),
                live(i, &format!("https://e.example/{i}"))
            );
            assert_eq!(n.find(((i + 1) % 3) as i64, &code), Named::Unknown);
        }
    }

    /// Readers racing the writer, through growths and edits: a code is
    /// found whole at its own row with one of the targets written, or not
    /// at all; and one held before the race always.
    #[test]
    fn a_reader_never_finds_a_wrong_or_torn_bucket() {
        let (_d, n) = names();
        let n = Arc::new(n);
        let early = 1_000u64;
        let (a, b) = (
            "https://aaaaaaaaaaaaaaaaaaaaaaaaaaaa.example/",
            "https://b.example/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
        );
        for i in 1..=early {
            n.put(&entry(0, &format!("e{i}"), i as i64, a));
        }
        let hot = (early + 1_000_000) as i64;
        n.put(&entry(0, "hot", hot, a));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (n, stop) = (Arc::clone(&n), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut found = 0u64;
                    let mut i = r;
                    while !stop.load(Ordering::Relaxed) {
                        i = i % 200_000 + 1;
                        match n.find(0, &format!("c{i}")) {
                            Named::Live(l) => {
                                assert_eq!(l.row, i + early, "c{i}");
                                found += 1;
                            }
                            Named::Unknown => {}
                            other => panic!("c{i}: {other:?}"),
                        }
                        let e = i % early + 1;
                        assert!(
                            matches!(n.find(0, &format!("e{e}")), Named::Live(l) if l.row == e)
                        );
                        for _ in 0..8 {
                            match n.find(0, "hot") {
                                Named::Live(l) => {
                                    assert_eq!(l.row, early + 1_000_000);
                                    let t = l.target.as_str();
                                    assert!(t == a || t == b, "a torn target: {t}");
                                }
                                // Busy for every try: SQLite would be asked.
                                Named::Unknown => {}
                                other => panic!("hot: {other:?}"),
                            }
                        }
                        i += 7_919;
                    }
                    found
                })
            })
            .collect();
        for i in 1..=200_000u64 {
            n.put(&entry(0, &format!("c{i}"), (i + early) as i64, a));
            for t in [b, a] {
                n.put(&entry(0, "hot", hot, t));
            }
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    }
}
