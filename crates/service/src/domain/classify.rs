//! What a visit's headers say, classed once on the redirect path: the
//! referrer's host (`Referer`) and what kind of client it was
//! (`User-Agent`).

use std::borrow::Cow;
use std::sync::LazyLock;

use super::visit::{AgentClass, BROWSER_FAMILIES, DIRECT_HOST, Device, OS_FAMILIES, OTHER_HOST};

/// The longest `User-Agent` looked at: a longer one is classed by its
/// first bytes.
pub(crate) const AGENT_MAX_BYTES: usize = 512;

/// The known-bot patterns, compiled once per process.
static BOTS: LazyLock<isbot::Bots> = LazyLock::new(isbot::Bots::default);

/// What a byte of a `Referer` is to [`referrer_host`], as bit flags, so
/// that the scan of the authority does one table lookup a byte instead of
/// a match and two tests (about a third of the instructions, callgrind).
const HOST: u8 = 1; // may be in a host: letters, digits, `-._`, and `[]:` of IPv6
const UPPER: u8 = 2; // an upper-case letter
const END: u8 = 4; // `/`, `?`, `#`: the authority ends
const AT: u8 = 8; // `@`: what came before was user info
const SCHEME: u8 = 16; // may be in a scheme after its first letter

const REFERER_BYTES: [u8; 256] = {
    let mut table = [0; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let mut f = 0;
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':') {
            f |= HOST;
        }
        if b.is_ascii_uppercase() {
            f |= UPPER;
        }
        if matches!(b, b'/' | b'?' | b'#') {
            f |= END;
        }
        if b == b'@' {
            f |= AT;
        }
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.') {
            f |= SCHEME;
        }
        table[i] = f;
        i += 1;
    }
    table
};

/// The host a `Referer` names, in lower case; [`DIRECT_HOST`] without one,
/// [`OTHER_HOST`] when it names none.
///
/// By hand rather than with a URL parser: this runs on every redirect, and
/// `http::Uri` copies the header and `url::Url` allocates its
/// serialization, where the host is only a slice of what was sent. One pass
/// over the authority after `scheme://` finds its end, drops user info,
/// and checks that what is left is made of host characters; then the port
/// goes.
pub(crate) fn referrer_host(referer: Option<&[u8]>) -> Cow<'_, str> {
    let Some(raw) = referer.map(<[u8]>::trim_ascii).filter(|r| !r.is_empty()) else {
        return Cow::Borrowed(DIRECT_HOST);
    };
    // The scheme ends at the first ':', which must start "://".
    let Some(colon) = raw.iter().position(|b| *b == b':') else {
        return Cow::Borrowed(OTHER_HOST);
    };
    let scheme = &raw[..colon];
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|b| REFERER_BYTES[usize::from(*b)] & SCHEME != 0);
    if !scheme_ok || raw.get(colon + 1..colon + 3) != Some(&b"//"[..]) {
        return Cow::Borrowed(OTHER_HOST);
    }
    let rest = &raw[colon + 3..];
    let (mut start, mut end) = (0, rest.len());
    // `all` keeps HOST while every byte is a host byte; `any` gets UPPER
    // from any upper-case letter. User info (up to an `@`) starts both over.
    let (mut all, mut any) = (HOST, 0);
    for (i, &b) in rest.iter().enumerate() {
        let f = REFERER_BYTES[usize::from(b)];
        if f & (END | AT) == 0 {
            all &= f;
            any |= f;
        } else if f & END != 0 {
            end = i;
            break;
        } else {
            (start, all, any) = (i + 1, HOST, 0);
        }
    }
    let (valid, upper) = (all & HOST != 0, any & UPPER != 0);
    let host_port = &rest[start..end];
    let host = if host_port.first() == Some(&b'[') {
        // An IPv6 literal keeps its brackets and loses only the port.
        match host_port.iter().position(|b| *b == b']') {
            Some(close) => &host_port[..=close],
            None => &[][..],
        }
    } else {
        let port = host_port.iter().position(|b| *b == b':');
        &host_port[..port.unwrap_or(host_port.len())]
    };
    if !valid || host.is_empty() || host.len() > 255 {
        return Cow::Borrowed(OTHER_HOST);
    }
    // Every byte of `host` has HOST in REFERER_BYTES, which only ASCII
    // bytes have: the check cannot fail.
    let Ok(host) = std::str::from_utf8(host) else {
        return Cow::Borrowed(OTHER_HOST);
    };
    if upper {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// The part of a `User-Agent` that is classed: trimmed, at most
/// [`AGENT_MAX_BYTES`]; `None` when there is nothing.
pub(crate) fn agent_key(user_agent: Option<&[u8]>) -> Option<&[u8]> {
    let ua = user_agent
        .map(<[u8]>::trim_ascii)
        .filter(|u| !u.is_empty())?;
    Some(&ua[..ua.len().min(AGENT_MAX_BYTES)])
}

/// The class of a non-empty `User-Agent`, by the `isbot` patterns first.
pub(crate) fn class_of(ua: &[u8]) -> AgentClass {
    let ua = String::from_utf8_lossy(ua);
    if BOTS.is_bot(&ua) {
        AgentClass::Bot
    } else if ua.starts_with("Mozilla/") || ua.starts_with("Opera/") {
        AgentClass::Browser
    } else {
        AgentClass::Other
    }
}

/// What a `User-Agent` says of its sender: its class, and its device,
/// OS family and browser family (indexes into `OS_FAMILIES` and
/// `BROWSER_FAMILIES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Agent {
    pub class: AgentClass,
    pub device: Device,
    pub os: u8,
    pub browser: u8,
}

impl Agent {
    /// No `User-Agent` at all.
    pub(crate) const NONE: Self = Self {
        class: AgentClass::Other,
        device: Device::Other,
        os: 0,
        browser: 0,
    };
}

/// The woothee parser's tables, built once per process.
static PARSER: LazyLock<woothee::parser::Parser> = LazyLock::new(woothee::parser::Parser::new);

fn family(names: &[&str], name: &str) -> u8 {
    names
        .iter()
        .position(|n| *n == name)
        .and_then(|i| u8::try_from(i).ok())
        .unwrap_or(1)
}

/// Classes a non-empty `User-Agent`: bots by the `isbot` patterns and
/// woothee's crawler list, the rest by woothee's parse.
pub(crate) fn agent_of(ua: &[u8]) -> Agent {
    let text = String::from_utf8_lossy(ua);
    let class = class_of(ua);
    let parsed = PARSER.parse(&text);
    let (category, os, name) = parsed
        .as_ref()
        .map_or(("", "", ""), |r| (r.category, r.os, r.name));
    let bot = class == AgentClass::Bot || category == "crawler";
    let os_family = match os {
        o if o.starts_with("Windows Phone") => "Windows Phone",
        o if o.starts_with("Windows") => "Windows",
        "Mac OSX" | "Mac OS Classic" => "macOS",
        "iPhone" | "iPad" | "iPod" | "iOS" => "iOS",
        "Android" => "Android",
        "Linux" => "Linux",
        "ChromeOS" => "ChromeOS",
        "BlackBerry" | "BlackBerry 10" => "BlackBerry",
        "BSD" => "BSD",
        o if o.starts_with("PlayStation") => "PlayStation",
        o if o.starts_with("Xbox") => "Xbox",
        o if o.starts_with("Nintendo") => "Nintendo",
        _ if bot => "unknown",
        _ => "other",
    };
    let browser_family = match name {
        _ if bot => "bot",
        "Chrome" => "Chrome",
        "Safari" => "Safari",
        "Firefox" => "Firefox",
        "Edge" => "Edge",
        "Internet Explorer" => "Internet Explorer",
        "Opera" => "Opera",
        "SamsungBrowser" => "Samsung Internet",
        "Yandex Browser" => "Yandex Browser",
        "Vivaldi" => "Vivaldi",
        "Webview" => "WebView",
        _ => "other",
    };
    // woothee counts tablets as smartphones: an iPad says so, an Android
    // tablet leaves out "Mobile" (Google's advice to tablet browsers).
    let device = match category {
        _ if bot => Device::Bot,
        _ if os == "iPad" => Device::Tablet,
        "smartphone" if os == "Android" && !text.contains("Mobile") => Device::Tablet,
        "smartphone" | "mobilephone" => Device::Mobile,
        "pc" => Device::Desktop,
        _ => Device::Other,
    };
    Agent {
        class: if bot { AgentClass::Bot } else { class },
        device,
        os: family(&OS_FAMILIES, os_family),
        browser: family(&BROWSER_FAMILIES, browser_family),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real User-Agent strings, and what they are counted as.
    const CORPUS: &[(&str, Device, &str, &str)] = &[
        (
            "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
            Device::Mobile,
            "iOS",
            "Safari",
        ),
        (
            "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36",
            Device::Mobile,
            "Android",
            "Chrome",
        ),
        (
            "Mozilla/5.0 (Linux; Android 13; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 Chrome/117.0.0.0 Mobile Safari/537.36",
            Device::Mobile,
            "Android",
            "Samsung Internet",
        ),
        (
            "Mozilla/5.0 (iPad; CPU OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1",
            Device::Tablet,
            "iOS",
            "Safari",
        ),
        (
            "Mozilla/5.0 (Linux; Android 13; SM-X700) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
            Device::Tablet,
            "Android",
            "Chrome",
        ),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36",
            Device::Desktop,
            "Windows",
            "Chrome",
        ),
        (
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36 Edg/124.0.2478.80",
            Device::Desktop,
            "Windows",
            "Edge",
        ),
        (
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.4; rv:125.0) Gecko/20100101 Firefox/125.0",
            Device::Desktop,
            "macOS",
            "Firefox",
        ),
        (
            "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Safari/605.1.15",
            Device::Desktop,
            "macOS",
            "Safari",
        ),
        (
            "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0",
            Device::Desktop,
            "Linux",
            "Firefox",
        ),
        (
            "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
            Device::Bot,
            "unknown",
            "bot",
        ),
        (
            "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
            Device::Bot,
            "unknown",
            "bot",
        ),
        (
            "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
            Device::Bot,
            "unknown",
            "bot",
        ),
        ("curl/8.5.0", Device::Bot, "unknown", "bot"),
    ];

    #[test]
    fn real_user_agents_are_counted_as_what_they_are() {
        let mut wrong = Vec::new();
        for (ua, device, os, browser) in CORPUS {
            let a = agent_of(ua.as_bytes());
            let got = (
                a.device,
                OS_FAMILIES[usize::from(a.os)],
                BROWSER_FAMILIES[usize::from(a.browser)],
            );
            if got != (*device, *os, *browser) {
                wrong.push(format!("{ua}: {got:?}"));
            }
            assert_eq!(a.class == AgentClass::Bot, *device == Device::Bot, "{ua}");
        }
        assert!(wrong.is_empty(), "{wrong:#?}");
    }

    #[test]
    fn referrers_are_hosts_in_lower_case() {
        let referrer_host = |r: Option<&'static str>| referrer_host(r.map(str::as_bytes));
        assert_eq!(referrer_host(None), DIRECT_HOST);
        assert_eq!(referrer_host(Some("")), DIRECT_HOST);
        assert_eq!(
            referrer_host(Some("https://News.Example.com/a?b=c")),
            "news.example.com"
        );
        assert_eq!(referrer_host(Some("android-app://com.x")), "com.x");
        assert_eq!(
            referrer_host(Some("https://u:p@Host.example:8443/x")),
            "host.example"
        );
        assert_eq!(referrer_host(Some("http://[::1]:8080/")), "[::1]");
        assert_eq!(
            referrer_host(Some("https://example.com?q#f")),
            "example.com"
        );
        assert_eq!(referrer_host(Some("not a url")), OTHER_HOST);
        assert_eq!(referrer_host(Some("/relative")), OTHER_HOST);
        assert_eq!(referrer_host(Some("https://")), OTHER_HOST);
        assert_eq!(referrer_host(Some("https://a b.example/")), OTHER_HOST);
        assert_eq!(referrer_host(Some("1http://x.example/")), OTHER_HOST);
        assert_eq!(referrer_host(Some("https://exämple.com/")), OTHER_HOST);
        assert_eq!(
            referrer_host(Some("https://ü:pä@ok.example/")),
            "ok.example"
        );
        assert_eq!(referrer_host(Some("http:/x.example/")), OTHER_HOST);
        let raw: &[u8] = b"https://a\xff.example/";
        assert_eq!(super::referrer_host(Some(raw)), OTHER_HOST);
    }

    /// The table-driven scan finds what a plain match on each byte finds
    /// (the scan as it was before the table), on values made of the bytes
    /// that matter to it.
    fn referrer_host_by_match(referer: Option<&[u8]>) -> Cow<'_, str> {
        let Some(raw) = referer.map(<[u8]>::trim_ascii).filter(|r| !r.is_empty()) else {
            return Cow::Borrowed(DIRECT_HOST);
        };
        let Some(colon) = raw.iter().position(|b| *b == b':') else {
            return Cow::Borrowed(OTHER_HOST);
        };
        let scheme = &raw[..colon];
        let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
            && scheme
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
        if !scheme_ok || raw.get(colon + 1..colon + 3) != Some(&b"//"[..]) {
            return Cow::Borrowed(OTHER_HOST);
        }
        let rest = &raw[colon + 3..];
        let (mut start, mut end) = (0, rest.len());
        let (mut valid, mut upper) = (true, false);
        for (i, &b) in rest.iter().enumerate() {
            match b {
                b'/' | b'?' | b'#' => {
                    end = i;
                    break;
                }
                b'@' => (start, valid, upper) = (i + 1, true, false),
                _ => {
                    valid &= b.is_ascii_alphanumeric()
                        || matches!(b, b'-' | b'.' | b'_' | b'[' | b']' | b':');
                    upper |= b.is_ascii_uppercase();
                }
            }
        }
        let host_port = &rest[start..end];
        let host = if host_port.first() == Some(&b'[') {
            match host_port.iter().position(|b| *b == b']') {
                Some(close) => &host_port[..=close],
                None => &[][..],
            }
        } else {
            let port = host_port.iter().position(|b| *b == b':');
            &host_port[..port.unwrap_or(host_port.len())]
        };
        if !valid || host.is_empty() || host.len() > 255 {
            return Cow::Borrowed(OTHER_HOST);
        }
        let host = String::from_utf8_lossy(host);
        if upper {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            host
        }
    }

    proptest::proptest! {
        #[test]
        fn the_referrer_scan_agrees_with_a_match_per_byte(
            scheme in "(https?|[a-zA-Z][a-zA-Z0-9+.-]{0,6}|1x|h_x|)",
            sep in "(://|:/|:|//|)",
            user in "([a-zA-Z0-9 %é:]{0,6}@)?",
            body in "[a-zA-Z0-9:/?#@.\\[\\]_+ %é-]{0,40}",
        ) {
            let raw = format!(" {scheme}{sep}{user}{body} ");
            let want = referrer_host_by_match(Some(raw.as_bytes()));
            proptest::prop_assert_eq!(referrer_host(Some(raw.as_bytes())), want);
        }
    }

    #[test]
    fn agents_are_bots_browsers_or_other() {
        assert_eq!(agent_key(Some(b"  ")), None);
        assert_eq!(
            agent_key(Some("é".repeat(400).as_bytes())).map(<[u8]>::len),
            Some(512)
        );
        let chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 \
                      (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36";
        let class_of = |ua: &str| class_of(ua.as_bytes());
        assert_eq!(class_of(chrome), AgentClass::Browser);
        let bot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)";
        assert_eq!(class_of(bot), AgentClass::Bot);
        assert_eq!(class_of("curl/8.5.0"), AgentClass::Bot);
        assert_eq!(
            class_of("Dalvik/2.1.0 (Linux; U; Android 13)"),
            AgentClass::Other
        );
    }
}
