//! A file without a name, mapped into memory, that grows on disk as it is
//! filled: the storage of the link slots and of the name index. Its pages
//! are the OS's file cache (`RssFile`), not the process's own memory, and
//! it goes with the process, so nothing in it outlives the run that built
//! it.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

/// Words of a block: a slot, or a bucket of the name index.
pub(super) const BLOCK_WORDS: usize = 16;
/// Bytes of a block: two cache lines, which the CPU fetches as a pair.
pub(super) const BLOCK_BYTES: u64 = BLOCK_WORDS as u64 * 8;
/// 128 bytes under a sequence lock in word 0: the writer makes it odd,
/// writes the other words and makes it even again; a reader copies them
/// between two reads of it and keeps the copy only if both saw the same
/// even value. Every word is an atomic, so a torn copy is detected, never
/// undefined.
pub(super) type Block = [AtomicU64; BLOCK_WORDS];
/// Copies a reader tries before it gives up (and asks SQLite instead).
const READ_TRIES: usize = 16;

/// A consistent copy of `b`'s words (word 0 its even sequence number), or
/// `None` if the writer kept it busy for every try.
pub(super) fn read_block(b: &Block) -> Option<[u64; BLOCK_WORDS]> {
    for _ in 0..READ_TRIES {
        let before = b[0].load(Ordering::Acquire);
        if before & 1 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let mut words = [0u64; BLOCK_WORDS];
        for (w, word) in words.iter_mut().zip(b.iter()).skip(1) {
            *w = word.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if b[0].load(Ordering::Relaxed) == before {
            words[0] = before;
            return Some(words);
        }
    }
    None
}

/// Changes `b`'s words with `f` under its sequence lock (one writer only).
pub(super) fn write_block(b: &Block, f: impl FnOnce(&Block)) {
    let seq = b[0].load(Ordering::Relaxed);
    b[0].store(seq.wrapping_add(1) | 1, Ordering::Relaxed);
    fence(Ordering::Release);
    f(b);
    b[0].store((seq | 1).wrapping_add(1), Ordering::Release);
}

pub(super) struct Mapped {
    base: NonNull<u8>,
    /// Bytes of address space reserved: the file never grows past them.
    reserved: u64,
    file: File,
    /// Bytes the file covers: nothing at or past them is ever touched.
    extent: AtomicU64,
    /// The file could not grow (a full disk). Logged once.
    stuck: AtomicBool,
    what: &'static str,
}

// SAFETY: the mapping is plain shared memory that stays mapped until
// `Mapped` is dropped; what is stored in it, and how it is shared, is its
// users' concern (atomics, or bytes written once before they are
// published).
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// An empty file in `dir` with `reserved` bytes of address space,
    /// mapped with huge pages where the kernel can (`huge`).
    pub(super) fn create(
        dir: &Path,
        reserved: u64,
        what: &'static str,
        huge: bool,
    ) -> std::io::Result<Self> {
        let file = unnamed_file(dir)?;
        // SAFETY: a new shared mapping of our own file, at an address the
        // kernel picks; nothing else refers to that range. Pages past the
        // file's end are never touched (`extent`).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_NORESERVE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| std::io::Error::other("mmap returned a null mapping"))?;
        // Huge pages where the kernel maps files with them (ext4 with large
        // folios, recent kernels): a lookup at random in a file of a GiB
        // then rarely misses the TLB. Only for files written in order (the
        // slots, by row id): a write at random dirties a whole huge page,
        // which the kernel then writes back (docs/benchmarks.md).
        if huge {
            // SAFETY: a hint about our own mapping, which cannot fail in a
            // way that matters: without huge pages it is mapped as before.
            unsafe {
                libc::madvise(ptr, reserved as usize, libc::MADV_HUGEPAGE);
            }
        }
        Ok(Self {
            base,
            reserved,
            file,
            extent: AtomicU64::new(0),
            stuck: AtomicBool::new(false),
            what,
        })
    }

    /// Bytes the file covers.
    pub(super) fn extent(&self) -> u64 {
        self.extent.load(Ordering::Acquire)
    }

    /// Block `i`, which the file must cover.
    pub(super) fn block(&self, i: u64) -> &Block {
        assert!(
            (i + 1) * BLOCK_BYTES <= self.extent(),
            "block {i} past the file"
        );
        // SAFETY: the block lies inside the mapping and inside the file
        // (which never shrinks), checked above; blocks are 8-byte aligned
        // (the mapping is page-aligned) and live as long as `self`; the
        // mapping is only ever read and written through these atomics.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add((i * BLOCK_BYTES) as usize)
                .cast::<Block>()
        }
    }

    /// Makes the file cover its first `end` bytes, growing it in steps of
    /// `step` bytes allocated on disk at once, so that a full disk fails
    /// the growth, not a write to the mapping (one thread only).
    pub(super) fn cover(&self, end: u64, step: u64) -> bool {
        let extent = self.extent.load(Ordering::Relaxed);
        if end <= extent {
            return true;
        }
        if end > self.reserved || self.stuck.load(Ordering::Relaxed) {
            return false;
        }
        let to = end.div_ceil(step).saturating_mul(step).min(self.reserved);
        // SAFETY: plain system call on our own descriptor.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                extent as libc::off_t,
                (to - extent) as libc::off_t,
            )
        };
        if rc != 0 {
            self.stuck.store(true, Ordering::Relaxed);
            tracing::warn!(
                error = %std::io::Error::from_raw_os_error(rc),
                bytes = extent,
                "the {} file cannot grow; what is past it is read from SQLite",
                self.what
            );
            return false;
        }
        self.extent.store(to, Ordering::Release);
        true
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`, unmapped once; no reference
        // into it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.reserved as usize);
        }
    }
}

/// A file without a name in `dir`: gone when the process is.
fn unnamed_file(dir: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir);
    match tmp {
        Ok(f) => Ok(f),
        // A file system without O_TMPFILE: a fresh name, unlinked at once.
        Err(_) => {
            let path = dir.join(format!(
                ".litelink-map-{}-{:016x}",
                std::process::id(),
                rand::random::<u64>()
            ));
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            std::fs::remove_file(&path)?;
            Ok(f)
        }
    }
}
