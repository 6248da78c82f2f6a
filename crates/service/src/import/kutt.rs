//! Kutt API v2: the answers of `GET /api/v2/links`, `{total, limit, skip,
//! data}` (at most 50 links a page), saved one page a line or as an array
//! of pages (or read from the API, see [`super::api`]).

use std::io::BufRead;

use serde::Deserialize;

use super::{Found, Item, Items, dates::rfc3339};

/// A page; its `total` is read by the API reader. Read into types at
/// once; every field may be missing, so that a link lacking one is
/// refused alone.
#[derive(Deserialize)]
struct Page {
    data: Vec<KuttLink>,
}

#[derive(Deserialize)]
struct KuttLink {
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    #[serde(default)]
    expire_in: Option<String>,
    /// `null`: Kutt's default domain.
    #[serde(default)]
    domain: Option<String>,
    #[serde(default)]
    visit_count: Option<u64>,
    #[serde(default)]
    password: bool,
    #[serde(default)]
    banned: bool,
}

pub(super) fn read<R: BufRead + Send + 'static>(input: R) -> Items {
    super::paged::<Page, R>(input)
}

impl super::Page for Page {
    const WHAT: &'static str = "Kutt links page";
    type Link = KuttLink;

    fn links(self) -> Vec<KuttLink> {
        self.data
    }

    fn item(link: KuttLink) -> Item {
        item(link)
    }
}

/// The links of one page, numbered on from `n`; how many it had.
pub(super) fn page_items(
    page: serde_json::Value,
    n: &mut u64,
    out: &mut Vec<(u64, Item)>,
) -> usize {
    super::value_items::<Page>(page, n, out)
}

fn item(link: KuttLink) -> Item {
    let Some(address) = link.address else {
        return Item::Invalid("a Kutt link without its address".into());
    };
    // Carried over unprotected, it would open to anyone: never.
    if link.password {
        return Item::Skip(format!(
            "'{}' has a password, which Kutt keeps hashed its own way",
            address
        ));
    }
    if link.banned {
        return Item::Skip(format!("'{}' is banned on Kutt", address));
    }
    let found = (|| -> Result<Found, String> {
        Ok(Found {
            domain: link.domain,
            url: link.target.ok_or("no target")?,
            created_at: rfc3339(link.created_at.as_deref().ok_or("no created_at")?)
                .map_err(|e| format!("created_at: {e}"))?,
            code: address,
            expires_at: link
                .expire_in
                .as_deref()
                .map(rfc3339)
                .transpose()
                .map_err(|e| format!("expire_in: {e}"))?,
            title: link.description,
            total: link.visit_count.unwrap_or(0),
            ..Found::default()
        })
    })();
    match found {
        Ok(f) => Item::Link(Box::new(f.record())),
        Err(why) => Item::Invalid(why),
    }
}
