//! Bitly API v4: the answers of `GET /v4/groups/{group_guid}/bitlinks`,
//! `{"links": [...], "pagination": {"next": ...}}`, saved one page a line
//! or as an array of pages (or read from the API, see [`super::api`]).

use std::io::BufRead;

use serde::Deserialize;

use super::{Found, Item, Items, code_of, dates::rfc3339};

/// A page; its `pagination.next` is read by the API reader. Read into
/// types at once (a `Value` first costs an allocation a field): every
/// field may be missing, so that a link lacking one is refused alone.
#[derive(Deserialize)]
struct Page {
    #[serde(default)]
    links: Vec<Bitlink>,
}

#[derive(Deserialize)]
struct Bitlink {
    #[serde(default)]
    link: Option<String>,
    #[serde(default)]
    custom_bitlinks: Vec<String>,
    #[serde(default)]
    long_url: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    created_at: Option<String>,
}

/// Bitly's own domain: its links land on litelink's default domain.
const BITLY_HOST: &str = "bit.ly";

pub(super) fn read<R: BufRead + Send + 'static>(input: R) -> Items {
    super::paged::<Page, R>(input)
}

impl super::Page for Page {
    const WHAT: &'static str = "bitlinks page";
    type Link = Bitlink;

    fn links(self) -> Vec<Bitlink> {
        self.links
    }

    fn item(link: Bitlink) -> Item {
        item(link)
    }
}

/// The links of one page, numbered on from `n`.
pub(super) fn page_items(page: serde_json::Value, n: &mut u64, out: &mut Vec<(u64, Item)>) {
    super::value_items::<Page>(page, n, out);
}

fn item(link: Bitlink) -> Item {
    let short = link
        .custom_bitlinks
        .first()
        .or(link.link.as_ref())
        .ok_or("neither link nor custom_bitlinks");
    let found = short.map_err(str::to_owned).and_then(|short| {
        let (code, host) = code_of(short)?;
        Ok(Found {
            domain: (!host.eq_ignore_ascii_case(BITLY_HOST)).then_some(host),
            code,
            url: link.long_url.ok_or("no long_url")?,
            created_at: rfc3339(link.created_at.as_deref().ok_or("no created_at")?)
                .map_err(|e| format!("created_at: {e}"))?,
            title: link.title,
            tags: link.tags,
            ..Found::default()
        })
    });
    match found {
        Ok(f) => Item::Link(Box::new(f.record())),
        Err(why) => Item::Invalid(why),
    }
}
