//! The create body: any bytes give a body or a 400, never a panic, and an
//! accepted body's URL is canonical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use litelink_service::domain::TargetUrl;
use litelink_service::http::NewLinkBody;

fuzz_target!(|data: &[u8]| {
    match NewLinkBody::parse(data) {
        Ok(body) => {
            let url = body.url.as_str();
            assert_eq!(TargetUrl::parse(url).expect("parses").as_str(), url);
        }
        Err(e) => assert_eq!(e.status().as_u16(), 400, "{e}"),
    }
});
