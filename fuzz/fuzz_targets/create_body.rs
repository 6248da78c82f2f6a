//! The create body: any bytes give a body or a message saying what is
//! wrong, never a panic, and an accepted body's URL is canonical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use litelink_service::domain::TargetUrl;
use litelink_service::links::bodies::read_create;

fuzz_target!(|data: &[u8]| {
    match read_create(data) {
        Ok(url) => {
            let url = url.as_str();
            assert_eq!(TargetUrl::parse(url).expect("parses").as_str(), url);
        }
        Err(e) => assert!(!e.0.is_empty()),
    }
});
