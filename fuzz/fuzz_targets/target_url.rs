//! The URL canonicalizer: whatever is accepted is stored in a form that
//! parses back to itself and is a valid `Location` header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use litelink_service::domain::{MAX_URL_BYTES, TargetPolicy, TargetUrl};

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(url) = TargetUrl::parse(raw) else {
        return;
    };
    let stored = url.as_str();
    assert!(stored.len() <= MAX_URL_BYTES, "{stored}");
    assert!(
        stored.bytes().all(|b| (0x21..0x7f).contains(&b)),
        "not a header value: {stored:?}"
    );
    let again = TargetUrl::parse(stored).expect("a stored URL parses");
    assert_eq!(again.as_str(), stored);
    assert_eq!(TargetUrl::canonical(stored), None);
    assert!(stored.starts_with("http://") || stored.starts_with("https://"));
    // The private-address check never panics on what was accepted.
    let _ = TargetPolicy::new(true, None).expect("no file").check(&url, None);
});
