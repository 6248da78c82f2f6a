//! Reading a running Bitly, Shlink or Kutt through its API, paging as each
//! pages. Every answer is bounded ([`MAX_PAGE_BYTES`], [`PAGE_TIMEOUT`]); a
//! `next` link is followed only on the host of the URL given; a page seen
//! before stops the import. The token goes in the request's header only,
//! and is never printed or logged.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;
use url::Url;

use super::{Item, Items, MAX_PAGE_BYTES, Replay, Source, SourceOptions, bitly, kutt, shlink};
use crate::outbound::HttpClient;

/// The longest one page may take, connection included.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Links asked for a page: Kutt's and Shlink's largest.
const PAGE_SIZE: u32 = 50;
/// Visits asked for a page of Shlink's visits.
const VISITS_PAGE_SIZE: u32 = 5000;
/// Pages read from one API at most: a source that never stops paging is
/// stopped (50 million links at 50 a page).
const MAX_PAGES: u64 = 1_000_000;

/// An API token, kept out of `Debug` and every message.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(token: String) -> Self {
        Self(token.trim().to_owned())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// The pages of one listing read so far, by digest: two listings (the
/// visits of two links, say) may well be alike, one listing's pages not.
type Seen = HashSet<[u8; 32]>;

struct Api {
    http: HttpClient,
    base: Url,
    header: (&'static str, String),
    pages: u64,
}

impl Api {
    fn new(
        source: Source,
        base: &str,
        token: &Token,
        ca_file: Option<&std::path::Path>,
    ) -> anyhow::Result<Self> {
        let base = Url::parse(base).with_context(|| format!("--api-url '{base}'"))?;
        anyhow::ensure!(
            matches!(base.scheme(), "http" | "https") && base.host_str().is_some(),
            "--api-url '{base}': an http or https URL with a host"
        );
        let roots = match ca_file {
            Some(path) => Some(crate::tls::read_roots(path)?),
            None if base.scheme() == "https" => Some(crate::tls::system_roots()?),
            None => None,
        };
        let tls = roots
            .map(|r| {
                crate::tls::client_config("the source's API", crate::tls::Verify::Full(r), None)
            })
            .transpose()?;
        let header = match source {
            Source::Bitly => ("authorization", format!("Bearer {}", token.0)),
            Source::Kutt => ("x-api-key", token.0.clone()),
            Source::Shlink => ("x-api-key", token.0.clone()),
            other => anyhow::bail!("--api-url reads Bitly, Shlink or Kutt, not {other}"),
        };
        Ok(Self {
            http: HttpClient::new(tls).with_limits(PAGE_TIMEOUT, MAX_PAGE_BYTES),
            base,
            header,
            pages: 0,
        })
    }

    /// The URL of `segments` below the base URL, with `query`.
    fn url(&self, segments: &[&str], query: &[(&str, String)]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        if query.is_empty() {
            url.set_query(None);
        }
        url
    }

    /// One page as JSON; an error for any answer but 200, and for a page
    /// `seen` before in the listing it pages.
    async fn get(&mut self, url: &Url, seen: &mut Seen) -> anyhow::Result<Value> {
        self.pages += 1;
        anyhow::ensure!(self.pages <= MAX_PAGES, "over {MAX_PAGES} pages: stopped");
        let request = hyper::Request::get(url.as_str())
            .header(self.header.0, &self.header.1)
            .header("accept", "application/json")
            .body(Vec::new())
            .context("building a request")?;
        let answer = self
            .http
            .send(request)
            .await
            .with_context(|| format!("GET {}", shown(url)))?;
        let status = answer.status();
        anyhow::ensure!(
            status.is_success(),
            "GET {}: {status}{}",
            shown(url),
            if matches!(status.as_u16(), 401 | 403) {
                " (check the API token)"
            } else {
                ""
            }
        );
        let body = answer.body();
        use sha2::Digest;
        let digest: [u8; 32] = sha2::Sha256::digest(body).into();
        anyhow::ensure!(
            seen.insert(digest),
            "GET {}: the same page as before; stopped, as the source pages in a loop",
            shown(url)
        );
        serde_json::from_slice(body).with_context(|| format!("GET {}: not JSON", shown(url)))
    }
}

/// A URL as messages show it: without its query's values.
fn shown(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}

/// Reads every link of the API at `base` (for Bitly, the first page's
/// URL, `.../v4/groups/{guid}/bitlinks`). `progress` hears the links read
/// so far.
pub async fn read(
    source: Source,
    base: &str,
    token: &Token,
    ca_file: Option<&std::path::Path>,
    options: &SourceOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<Items> {
    let mut api = Api::new(source, base, token, ca_file)?;
    let mut out: Vec<(u64, Item)> = Vec::new();
    let mut n = 0u64;
    let mut seen = Seen::new();
    match source {
        Source::Bitly => {
            let mut next = Some(api.base.clone());
            while let Some(url) = next.take() {
                let page = api.get(&url, &mut seen).await?;
                let following = page
                    .get("pagination")
                    .and_then(|p| p.get("next"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned);
                bitly::page_items(page, &mut n, &mut out);
                progress(n);
                if let Some(s) = following {
                    let url = api
                        .base
                        .join(&s)
                        .with_context(|| format!("pagination.next '{s}'"))?;
                    anyhow::ensure!(
                        url.scheme() == api.base.scheme()
                            && url.host_str() == api.base.host_str()
                            && url.port_or_known_default() == api.base.port_or_known_default(),
                        "pagination.next leads to another host ({}); not followed",
                        shown(&url)
                    );
                    next = Some(url);
                }
            }
        }
        Source::Kutt => {
            let mut skip = 0u64;
            loop {
                let url = api.url(
                    &["api", "v2", "links"],
                    &[("limit", PAGE_SIZE.to_string()), ("skip", skip.to_string())],
                );
                let page = api.get(&url, &mut seen).await?;
                let total = page.get("total").and_then(Value::as_u64);
                let got = kutt::page_items(page, &mut n, &mut out) as u64;
                progress(n);
                skip += got;
                if got == 0 || total.is_some_and(|t| skip >= t) {
                    break;
                }
            }
        }
        Source::Shlink => {
            let mut replay = Replay::default();
            let mut page_no = 1u64;
            loop {
                let url = api.url(
                    &["rest", "v3", "short-urls"],
                    &[
                        ("page", page_no.to_string()),
                        ("itemsPerPage", PAGE_SIZE.to_string()),
                    ],
                );
                let page = api.get(&url, &mut seen).await?;
                let list = page
                    .get("shortUrls")
                    .context("no shortUrls in the answer")?;
                let pages = list
                    .get("pagination")
                    .and_then(|p| p.get("pagesCount"))
                    .and_then(Value::as_u64)
                    .unwrap_or(1);
                let data = list
                    .get("data")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for raw in data {
                    n += 1;
                    let short: shlink::ShortUrl = match serde_json::from_value(raw) {
                        Ok(s) => s,
                        Err(e) => {
                            out.push((n, Item::Invalid(format!("not a Shlink short URL: {e}"))));
                            continue;
                        }
                    };
                    let domain: Vec<(&str, String)> =
                        short.domain.iter().map(|d| ("domain", d.clone())).collect();
                    let visits = if short.total() > 0 {
                        shlink_visits(&mut api, &short.short_code, &domain).await?
                    } else {
                        Vec::new()
                    };
                    let rules = if short.has_redirect_rules {
                        let url = api.url(
                            &[
                                "rest",
                                "v3",
                                "short-urls",
                                &short.short_code,
                                "redirect-rules",
                            ],
                            &domain,
                        );
                        Some(api.get(&url, &mut Seen::new()).await?)
                    } else {
                        None
                    };
                    let item = short.item(
                        &visits,
                        rules.as_ref(),
                        options.drop_unsupported_rules,
                        &mut replay,
                    );
                    out.push((n, item));
                    progress(n);
                }
                if page_no >= pages {
                    break;
                }
                page_no += 1;
            }
        }
        other => anyhow::bail!("--api-url reads Bitly, Shlink or Kutt, not {other}"),
    }
    Ok(Box::new(out.into_iter()))
}

/// Every visit of one Shlink short URL, page by page.
async fn shlink_visits(
    api: &mut Api,
    code: &str,
    domain: &[(&str, String)],
) -> anyhow::Result<Vec<shlink::Visit>> {
    let mut all = Vec::new();
    let mut page_no = 1u64;
    let mut seen = Seen::new();
    loop {
        let mut query = vec![
            ("page", page_no.to_string()),
            ("itemsPerPage", VISITS_PAGE_SIZE.to_string()),
        ];
        query.extend(domain.iter().cloned());
        let url = api.url(&["rest", "v3", "short-urls", code, "visits"], &query);
        let page = api.get(&url, &mut seen).await?;
        let visits = page.get("visits").context("no visits in the answer")?;
        let pages = visits
            .get("pagination")
            .and_then(|p| p.get("pagesCount"))
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let data: Vec<shlink::Visit> = serde_json::from_value(
            visits
                .get("data")
                .cloned()
                .unwrap_or(Value::Array(Vec::new())),
        )
        .with_context(|| format!("the visits of '{code}'"))?;
        all.extend(data);
        if page_no >= pages {
            return Ok(all);
        }
        page_no += 1;
    }
}
