//! Request ids: `x-request-id` taken from the request when it is a sane
//! token (a proxy in front may have set it), else made here. Every answer
//! carries it ([`super::finish`]).

use std::sync::atomic::{AtomicU64, Ordering};

use axum::http::{HeaderName, HeaderValue};

pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Longest id taken from a client; a longer one is replaced.
const MAX_ID_LEN: usize = 64;

/// Ids made here: a random per-process prefix and a counter, unique
/// without a random draw per request.
fn make() -> HeaderValue {
    // The prefix's hex digits and the dash, written once per process.
    static PREFIX: std::sync::LazyLock<[u8; 9]> = std::sync::LazyLock::new(|| {
        let mut p = [b'-'; 9];
        hex(u64::from(rand::random::<u32>()), &mut p[..8]);
        p
    });
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // Written in place: `format!` would allocate once more than the
    // header value's own copy.
    let mut id = [0u8; 8 + 1 + 16];
    id[..9].copy_from_slice(&*PREFIX);
    let digits = (64 - n.leading_zeros()).div_ceil(4).max(1) as usize;
    hex(n, &mut id[9..9 + digits]);
    // SAFETY: the id is hex digits and a '-', visible ASCII, which is
    // always a valid header value; skipping the check saves a pass over
    // it on every request that brings no id of its own.
    unsafe { HeaderValue::from_maybe_shared_unchecked(cut(&id[..9 + digits])) }
}

/// Ids are cut from a 4 KiB buffer per thread (each a reference to it),
/// not allocated one by one: the buffer is freed once its last id is.
fn cut(id: &[u8]) -> bytes::Bytes {
    thread_local! {
        static ARENA: std::cell::RefCell<bytes::BytesMut> = std::cell::RefCell::new(bytes::BytesMut::new());
    }
    ARENA.with_borrow_mut(|arena| {
        if arena.capacity() < id.len() {
            *arena = bytes::BytesMut::with_capacity(4096);
        }
        arena.extend_from_slice(id);
        arena.split().freeze()
    })
}

/// `n`'s lowest `out.len()` hex digits, zero-padded, into `out`.
fn hex(mut n: u64, out: &mut [u8]) {
    for b in out.iter_mut().rev() {
        *b = b"0123456789abcdef"[(n & 0xf) as usize];
        n >>= 4;
    }
}

/// The id of a request whose `x-request-id` is `sent`.
pub(crate) fn from(sent: Option<&HeaderValue>) -> HeaderValue {
    match sent {
        Some(v) if accept(v) => v.clone(),
        _ => make(),
    }
}

fn accept(v: &HeaderValue) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_ID_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b':' | b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_client_ids_are_checked() {
        let a = make();
        let b = make();
        assert_ne!(a, b);
        assert!(accept(&a));
        // Prefix, dash, the counter in hex without leading zeros.
        let (prefix, n) = a.to_str().unwrap().split_once('-').unwrap();
        assert_eq!(prefix.len(), 8);
        assert!(
            u64::from_str_radix(n, 16).is_ok() && !n.starts_with('0'),
            "{a:?}"
        );
        let mut buf = [0u8; 4];
        hex(0xab, &mut buf);
        assert_eq!(&buf, b"00ab");
        assert!(accept(&HeaderValue::from_static("req-123_abc.def")));
        assert!(!accept(&HeaderValue::from_static("has space")));
        assert!(!accept(&HeaderValue::from_static("")));
        let long = "a".repeat(MAX_ID_LEN + 1);
        assert!(!accept(&HeaderValue::from_str(&long).unwrap()));
    }
}
