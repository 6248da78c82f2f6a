//! Link slots: what a lookup needs of each link, in a fixed slot of 128
//! bytes at its row id, in a file mapped into memory beside SQLite.
//!
//! A generated code decrypts to its row id (find.rs), so its slot is found
//! by one multiplication: one cache line at random where SQLite's B-tree
//! search costs about eight at ten million links (docs/benchmarks.md,
//! *Link slots*). A named code (an alias, an imported code) is found
//! through the name index (names.rs), which maps it to its row id. SQLite
//! stays the truth; the slots are a copy that only the writer thread
//! writes, after each commit and before the commit is answered, so a
//! client that was told of a change never reads an older slot. Readers
//! take a slot only when they can prove it is this code's row; in every
//! other case (a target longer than a slot holds, a slot not built yet, a
//! code the index does not hold) they ask SQLite as before.
//!
//! The file has no name (`O_TMPFILE` in the database's directory, or a
//! name unlinked at once): it is built anew from the table at every start,
//! in the writer's idle time, and reads go to SQLite until it is built. So
//! no crash, no restore of an older database and no other process can
//! leave a slot behind that does not match its row. A change made by
//! another process while the server runs (an operator's `sqlite3`, say)
//! is noticed within [`TICK`] through SQLite's `data_version`, and the
//! slots are then forgotten and built again.
//!
//! Concurrency: each slot is a sequence lock. The writer makes its counter
//! odd, writes the words, and makes it even again; a reader copies the
//! words between two reads of the counter and keeps the copy only if both
//! saw the same even value. Every word is an atomic, so a torn copy is
//! detected, never undefined.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rusqlite::Row;

use super::mapped::{BLOCK_BYTES, BLOCK_WORDS, Mapped, read_block, write_block};
use super::names::{Entry, Named, Names};
use crate::domain::{LinkKey, TargetUrl};

/// Bytes of one slot: a block of the mapped file.
pub(super) const SLOT_BYTES: usize = BLOCK_BYTES as usize;
const WORDS: usize = BLOCK_WORDS;
/// Words before the target's bytes.
const HEAD: usize = 7;
/// Longest target a slot holds; a longer one is read from SQLite.
pub(super) const TARGET_MAX: usize = (WORDS - HEAD) * 8;
/// Address space reserved for the mapping: 2^29 slots (536M row ids).
/// Only the part the file covers is ever touched.
const RESERVED_SLOTS: u64 = 1 << 29;
/// The file grows by this many slots (8 MiB) at a time, allocated on disk
/// at once so that a full disk fails the growth, not a write to the
/// mapping.
const GROW_SLOTS: u64 = 1 << 16;
/// How often the writer checks whether another process changed the
/// database (SQLite's `data_version` on the writer's connection).
pub(super) const TICK: Duration = Duration::from_millis(100);
/// Rows a build step copies before the writer looks at its queue again.
pub(super) const BUILD_STEP: i64 = 20_000;
// Slot word 1: the state and the lengths. State 0: never written: ask
// SQLite.
const STATE_MASK: u64 = 0b11;
/// A live generated link whose target fits.
const LIVE: u64 = 1;
/// A deleted generated link (a tombstone): its code names no link.
const GONE: u64 = 2;
/// A row the slot cannot answer for (named code, long target): ask SQLite.
const OTHER: u64 = 3;
const HAS_EXPIRY: u64 = 1 << 2;
const HAS_MAX: u64 = 1 << 3;
const HAS_OWNER: u64 = 1 << 4;
/// The row's code is named: the slot answers only through the name index.
const NAMED: u64 = 1 << 5;
/// A title or tags, which a management read reads from the row.
const HAS_LABELS: u64 = 1 << 6;
const CODE_LEN_SHIFT: u32 = 8;
const TARGET_LEN_SHIFT: u32 = 16;
/// The row's domain id, in the high half.
const DOMAIN_SHIFT: u32 = 32;

/// The columns [`Image::of_row`] reads, from `links`.
pub(super) const IMAGE_COLUMNS: &str = "id, length(code), named, deleted_at, target, created_at, \
     expires_at, max_visits, visits, owner, domain, CASE WHEN named THEN code END, \
     password IS NOT NULL OR rules IS NOT NULL OR expired_url IS NOT NULL, \
     title IS NOT NULL OR tags IS NOT NULL OR imported_visits > 0";

/// A row as its slot keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Image {
    pub id: i64,
    /// The length of the row's code: a generated row's code is the
    /// codebook's code of its id at that length.
    pub code_len: usize,
    /// The code is named (an alias, an imported code): not found by id.
    pub named: bool,
    pub deleted: bool,
    pub target: String,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub max_visits: Option<i64>,
    pub visits: i64,
    pub owner: Option<i64>,
    /// A password, rules or an expired target: never answered from a slot.
    pub has_extra: bool,
    /// A title or tags: a redirect is answered from the slot, a
    /// management read is not.
    pub has_labels: bool,
    pub domain: i64,
    /// A named row's code, for the name index.
    pub code: Option<String>,
}

impl Image {
    pub(super) fn of_row(r: &Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            id: r.get(0)?,
            code_len: r.get::<_, i64>(1)?.max(0) as usize,
            named: r.get(2)?,
            deleted: r.get::<_, Option<i64>>(3)?.is_some(),
            target: r.get(4)?,
            created_at: r.get(5)?,
            expires_at: r.get(6)?,
            max_visits: r.get(7)?,
            visits: r.get(8)?,
            owner: r.get(9)?,
            domain: r.get(10)?,
            code: r.get(11)?,
            has_extra: r.get(12)?,
            has_labels: r.get(13)?,
        })
    }
}

/// What a slot says of a code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Found {
    /// The code's live link.
    Live(Slot),
    /// The code was a link's, deleted: no link has it, and none can.
    Gone,
    /// The slot cannot tell: ask SQLite.
    Unknown,
}

/// What a redirect needs of a link, from the slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Lookup {
    Link(Resolved),
    /// The code was a link's, deleted.
    Gone,
    /// The slots cannot tell: ask SQLite, by this row id when known.
    Ask(Option<u64>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    pub target: TargetUrl,
    pub expires_at: Option<i64>,
    pub max_visits: Option<u64>,
}

/// A live link's fields, copied out of its slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Slot {
    /// Made once from the slot's bytes: the only copy a hit allocates.
    pub target: TargetUrl,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub max_visits: Option<u64>,
    pub visits: u64,
    pub has_owner: bool,
    pub has_labels: bool,
}

/// The mapped slot file, and the name index of the named rows. Shared by
/// the readers and the writer; only the writer thread calls the methods
/// that write.
pub(super) struct Slots {
    map: Mapped,
    /// Row ids below this have been copied (0: none yet; `u64::MAX`: all,
    /// and every later row as it is written).
    built: AtomicU64,
    names: Names,
    pub(super) stats: SlotStats,
}

#[derive(Debug, Default)]
pub(super) struct SlotStats {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub builds: AtomicU64,
    /// Milliseconds the last complete build took.
    pub build_ms: AtomicU64,
}

/// The `slots` object of `/stats`.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct SlotCounts {
    /// `building` (lookups read SQLite meanwhile) or `ready`.
    pub state: &'static str,
    /// Row ids whose slots are copied (all of them once `ready`).
    pub built_below: Option<u64>,
    /// Bytes of the slot file.
    pub file_bytes: u64,
    /// Named codes (aliases, imported codes) in the name index, and the
    /// bytes of its file.
    pub named_codes: u64,
    pub name_index_bytes: u64,
    /// Lookups a slot answered, and lookups it sent to SQLite.
    pub hits: u64,
    pub misses: u64,
    /// Times the slots were built from the table (once at start, again
    /// after another process changed the database).
    pub builds: u64,
    /// Milliseconds the last build took (null before the first is done).
    pub last_build_ms: Option<u64>,
}

impl Slots {
    /// An empty slot file in `dir`, mapped, and an empty name index.
    pub(super) fn create(dir: &Path) -> std::io::Result<Self> {
        Ok(Self {
            map: Mapped::create(dir, RESERVED_SLOTS * SLOT_BYTES as u64, "link slot", true)?,
            built: AtomicU64::new(0),
            names: Names::create(dir)?,
            stats: SlotStats::default(),
        })
    }

    /// Slots the file covers: a slot at or past it is never touched.
    fn extent(&self) -> u64 {
        self.map.extent() / SLOT_BYTES as u64
    }

    fn words(&self, id: u64) -> &[AtomicU64; WORDS] {
        self.map.block(id)
    }

    /// What the slots say of `key`, whose code decrypts to `id`: the slot
    /// of that row if it is this code's generated row, else that of the
    /// row the name index holds the code at. With the row id SQLite is
    /// best asked by when they cannot tell. For the link's whole record.
    pub(super) fn find(&self, id: Option<u64>, key: &LinkKey) -> (Found, Option<u64>) {
        let (code_len, domain) = (key.code.as_str().len(), key.domain.0);
        if let Some(id) = id {
            let found = self.read(id, Via::Id { code_len, domain });
            if found != Found::Unknown {
                return (self.counted(found), Some(id));
            }
        }
        match self.names.find(domain, key.code.as_str()) {
            Named::Gone => (self.counted(Found::Gone), None),
            Named::Unknown => (self.counted(Found::Unknown), id),
            named => {
                let row = named.row();
                let found = row.map_or(Found::Unknown, |row| {
                    self.read(row, Via::Name { code_len, domain })
                });
                (self.counted(found), row)
            }
        }
    }

    /// What a redirect needs of `key`, whose code decrypts to `id`: from
    /// its generated row's slot, or from its bucket in the name index
    /// (one read either way). Otherwise the row id SQLite is best asked by.
    pub(super) fn resolve(&self, id: Option<u64>, key: &LinkKey) -> Lookup {
        let (code_len, domain) = (key.code.as_str().len(), key.domain.0);
        let found = match id.map(|id| self.read(id, Via::Id { code_len, domain })) {
            Some(Found::Live(slot)) => Lookup::Link(Resolved {
                target: slot.target,
                expires_at: slot.expires_at,
                max_visits: slot.max_visits,
            }),
            Some(Found::Gone) => Lookup::Gone,
            Some(Found::Unknown) | None => match self.names.find(domain, key.code.as_str()) {
                Named::Live(l) => Lookup::Link(Resolved {
                    target: l.target,
                    expires_at: l.expires_at,
                    max_visits: l.max_visits,
                }),
                Named::Gone => Lookup::Gone,
                Named::Row(row) => Lookup::Ask(Some(row)),
                Named::Unknown => Lookup::Ask(id),
            },
        };
        let counter = match found {
            Lookup::Ask(_) => &self.stats.misses,
            _ => &self.stats.hits,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn counted(&self, found: Found) -> Found {
        let counter = match found {
            Found::Unknown => &self.stats.misses,
            _ => &self.stats.hits,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    fn read(&self, id: u64, via: Via) -> Found {
        if id >= self.built.load(Ordering::Acquire) || id >= self.extent() {
            return Found::Unknown;
        }
        match read_block(self.words(id)) {
            Some(words) => decode(words[1], &words, via),
            None => Found::Unknown,
        }
    }

    /// Writes `image` into its slot, and a named row's code into the name
    /// index (writer thread only).
    pub(super) fn put(&self, image: &Image) {
        let Ok(id) = u64::try_from(image.id) else {
            return;
        };
        if !self
            .map
            .cover((id + 1) * SLOT_BYTES as u64, GROW_SLOTS * SLOT_BYTES as u64)
        {
            return;
        }
        let (meta, words) = encode(image);
        self.write(id, |w| {
            w[1].store(meta, Ordering::Relaxed);
            for (word, v) in w.iter().zip(words.iter()).skip(2) {
                word.store(*v, Ordering::Relaxed);
            }
        });
        // After the slot: a reader the index leads to this row finds it
        // written.
        if let Some(code) = &image.code {
            self.names.put(&Entry {
                domain: image.domain,
                code,
                row: image.id,
                deleted: image.deleted,
                target: &image.target,
                expires_at: image.expires_at,
                max_visits: image.max_visits,
                has_extra: image.has_extra,
            });
        }
    }

    /// Adds `n` visits to the count in row `id`'s slot (writer thread
    /// only), as the commit did to the row.
    pub(super) fn add_visits(&self, id: i64, n: i64) {
        let Ok(id) = u64::try_from(id) else {
            return;
        };
        if id >= self.extent() {
            return;
        }
        self.write(id, |w| {
            let v = w[5].load(Ordering::Relaxed) as i64;
            w[5].store(v.saturating_add(n).max(0) as u64, Ordering::Relaxed);
        });
    }

    fn write(&self, id: u64, f: impl FnOnce(&[AtomicU64; WORDS])) {
        write_block(self.words(id), f);
    }

    /// Row ids below `id` are copied: readers may trust their slots.
    pub(super) fn built_below(&self, id: u64) {
        self.built.store(id, Ordering::Release);
    }

    /// Every slot is untrusted until built again, and the name index
    /// starts empty (writer thread only).
    pub(super) fn forget(&self) {
        self.built.store(0, Ordering::Release);
        self.names.clear();
    }

    pub(super) fn counts(&self) -> SlotCounts {
        let built = self.built.load(Ordering::Relaxed);
        SlotCounts {
            state: if built == u64::MAX {
                "ready"
            } else {
                "building"
            },
            built_below: (built != u64::MAX).then_some(built),
            file_bytes: self.map.extent(),
            named_codes: self.names.len(),
            name_index_bytes: self.names.bytes(),
            hits: self.stats.hits.load(Ordering::Relaxed),
            misses: self.stats.misses.load(Ordering::Relaxed),
            builds: self.stats.builds.load(Ordering::Relaxed),
            last_build_ms: (self.stats.builds.load(Ordering::Relaxed) > 0)
                .then(|| self.stats.build_ms.load(Ordering::Relaxed)),
        }
    }
}

fn encode(image: &Image) -> (u64, [u64; WORDS]) {
    let mut words = [0u64; WORDS];
    let target = image.target.as_bytes();
    let domain = u32::try_from(image.domain).ok();
    let state = match () {
        _ if image.code_len > 0xff || domain.is_none() => OTHER,
        _ if image.deleted => GONE,
        _ if target.len() > TARGET_MAX || image.has_extra => OTHER,
        _ => LIVE,
    };
    let mut meta = state
        | ((image.code_len as u64 & 0xff) << CODE_LEN_SHIFT)
        | (u64::from(domain.unwrap_or(0)) << DOMAIN_SHIFT);
    if image.named {
        meta |= NAMED;
    }
    if state == LIVE {
        meta |= (target.len() as u64) << TARGET_LEN_SHIFT;
        if let Some(e) = image.expires_at {
            meta |= HAS_EXPIRY;
            words[3] = e as u64;
        }
        if let Some(m) = image.max_visits {
            meta |= HAS_MAX;
            words[4] = m.max(0) as u64;
        }
        if let Some(o) = image.owner {
            meta |= HAS_OWNER;
            words[6] = o as u64;
        }
        if image.has_labels {
            meta |= HAS_LABELS;
        }
        words[2] = image.created_at as u64;
        words[5] = image.visits.max(0) as u64;
        for (i, chunk) in target.chunks(8).enumerate() {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            words[HEAD + i] = u64::from_le_bytes(b);
        }
    }
    (meta, words)
}

/// How a reader came to a slot, and so what the slot must hold to be the
/// code's row.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// The code decrypts to the row's id: a generated row whose code has
    /// this length is this code's (the codebook is a bijection per length).
    Id { code_len: usize, domain: i64 },
    /// The name index found the code, compared whole, at this row.
    Name { code_len: usize, domain: i64 },
}

fn decode(meta: u64, words: &[u64; WORDS], via: Via) -> Found {
    let (code_len, domain, named) = match via {
        Via::Id { code_len, domain } => (code_len, domain, false),
        Via::Name { code_len, domain } => (code_len, domain, true),
    };
    if (meta >> CODE_LEN_SHIFT) & 0xff != code_len as u64
        || (meta >> DOMAIN_SHIFT) as i64 != domain
        || (meta & NAMED != 0) != named
    {
        // Another length's code that decrypts to the same id, this code on
        // another domain, or a named row reached by its id: not this
        // code's row, but maybe a named one.
        return Found::Unknown;
    }
    match meta & STATE_MASK {
        GONE => return Found::Gone,
        LIVE => {}
        _ => return Found::Unknown,
    }
    let len = ((meta >> TARGET_LEN_SHIFT) & 0xffff) as usize;
    if len > TARGET_MAX {
        return Found::Unknown;
    }
    let mut bytes = [0u8; TARGET_MAX];
    for (i, w) in words[HEAD..].iter().enumerate() {
        bytes[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    let Ok(target) = std::str::from_utf8(&bytes[..len]) else {
        return Found::Unknown;
    };
    Found::Live(Slot {
        target: TargetUrl::from_trusted(target),
        created_at: words[2] as i64,
        expires_at: (meta & HAS_EXPIRY != 0).then_some(words[3] as i64),
        max_visits: (meta & HAS_MAX != 0).then_some(words[4]),
        visits: words[5],
        has_owner: meta & HAS_OWNER != 0,
        has_labels: meta & HAS_LABELS != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(id: i64, target: &str) -> Image {
        Image {
            id,
            code_len: 7,
            named: false,
            deleted: false,
            target: target.into(),
            created_at: 1_700_000_000_000,
            expires_at: Some(1_800_000_000_000),
            max_visits: Some(5),
            visits: 2,
            owner: None,
            has_extra: false,
            has_labels: false,
            domain: 0,
            code: None,
        }
    }

    /// What the slot of row `id` says of a code of `len` characters on
    /// `domain` that decrypts to it.
    fn by_id(s: &Slots, id: u64, len: usize, domain: i64) -> Found {
        s.read(
            id,
            Via::Id {
                code_len: len,
                domain,
            },
        )
    }

    fn key(domain: i64, code: &str) -> LinkKey {
        LinkKey::new(
            crate::domain::DomainId(domain),
            crate::domain::ShortCode::parse(code).unwrap(),
        )
    }

    /// A named row is found by its code through the name index, never by
    /// the id its code may decrypt to, and only on its domain.
    #[test]
    fn a_named_row_is_found_by_its_code() {
        let (_d, s) = slots();
        let named = Image {
            named: true,
            code_len: 6,
            domain: 2,
            code: Some("spring".into()),
            ..image(12, "https://spring.example/")
        };
        s.put(&named);
        let (found, row) = s.find(None, &key(2, "spring"));
        assert!(
            matches!(found, Found::Live(ref l) if l.target.as_str() == "https://spring.example/")
        );
        assert_eq!(row, Some(12));
        // A redirect reads the code's bucket alone.
        assert_eq!(
            s.resolve(None, &key(2, "spring")),
            Lookup::Link(Resolved {
                target: TargetUrl::from_trusted("https://spring.example/"),
                expires_at: Some(1_800_000_000_000),
                max_visits: Some(5),
            })
        );
        // Reached by its id, a named row is not the code's.
        assert_eq!(by_id(&s, 12, 6, 2), Found::Unknown);
        assert_eq!(
            s.find(Some(12), &key(0, "spring")),
            (Found::Unknown, Some(12))
        );
        assert_eq!(s.find(None, &key(2, "sprinG")), (Found::Unknown, None));
        // Deleted, it is gone; with a target too long for its slot, SQLite
        // is asked by its row id.
        s.put(&Image {
            deleted: true,
            ..named.clone()
        });
        assert_eq!(s.find(None, &key(2, "spring")), (Found::Gone, None));
        assert_eq!(s.resolve(None, &key(2, "spring")), Lookup::Gone);
        let too_long = format!("https://example.com/{}", "a".repeat(TARGET_MAX));
        s.put(&Image {
            target: too_long,
            ..named.clone()
        });
        assert_eq!(s.find(None, &key(2, "spring")), (Found::Unknown, Some(12)));
        assert_eq!(s.resolve(None, &key(2, "spring")), Lookup::Ask(Some(12)));
        // A password or rules: SQLite is asked, by id or by name.
        s.put(&Image {
            has_extra: true,
            ..named.clone()
        });
        assert_eq!(s.resolve(None, &key(2, "spring")), Lookup::Ask(Some(12)));
        s.put(&Image {
            has_extra: true,
            ..image(5, "https://a.example/")
        });
        assert_eq!(by_id(&s, 5, 7, 0), Found::Unknown);
        s.forget();
        s.built_below(u64::MAX);
        assert_eq!(s.find(None, &key(2, "spring")), (Found::Unknown, None));
    }

    fn slots() -> (tempfile::TempDir, Slots) {
        let dir = tempfile::tempdir().unwrap();
        let s = Slots::create(dir.path()).unwrap();
        s.built_below(u64::MAX);
        (dir, s)
    }

    #[test]
    fn a_slot_gives_back_what_was_put() {
        let (_d, s) = slots();
        let long = format!("https://example.com/{}", "a".repeat(TARGET_MAX - 20));
        assert_eq!(long.len(), TARGET_MAX);
        for (id, target) in [(1, "https://a.example/"), (3_000_000, long.as_str())] {
            s.put(&image(id, target));
            assert_eq!(
                by_id(&s, id as u64, 7, 0),
                Found::Live(Slot {
                    target: TargetUrl::from_trusted(target),
                    created_at: 1_700_000_000_000,
                    expires_at: Some(1_800_000_000_000),
                    max_visits: Some(5),
                    visits: 2,
                    has_owner: false,
                    has_labels: false,
                })
            );
        }
        s.add_visits(1, 3);
        let Found::Live(slot) = by_id(&s, 1, 7, 0) else {
            panic!("not live")
        };
        assert_eq!(slot.visits, 5);
        // Nothing else was put: another id, or a code of another length
        // decrypting to this id, is left to SQLite.
        assert_eq!(by_id(&s, 2, 7, 0), Found::Unknown);
        assert_eq!(by_id(&s, 1, 8, 0), Found::Unknown);
        assert_eq!(by_id(&s, 5_000_000, 7, 0), Found::Unknown);
        // The same code on another domain is not this row's.
        assert_eq!(by_id(&s, 1, 7, 2), Found::Unknown);
        s.put(&Image {
            domain: 2,
            ..image(4, "https://b.example/")
        });
        assert!(matches!(by_id(&s, 4, 7, 2), Found::Live(_)));
        assert_eq!(by_id(&s, 4, 7, 0), Found::Unknown);
    }

    #[test]
    fn what_a_slot_cannot_answer_goes_to_sqlite() {
        let (_d, s) = slots();
        let too_long = format!("https://example.com/{}", "a".repeat(TARGET_MAX));
        s.put(&image(1, &too_long));
        assert_eq!(by_id(&s, 1, 7, 0), Found::Unknown);
        s.put(&Image {
            named: true,
            ..image(2, "https://a.example/")
        });
        assert_eq!(by_id(&s, 2, 7, 0), Found::Unknown);
        s.put(&Image {
            deleted: true,
            ..image(3, "")
        });
        assert_eq!(by_id(&s, 3, 7, 0), Found::Gone);
        // An edit back to a short target makes it answerable again.
        s.put(&image(1, "https://b.example/"));
        assert!(matches!(by_id(&s, 1, 7, 0), Found::Live(_)));
        // Forgotten: nothing is trusted until built again.
        s.forget();
        assert_eq!(by_id(&s, 1, 7, 0), Found::Unknown);
        s.built_below(2);
        assert!(matches!(by_id(&s, 1, 7, 0), Found::Live(_)));
        assert_eq!(by_id(&s, 3, 7, 0), Found::Unknown);
    }

    /// A reader racing the writer sees one of the images written, whole,
    /// never a mix of two.
    #[test]
    fn a_reader_never_sees_half_a_write() {
        let (_d, s) = slots();
        let s = std::sync::Arc::new(s);
        let a = image(9, "https://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example/");
        let b = Image {
            expires_at: None,
            max_visits: None,
            visits: 7,
            ..image(
                9,
                "https://b.example/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
            )
        };
        s.put(&a);
        let expect = |i: &Image| Slot {
            target: TargetUrl::from_trusted(&i.target),
            created_at: i.created_at,
            expires_at: i.expires_at,
            max_visits: i.max_visits.map(|m| m as u64),
            visits: i.visits as u64,
            has_owner: false,
            has_labels: false,
        };
        let (ea, eb) = (expect(&a), expect(&b));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (s, stop) = (std::sync::Arc::clone(&s), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seen = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    match by_id(&s, 9, 7, 0) {
                        Found::Live(slot) => {
                            assert!(slot == ea || slot == eb, "a torn read: {slot:?}");
                            seen += 1;
                        }
                        Found::Unknown => {}
                        Found::Gone => panic!("never written"),
                    }
                }
                seen
            })
        };
        for i in 0..200_000 {
            s.put(if i % 2 == 0 { &b } else { &a });
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
    }
}
