//! Links from other shorteners. Each source's own export (or its API, or
//! its database) is read into the [`Record`]s that `litelink import`
//! checks and stores exactly as it does its own export's: one checker,
//! one store path, one idempotence rule for every source.
//!
//! A source reads only what that project really writes; the formats
//! followed are named in docs/operations.md.

pub mod api;
mod bitly;
mod dates;
mod kutt;
mod replay;
mod shlink;
mod yourls;

use std::io::BufRead;
use std::path::PathBuf;

use crate::store::Record;

pub use replay::Replay;
pub use yourls::read_database as read_yourls_database;

/// Where the links come from (`import --from`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display, strum::VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Source {
    /// `litelink export`'s JSON lines or CSV.
    Litelink,
    /// Bitly API v4: `GET /v4/groups/{guid}/bitlinks` answers.
    Bitly,
    /// YOURLS's `yourls_url` and `yourls_log` tables.
    Yourls,
    /// Shlink's web client CSV, or its REST API v3.
    Shlink,
    /// Kutt API v2: `GET /api/v2/links` answers.
    Kutt,
}

impl Source {
    /// What the numbers in the summary count: a file's lines, or a source's
    /// links (or table rows) in the order it gives them.
    pub fn unit(self, csv: bool) -> &'static str {
        match self {
            Self::Litelink => "lines",
            _ if csv => "lines",
            Self::Yourls => "rows",
            _ => "links",
        }
    }
}

/// One thing a source gives, numbered as [`Source::unit`] says.
#[derive(Debug)]
pub enum Item {
    Link(Box<Record>),
    /// Not carried over, by design: a Kutt link behind a password, a
    /// banned one, a rule litelink cannot express. Reported; not an error.
    Skip(String),
    /// Unreadable or wrong: reported, and the import exits 2.
    Invalid(String),
}

pub type Items = Box<dyn Iterator<Item = (u64, Item)> + Send>;

/// What a source needs besides its input.
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// YOURLS's table prefix (`yourls_`).
    pub table_prefix: String,
    /// Import a Shlink link without the redirect conditions litelink
    /// cannot express, instead of skipping it.
    pub drop_unsupported_rules: bool,
}

impl Default for SourceOptions {
    fn default() -> Self {
        Self {
            table_prefix: "yourls_".into(),
            drop_unsupported_rules: false,
        }
    }
}

/// The largest answer of another shortener's API read.
pub const MAX_PAGE_BYTES: usize = 32 << 20;

/// Reads the files of `source` (YOURLS takes its url and log tables as two
/// CSV files, or one dump; every other source one file).
pub fn read_files(
    source: Source,
    files: &[PathBuf],
    options: &SourceOptions,
) -> anyhow::Result<Items> {
    let open = |p: &PathBuf| -> anyhow::Result<std::io::BufReader<std::fs::File>> {
        Ok(std::io::BufReader::new(std::fs::File::open(p).map_err(
            |e| anyhow::anyhow!("opening {}: {e}", p.display()),
        )?))
    };
    let one = || -> anyhow::Result<&PathBuf> {
        match files {
            [one] => Ok(one),
            _ => anyhow::bail!("--from {source} reads one file"),
        }
    };
    Ok(match source {
        Source::Litelink => anyhow::bail!("--from litelink is read by transfer::read"),
        Source::Bitly => bitly::read(open(one()?)?),
        Source::Kutt => kutt::read(open(one()?)?),
        Source::Shlink => shlink::read_csv(open(one()?)?),
        Source::Yourls => yourls::read_files(files, options)?,
    })
}

/// A page of an API's answer, in the source's own types.
trait Page: serde::de::DeserializeOwned {
    /// What a page that does not fit is called in the report.
    const WHAT: &'static str;
    /// A link as the source writes it.
    type Link;
    fn links(self) -> Vec<Self::Link>;
    /// The link in litelink's terms, or why it is not carried over.
    fn item(link: Self::Link) -> Item;

    /// The page's links, numbered on from `n`; how many it had.
    fn items(self, n: &mut u64, out: &mut Vec<(u64, Item)>) -> usize {
        let links = self.links();
        let len = links.len();
        for link in links {
            *n += 1;
            out.push((*n, Self::item(link)));
        }
        len
    }
}

/// The links of a page already read as JSON (an API's answer, whose
/// paging fields are read beside, or one of an array of pages).
fn value_items<P: Page>(page: serde_json::Value, n: &mut u64, out: &mut Vec<(u64, Item)>) -> usize {
    match serde_json::from_value::<P>(page) {
        Ok(page) => page.items(n, out),
        Err(e) => {
            *n += 1;
            out.push((*n, Item::Invalid(format!("not a {}: {e}", P::WHAT))));
            0
        }
    }
}

/// The links of pages of an API's answers saved to a file, one page a
/// line (read a page at a time, straight into its types: a `Value` first
/// costs an allocation a field) or one JSON array of pages (read whole, so
/// that a page that does not fit is refused alone).
fn paged<P: Page, R: BufRead + Send + 'static>(mut input: R) -> Items {
    let array = loop {
        match input.fill_buf() {
            Ok(buf) => match buf.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(at) => break buf[at] == b'[',
                None if buf.is_empty() => break false,
                None => {
                    let n = buf.len();
                    input.consume(n);
                }
            },
            Err(_) => break false,
        }
    };
    let mut n = 0u64;
    let refused = |n: &mut u64, why: String| {
        *n += 1;
        vec![(*n, Item::Invalid(why))]
    };
    if array {
        let all: Result<Vec<serde_json::Value>, String> =
            serde_json::from_reader(input).map_err(|e| format!("not a JSON array of pages: {e}"));
        return match all {
            Ok(all) => Box::new(all.into_iter().flat_map(move |page| {
                let mut out = Vec::new();
                value_items::<P>(page, &mut n, &mut out);
                out
            })),
            Err(why) => Box::new(refused(&mut n, why).into_iter()),
        };
    }
    Box::new(
        input
            .lines()
            .enumerate()
            .filter(|(_, line)| line.as_ref().map_or(true, |l| !l.trim().is_empty()))
            .flat_map(move |(i, line)| {
                let page =
                    line.map_err(|e| e.to_string()).and_then(|l| {
                        match serde_json::from_str::<P>(&l) {
                            Ok(page) => Ok(page),
                            Err(e) if e.is_data() => {
                                Err(format!("line {}: not a {}: {e}", i + 1, P::WHAT))
                            }
                            Err(e) => Err(format!("line {}: not a JSON page: {e}", i + 1)),
                        }
                    });
                match page {
                    Ok(page) => {
                        let mut out = Vec::new();
                        page.items(&mut n, &mut out);
                        out
                    }
                    Err(why) => refused(&mut n, why),
                }
            }),
    )
}

/// A link of another shortener in litelink's terms, before the checks.
#[derive(Debug, Default)]
struct Found {
    domain: Option<String>,
    code: String,
    url: String,
    created_at: String,
    expires_at: Option<String>,
    max_visits: Option<u64>,
    title: Option<String>,
    tags: Vec<String>,
    /// The source's own visit total; `logged` visits of it came with a
    /// time and go to the hourly and daily counts, the rest to
    /// `imported_visits`.
    total: u64,
    logged: Option<replay::Logged>,
    rules: Option<serde_json::Value>,
}

impl Found {
    fn record(self) -> Record {
        let logged = self.logged.as_ref().map_or(0, |l| l.visits);
        Record {
            domain: self.domain,
            code: Some(self.code),
            url: Some(self.url),
            created_at: self.created_at,
            expires_at: self.expires_at,
            owner: None,
            deleted_at: None,
            max_visits: self.max_visits,
            visits: None,
            imported_visits: Some(self.total.saturating_sub(logged)).filter(|n| *n > 0),
            history: self.logged.and_then(|l| l.history()),
            password_hash: None,
            rules: self.rules,
            expired_url: None,
            title: self.title.filter(|t| !t.trim().is_empty()),
            tags: self.tags.into_iter().filter(|t| !t.is_empty()).collect(),
        }
    }
}

/// The code and host of a short URL (`https://host/code`): the path
/// without its leading `/`.
fn code_of(short_url: &str) -> Result<(String, String), String> {
    let url = url::Url::parse(short_url).map_err(|e| format!("'{short_url}': {e}"))?;
    let host = url
        .host_str()
        .ok_or_else(|| format!("'{short_url}' has no host"))?
        .to_owned();
    let code = url.path().trim_start_matches('/');
    if code.is_empty() {
        return Err(format!("'{short_url}' has no code in its path"));
    }
    let code = percent_decode(code);
    Ok((code, host))
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("c={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map_or_else(|| s.to_owned(), |(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each item as `link CODE`, or the start of why it was refused.
    fn said(items: Items) -> Vec<(u64, String)> {
        items
            .map(|(n, item)| {
                let what = match item {
                    Item::Link(r) => format!("link {}", r.code.unwrap_or_default()),
                    Item::Invalid(why) | Item::Skip(why) => why,
                };
                (n, what)
            })
            .collect()
    }

    fn page(code: &str) -> String {
        serde_json::json!({"total": 1, "limit": 50, "skip": 0, "data": [{"address": code,
            "target": "https://example.com/", "created_at": "2020-04-07 16:00:00"}]})
        .to_string()
    }

    #[test]
    fn a_page_that_does_not_fit_is_refused_alone_on_a_line_or_in_an_array() {
        let lines = format!(
            "{}\nnot json\n\n{{\"data\": 5}}\n{}\n",
            page("a1"),
            page("b2")
        );
        let got = said(kutt::read(std::io::Cursor::new(lines)));
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[0], (1, "link a1".to_owned()));
        assert!(got[1].1.starts_with("line 2: not a JSON page"), "{got:?}");
        assert!(
            got[2].1.starts_with("line 4: not a Kutt links page"),
            "{got:?}"
        );
        assert_eq!(got[3], (4, "link b2".to_owned()));

        let array = format!("[{}, {{\"data\": 5}}, {}]", page("a1"), page("b2"));
        let got = said(kutt::read(std::io::Cursor::new(array)));
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], (1, "link a1".to_owned()));
        assert!(got[1].1.starts_with("not a Kutt links page"), "{got:?}");
        assert_eq!(got[2], (3, "link b2".to_owned()));
    }
}
