//! The name index: each named code (an alias, an imported code) on its
//! domain, to its row id, so that its slot is found without SQLite's
//! B-tree search (slots.rs).
//!
//! Two files without a name, mapped beside the slots:
//! - the codes, appended one after the other: the domain (4 bytes), the
//!   length (1 byte) and the code's bytes, 8-byte aligned;
//! - a hash table of 16-byte entries with open addressing: the row id and
//!   half of the hash in one word, the other half and where the code is
//!   in the other.
//!
//! A lookup hashes (domain, code) with a key drawn at random for each
//! index (SipHash, so that nobody who picks aliases can pick collisions),
//! walks the table from the hash's place, and compares a candidate's code
//! with the one asked for, whole: the index says a code is at a row only
//! if the row's code is exactly that one. A code it does not hold is
//! asked of SQLite, so the index may hold fewer codes than the table
//! (while it is built, or past its limits) and never gives a wrong row.
//!
//! Only the writer thread writes. Entries are never changed once written:
//! a named row keeps its code, and a deleted row its code too (as a
//! tombstone). The writer writes a code's bytes and the entry's second
//! word before it publishes the first with a release store; a reader
//! that sees the first word with an acquire load sees the rest. A table
//! that is 70% full is copied into one twice its size, which then replaces
//! it; a reader still on the old one may miss a code added since, and asks
//! SQLite. When the slots are forgotten, the index starts again empty.

use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

use super::mapped::Mapped;

/// Entries of a new table (1 MiB).
const FIRST_ENTRIES: u64 = 1 << 16;
/// A table is replaced by one twice its size when it is this full (of 10).
const MAX_LOAD_TENTHS: u64 = 7;
/// Bytes of one entry.
const ENTRY_BYTES: u64 = 16;
/// Address space reserved for the codes: 32 GiB, all that an entry's
/// 32-bit offset in 8-byte units reaches.
const CODES_RESERVED: u64 = 1 << 35;
/// The codes' file grows by this much at a time.
const CODES_GROW: u64 = 1 << 22;
/// Bytes before a code's own: the domain and the length.
const CODE_HEAD: usize = 5;

pub(super) struct Names {
    dir: PathBuf,
    table: ArcSwap<Table>,
}

impl Names {
    pub(super) fn create(dir: &Path) -> std::io::Result<Self> {
        let codes = Arc::new(Codes::create(dir)?);
        Ok(Self {
            dir: dir.to_owned(),
            table: ArcSwap::from_pointee(Table::create(dir, FIRST_ENTRIES, codes)?),
        })
    }

    /// The row whose named code on `domain` is `code`, if the index holds
    /// it.
    pub(super) fn find(&self, domain: i64, code: &str) -> Option<u64> {
        let domain = u32::try_from(domain).ok()?;
        self.table.load().find(domain, code.as_bytes())
    }

    /// Adds `code` on `domain` at row `id` (writer thread only). A code the
    /// index cannot hold (past its limits, or a full disk) is left out.
    pub(super) fn insert(&self, domain: i64, code: &str, id: u64) {
        let (Ok(domain), Ok(row)) = (u32::try_from(domain), u32::try_from(id)) else {
            return;
        };
        if row == 0 || code.len() > usize::from(u8::MAX) {
            return;
        }
        let mut table = self.table.load_full();
        let code = code.as_bytes();
        if table.find(domain, code).is_some() {
            return;
        }
        if (table.len() + 1) * 10 > table.entries * MAX_LOAD_TENTHS {
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
        let hash = table.codes.hash(domain, code);
        if let Some(at) = table.codes.append(domain, code) {
            table.put(hash, row, at);
        }
    }

    /// Forgets every code (writer thread only): the index starts again,
    /// with a new hash key.
    pub(super) fn clear(&self) {
        match Codes::create(&self.dir)
            .and_then(|codes| Table::create(&self.dir, FIRST_ENTRIES, Arc::new(codes)))
        {
            Ok(table) => self.table.store(Arc::new(table)),
            Err(e) => {
                // An index that cannot start again empty would keep codes
                // that may no longer be their rows': it holds none instead.
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

    /// Bytes of the table's and the codes' files.
    pub(super) fn bytes(&self) -> u64 {
        let t = self.table.load();
        t.map.extent() + t.codes.map.extent()
    }
}

/// One hash table, over the codes it shares with the tables it is copied
/// into.
struct Table {
    map: Mapped,
    /// A power of two.
    entries: u64,
    /// Entries written (writer only writes it).
    len: AtomicU64,
    /// Set when the table must no longer answer.
    disabled: std::sync::atomic::AtomicBool,
    codes: Arc<Codes>,
}

impl Table {
    fn create(dir: &Path, entries: u64, codes: Arc<Codes>) -> std::io::Result<Self> {
        let bytes = entries * ENTRY_BYTES;
        let map = Mapped::create(dir, bytes, "name index")?;
        if !map.cover(bytes, bytes) {
            return Err(std::io::Error::other("no room on disk for the name index"));
        }
        Ok(Self {
            map,
            entries,
            len: AtomicU64::new(0),
            disabled: std::sync::atomic::AtomicBool::new(false),
            codes,
        })
    }

    fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    fn disable(&self) {
        self.disabled.store(true, Ordering::Release);
    }

    fn entry(&self, i: u64) -> &[AtomicU64; 2] {
        debug_assert!(i < self.entries);
        // SAFETY: `i` is below `entries`, and the file covers every entry
        // from creation on; entries are 16-byte aligned in a page-aligned
        // mapping that lives as long as `self`, and only ever accessed as
        // atomics.
        unsafe {
            &*self
                .map
                .base()
                .add((i * ENTRY_BYTES) as usize)
                .cast::<[AtomicU64; 2]>()
        }
    }

    fn find(&self, domain: u32, code: &[u8]) -> Option<u64> {
        if self.disabled.load(Ordering::Acquire) {
            return None;
        }
        let hash = self.codes.hash(domain, code);
        let mask = self.entries - 1;
        let mut i = (hash >> 32) & mask;
        // Bounded: the table is never full, so an empty entry ends it.
        for _ in 0..self.entries {
            let e = self.entry(i);
            let first = e[0].load(Ordering::Acquire);
            if first == 0 {
                return None;
            }
            if first as u32 == hash as u32 {
                let second = e[1].load(Ordering::Relaxed);
                if second >> 32 == hash >> 32 && self.codes.holds(second as u32, domain, code) {
                    return Some(first >> 32);
                }
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Writes an entry for the code at `at` (in 8-byte units) at `row`.
    fn put(&self, hash: u64, row: u32, at: u32) {
        let first = (u64::from(row) << 32) | (hash & 0xffff_ffff);
        let second = (hash & !0xffff_ffff) | u64::from(at);
        self.place(first, second);
    }

    fn place(&self, first: u64, second: u64) {
        let mask = self.entries - 1;
        let mut i = (second >> 32) & mask;
        while self.entry(i)[0].load(Ordering::Relaxed) != 0 {
            i = (i + 1) & mask;
        }
        let e = self.entry(i);
        e[1].store(second, Ordering::Relaxed);
        e[0].store(first, Ordering::Release);
        self.len.fetch_add(1, Ordering::Relaxed);
    }

    /// A table twice the size with the same entries.
    fn doubled(&self, dir: &Path) -> std::io::Result<Table> {
        let bigger = Table::create(dir, self.entries * 2, Arc::clone(&self.codes))?;
        for i in 0..self.entries {
            let e = self.entry(i);
            let first = e[0].load(Ordering::Relaxed);
            if first != 0 {
                bigger.place(first, e[1].load(Ordering::Relaxed));
            }
        }
        Ok(bigger)
    }
}

/// The codes, appended one after the other, and the key they are hashed
/// with.
struct Codes {
    map: Mapped,
    /// Bytes written (writer only).
    end: AtomicU64,
    key: std::hash::RandomState,
}

impl Codes {
    fn create(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            map: Mapped::create(dir, CODES_RESERVED, "name index")?,
            end: AtomicU64::new(0),
            key: std::hash::RandomState::new(),
        })
    }

    fn hash(&self, domain: u32, code: &[u8]) -> u64 {
        self.key.hash_one((domain, code))
    }

    /// Appends a code; where it is, in 8-byte units.
    fn append(&self, domain: u32, code: &[u8]) -> Option<u32> {
        let at = self.end.load(Ordering::Relaxed);
        let len = (CODE_HEAD + code.len()) as u64;
        let unit = u32::try_from(at / 8).ok()?;
        if !self.map.cover(at + len, CODES_GROW) {
            return None;
        }
        let mut record = Vec::with_capacity(len as usize);
        record.extend_from_slice(&domain.to_le_bytes());
        record.push(code.len() as u8);
        record.extend_from_slice(code);
        // SAFETY: the file covers `at..at + len`, past every code already
        // published, so no reader looks at these bytes until an entry
        // naming them is published (with a release store) after this.
        unsafe {
            std::ptr::copy_nonoverlapping(
                record.as_ptr(),
                self.map.base().add(at as usize),
                record.len(),
            );
        }
        self.end
            .store((at + len).next_multiple_of(8), Ordering::Relaxed);
        Some(unit)
    }

    /// Whether the code at `unit` is `code` on `domain`.
    fn holds(&self, unit: u32, domain: u32, code: &[u8]) -> bool {
        let at = u64::from(unit) * 8;
        let len = (CODE_HEAD + code.len()) as u64;
        if at + len > self.map.extent() {
            return false;
        }
        // SAFETY: a published entry names this code, whose bytes were
        // written before the entry (release/acquire) and are never written
        // again; the range is inside the file. If the stored code is
        // shorter, the range reaches into later codes, which may be being
        // written: so only the head is read before the length is known.
        let head =
            unsafe { std::slice::from_raw_parts(self.map.base().add(at as usize), CODE_HEAD) };
        if head[..4] != domain.to_le_bytes() || usize::from(head[4]) != code.len() {
            return false;
        }
        // SAFETY: as above, now that the stored code is known to have this
        // length.
        let stored = unsafe {
            std::slice::from_raw_parts(self.map.base().add(at as usize + CODE_HEAD), code.len())
        };
        stored == code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> (tempfile::TempDir, Names) {
        let dir = tempfile::tempdir().unwrap();
        let n = Names::create(dir.path()).unwrap();
        (dir, n)
    }

    #[test]
    fn a_code_is_found_on_its_domain_only_and_whole() {
        let (_d, n) = names();
        n.insert(0, "spring", 7);
        n.insert(3, "spring", 9);
        assert_eq!(n.find(0, "spring"), Some(7));
        assert_eq!(n.find(3, "spring"), Some(9));
        assert_eq!(n.find(1, "spring"), None);
        for other in ["sprin", "springs", "Spring", ""] {
            assert_eq!(n.find(0, other), None, "{other}");
        }
        // A code held already keeps its row.
        n.insert(0, "spring", 8);
        assert_eq!(n.find(0, "spring"), Some(7));
        assert_eq!(n.len(), 2);
        // What the index cannot hold is left to SQLite.
        n.insert(0, "far", u64::from(u32::MAX) + 1);
        n.insert(-1, "neg", 3);
        n.insert(0, "zero", 0);
        assert_eq!(n.find(0, "far"), None);
        assert_eq!(n.find(0, "zero"), None);
        n.clear();
        assert_eq!(n.find(0, "spring"), None);
        assert_eq!(n.len(), 0);
    }

    #[test]
    fn growing_keeps_every_code() {
        let (_d, n) = names();
        let count = FIRST_ENTRIES * 3;
        for i in 1..=count {
            n.insert((i % 3) as i64, &format!("code-{i}"), i);
        }
        assert_eq!(n.len(), count);
        assert!(n.table.load().entries >= FIRST_ENTRIES * 4);
        for i in 1..=count {
            assert_eq!(n.find((i % 3) as i64, &format!("code-{i}")), Some(i));
            assert_eq!(n.find(((i + 1) % 3) as i64, &format!("code-{i}")), None);
        }
    }

    /// Readers racing the writer, through growths: a code is found at its
    /// own row or not at all, and one held before the race always.
    #[test]
    fn a_reader_never_finds_a_wrong_row() {
        let (_d, n) = names();
        let n = Arc::new(n);
        let early = 1_000u64;
        for i in 1..=early {
            n.insert(0, &format!("e{i}"), i);
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (n, stop) = (Arc::clone(&n), Arc::clone(&stop));
                std::thread::spawn(move || {
                    let mut found = 0u64;
                    let mut i = r;
                    while !stop.load(Ordering::Relaxed) {
                        i = i % 400_000 + 1;
                        if let Some(row) = n.find(0, &format!("c{i}")) {
                            assert_eq!(row, i + early, "c{i}");
                            found += 1;
                        }
                        let e = i % early + 1;
                        assert_eq!(n.find(0, &format!("e{e}")), Some(e));
                        i += 7_919;
                    }
                    found
                })
            })
            .collect();
        for i in 1..=400_000u64 {
            n.insert(0, &format!("c{i}"), i + early);
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            assert!(r.join().unwrap() > 0);
        }
    }
}
