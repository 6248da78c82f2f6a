//! Kutt API v2: the answers of `GET /api/v2/links`, `{total, limit, skip,
//! data}` (at most 50 links a page), saved one page a line or as an array
//! of pages (or read from the API, see [`super::api`]).

use std::io::BufRead;

use serde::Deserialize;

use super::{Found, Item, Items, dates::rfc3339};

/// A page; its `total` is read by the API reader.
#[derive(Deserialize)]
struct Page {
    data: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct KuttLink {
    address: String,
    target: String,
    description: Option<String>,
    created_at: String,
    expire_in: Option<String>,
    /// `null`: Kutt's default domain.
    domain: Option<String>,
    #[serde(default)]
    visit_count: u64,
    #[serde(default)]
    password: bool,
    #[serde(default)]
    banned: bool,
}

pub(super) fn read<R: BufRead>(input: R) -> Items {
    let mut out = Vec::new();
    let mut n = 0;
    let read = super::pages(input, |_, page| {
        page_items(page, &mut n, &mut out);
    });
    if let Err(why) = read {
        out.push((n + 1, Item::Invalid(why)));
    }
    Box::new(out.into_iter())
}

/// The links of one page, numbered on from `n`; how many it had.
pub(super) fn page_items(
    page: serde_json::Value,
    n: &mut u64,
    out: &mut Vec<(u64, Item)>,
) -> usize {
    let page: Page = match serde_json::from_value(page) {
        Ok(p) => p,
        Err(e) => {
            *n += 1;
            out.push((*n, Item::Invalid(format!("not a Kutt links page: {e}"))));
            return 0;
        }
    };
    let len = page.data.len();
    for link in page.data {
        *n += 1;
        out.push((*n, item(link)));
    }
    len
}

fn item(link: serde_json::Value) -> Item {
    let link: KuttLink = match serde_json::from_value(link) {
        Ok(l) => l,
        Err(e) => return Item::Invalid(format!("not a Kutt link: {e}")),
    };
    // Carried over unprotected, it would open to anyone: never.
    if link.password {
        return Item::Skip(format!(
            "'{}' has a password, which Kutt keeps hashed its own way",
            link.address
        ));
    }
    if link.banned {
        return Item::Skip(format!("'{}' is banned on Kutt", link.address));
    }
    let found = (|| -> Result<Found, String> {
        Ok(Found {
            domain: link.domain,
            code: link.address,
            url: link.target,
            created_at: rfc3339(&link.created_at).map_err(|e| format!("created_at: {e}"))?,
            expires_at: link
                .expire_in
                .as_deref()
                .map(rfc3339)
                .transpose()
                .map_err(|e| format!("expire_in: {e}"))?,
            title: link.description,
            total: link.visit_count,
            ..Found::default()
        })
    })();
    match found {
        Ok(f) => Item::Link(Box::new(f.record())),
        Err(why) => Item::Invalid(why),
    }
}
