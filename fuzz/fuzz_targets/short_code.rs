//! The code parser: a code that parses is printed back as given, and an
//! alias is a code.
#![no_main]

use libfuzzer_sys::fuzz_target;
use litelink_service::domain::ShortCode;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(code) = ShortCode::parse(raw) {
        assert_eq!(code.to_string(), raw);
        assert!(raw.bytes().all(|b| b.is_ascii_graphic()), "{raw:?}");
    }
    if let Ok(alias) = ShortCode::parse_alias(raw) {
        assert_eq!(alias.to_string(), raw);
        assert!(ShortCode::parse(raw).is_ok(), "alias {raw:?} is not a code");
    }
});
