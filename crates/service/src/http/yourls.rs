//! `GET` and `POST /yourls-api.php`: the YOURLS 1.10.4 API, so that the
//! tools that speak only it (ShareX, browser extensions, bots, scripts)
//! work here. Its parameters come from the query and a form body, as
//! PHP's `$_REQUEST`; its answers are YOURLS's own, key for key and type
//! for type, in JSON, XML or plain text. The rules behind each action are
//! the links service's (`links/yourls.rs`).

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use super::extract::{ClientAddr, HostDomain, read_body};
use crate::domain::wire::FromText;
use crate::domain::{Alias, DomainId, Link, LinkKey, ShortCode, TargetUrl, Title};
use crate::keys::Principal;
use crate::links::LinksError;
use crate::links::yourls::{ShortenRequest, Shortened, YourlsAuth, YourlsRefusal};
use crate::store::{LinkTotals, Rank};

/// The version this API answers as, and its database version.
pub(crate) const VERSION: &str = "1.10.4";
const DB_VERSION: &str = "507";

const NOT_FOUND: &str = "Error: short URL not found";
const STATS_ONLY_STRUCTURED: &str = "Need either XML or JSON format for stats";
const UNKNOWN_ACTION: &str = "Unknown or missing \"action\" parameter";

/// The parameters of a request: the query's, then a form body's over
/// them, as PHP's `$_REQUEST` (a name sent twice: its last value).
pub(crate) struct Params(HashMap<String, String>);

impl Params {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// A parameter that is sent and not empty (PHP's `!empty()`, but for
    /// "0", which YOURLS never needs).
    fn given(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }
}

impl FromRequest<AppState> for Params {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let mut fields = HashMap::new();
        if let Some(query) = req.uri().query() {
            fields.extend(url::form_urlencoded::parse(query.as_bytes()).into_owned());
        }
        let media = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|m| m.trim().to_ascii_lowercase());
        if req.method() == Method::POST {
            match media.as_deref() {
                Some("application/x-www-form-urlencoded") => {
                    let body = read_body(req, state.max_body_bytes, |limit| {
                        format!("the form is too large (over {limit} bytes)")
                    })
                    .await?;
                    fields.extend(url::form_urlencoded::parse(&body).into_owned());
                }
                None => {}
                Some(_) => {
                    return Err(ApiError::UnsupportedMediaType(
                        "expected parameters in the query or an \
                         application/x-www-form-urlencoded body"
                            .into(),
                    ));
                }
            }
        }
        Ok(Self(fields))
    }
}

/// What a YOURLS answer is written in (`format=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Xml,
    Simple,
}

impl Format {
    /// XML without `format`, as in YOURLS; any other unknown name is its
    /// plain text. `jsonp` is refused: it would let any page read a key
    /// holder's links.
    fn of(params: &Params) -> Result<Self, ApiError> {
        Ok(match params.get("format") {
            None => Self::Xml,
            Some("json") => Self::Json,
            Some("xml") => Self::Xml,
            Some("jsonp") => {
                return Err(ApiError::BadRequest(
                    "format=jsonp is not served: it would let any web page read the answer; \
                     use json, xml or simple"
                        .into(),
                ));
            }
            Some(_) => Self::Simple,
        })
    }
}

/// A value of an answer: text, a number, or named values in order (PHP's
/// arrays keep their order, and YOURLS's answers are compared by it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Out {
    Text(String),
    Int(u64),
    Map(Vec<(String, Out)>),
}

impl serde::Serialize for Out {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Self::Text(t) => s.serialize_str(t),
            Self::Int(n) => s.serialize_u64(*n),
            Self::Map(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

fn text(s: impl Into<String>) -> Out {
    Out::Text(s.into())
}

/// An answer: its fields, and its plain-text form (`simple`).
pub(crate) struct Answer {
    fields: Vec<(String, Out)>,
    simple: Option<String>,
}

impl Answer {
    fn new(fields: Vec<(&str, Out)>, simple: Option<String>) -> Self {
        Self {
            fields: fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            simple,
        }
    }

    /// YOURLS's status: `statusCode`, else `errorCode`, else 200.
    fn status(&self) -> StatusCode {
        let code = |name: &str| {
            self.fields.iter().find_map(|(k, v)| match v {
                Out::Text(t) if k == name => t.parse::<u16>().ok(),
                _ => None,
            })
        };
        code("statusCode")
            .or_else(|| code("errorCode"))
            .and_then(|c| StatusCode::from_u16(c).ok())
            .unwrap_or(StatusCode::OK)
    }

    fn render(self, format: Format) -> Response {
        let status = self.status();
        let (media, body) = match format {
            Format::Json => (
                "application/json; charset=utf-8",
                serde_json::to_string(&Out::Map(self.fields)).unwrap_or_default(),
            ),
            Format::Xml => ("application/xml; charset=utf-8", xml(&self.fields)),
            Format::Simple => ("text/plain; charset=utf-8", self.simple.unwrap_or_default()),
        };
        let mut response = Response::new(Body::from(body));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
        // Answers differ by caller, and some write: no cache keeps one.
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

/// An answer as YOURLS's XML (Spatie's `ArrayToXml` under `<root>`): each
/// field an element, text escaped, control characters dropped.
fn xml(fields: &[(String, Out)]) -> String {
    fn write(out: &mut String, fields: &[(String, Out)]) {
        for (name, value) in fields {
            out.push('<');
            out.push_str(name);
            out.push('>');
            match value {
                Out::Text(t) => escape(out, t),
                Out::Int(n) => out.push_str(&n.to_string()),
                Out::Map(inner) => write(out, inner),
            }
            out.push_str("</");
            out.push_str(name);
            out.push('>');
        }
    }
    fn escape(out: &mut String, text: &str) {
        for c in text.chars() {
            match c {
                '&' => out.push_str("&amp;"),
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '\r' => out.push_str("&#13;"),
                '\u{0}'..='\u{9}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{7f}' => {}
                c => out.push(c),
            }
        }
    }
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<root>");
    write(&mut out, fields);
    out.push_str("</root>\n");
    out
}

/// The refusal of who a request says it is, as YOURLS's `auth.php` writes
/// it: 403.
fn refused(message: &str) -> Answer {
    Answer::new(
        vec![("message", text(message)), ("errorCode", text("403"))],
        Some(message.to_owned()),
    )
}

/// Any other error, in the shape of YOURLS's errors, with the status (and
/// `Retry-After`) the rest of the API would answer.
fn failure(e: LinksError) -> Response {
    failure_of(ApiError::from(e))
}

fn failure_of(e: ApiError) -> Response {
    let status = e.status();
    let message = match &e {
        ApiError::Internal(_) => "internal server error".to_owned(),
        other => other.to_string(),
    };
    // The error's own answer logs it and carries its headers.
    let headers = e.into_response().headers().clone();
    let mut response = Answer::new(
        vec![
            ("message", text(message.clone())),
            ("errorCode", text(status.as_u16().to_string())),
        ],
        Some(message),
    )
    .render(Format::Json);
    if let Some(retry) = headers.get(header::RETRY_AFTER) {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, retry.clone());
    }
    response
}

/// What the YOURLS API answers, for the OpenAPI document.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum Answers {
    /// YOURLS 1.10.4's answer: JSON, XML or text, by `format`
    #[response(status = 200)]
    Ok,
    /// A refused shorturl (in YOURLS's shape), an unknown action, or
    /// format=jsonp
    #[response(status = 400)]
    BadRequest,
    /// Credentials refused, or this action needs some: {message, errorCode}
    #[response(status = 403)]
    Forbidden,
    /// expand or url-stats of no such link
    #[response(status = 404)]
    NotFound,
    /// A POST body that is not a form
    #[response(status = 415)]
    UnsupportedMediaType,
    /// Too many creates, or too many wrong signatures or passwords
    #[response(status = 429, headers(("retry-after" = u32, description = "Seconds to wait before retrying")))]
    TooManyRequests,
}

/// The parameters of every action, as the OpenAPI document shows them for
/// the query and for a form. They are PHP's request fields: text, which
/// YOURLS reads as it needs (a number by PHP's `intval`).
#[derive(utoipa::ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read by name through [`Params`], as PHP's `$_REQUEST`
pub(crate) struct YourlsFields {
    /// shorturl, expand, url-stats, stats, db-stats or version
    action: String,
    /// json, xml (the default) or simple; jsonp is refused
    format: Option<String>,
    /// A key's signature token, or its timed hash
    signature: Option<String>,
    /// Unix time of a timed signature
    timestamp: Option<String>,
    /// md5 (the default), sha1, sha256, sha384 or sha512
    hash: Option<String>,
    /// A local account's name
    username: Option<String>,
    /// Its password
    password: Option<String>,
    /// shorturl: the long URL
    url: Option<String>,
    /// shorturl: a custom code (needs credentials)
    keyword: Option<String>,
    /// shorturl: the title
    title: Option<String>,
    /// expand and url-stats: a code or a full short URL
    shorturl: Option<String>,
    /// stats: top (default), bottom, last or rand
    filter: Option<String>,
    /// stats: how many links (none when absent), at most 1,000
    limit: Option<String>,
    /// stats: how many to skip
    start: Option<String>,
    /// version: 1 adds the database version
    db: Option<String>,
}

/// `GET /yourls-api.php`: the parameters in the query.
#[utoipa::path(
    get,
    path = "/yourls-api.php",
    tag = "yourls",
    operation_id = "yourls_api",
    params(YourlsFields),
    responses(Answers)
)]
pub(crate) async fn api(
    State(state): State<AppState>,
    ClientAddr(peer): ClientAddr,
    HostDomain(domain): HostDomain,
    headers: HeaderMap,
    params: Params,
) -> Response {
    let format = match Format::of(&params) {
        Ok(format) => format,
        Err(e) => return e.into_response(),
    };
    let auth = YourlsAuth {
        signature: params.get("signature"),
        timestamp: params.get("timestamp"),
        hash: params.get("hash"),
        username: params.get("username"),
        password: params.get("password"),
    };
    let client = state.trust_proxy.creator(peer, &headers);
    let caller = match state.links.yourls_caller(&auth, client.map(|c| c.ip)).await {
        Ok(caller) => caller,
        Err(YourlsRefusal::Auth(message)) => return refused(message).render(format),
        Err(YourlsRefusal::Links(e)) => return failure(e),
    };
    let call = Call {
        state: &state,
        headers: &headers,
        caller: caller.as_ref(),
        domain,
        params: &params,
    };
    let answer = match params.get("action") {
        Some("shorturl") => call.shorten(client).await,
        Some("expand") => call.expand().await,
        Some("url-stats") => call.url_stats().await,
        Some("stats") => call.stats().await,
        Some("db-stats") => call.db_stats().await,
        Some("version") => Ok(version(&params)),
        _ => Ok(Answer::new(
            vec![
                ("errorCode", text("400")),
                ("message", text(UNKNOWN_ACTION)),
            ],
            Some(UNKNOWN_ACTION.to_owned()),
        )),
    };
    match answer {
        Ok(answer) => answer.render(format),
        Err(Refusal::Auth) => refused(auth.refusal().to_string().as_str()).render(format),
        Err(Refusal::Other(e)) => failure(e),
    }
}

/// `POST /yourls-api.php`: the same parameters, in the query or an
/// `application/x-www-form-urlencoded` body (which wins, as in PHP).
#[utoipa::path(post, path = "/yourls-api.php", tag = "yourls", operation_id = "yourls_api_form",
    request_body(content = YourlsFields, content_type = "application/x-www-form-urlencoded",
        description = "The GET route's parameters, as a form"),
    responses(Answers))]
pub(crate) async fn api_form(
    state: State<AppState>,
    peer: ClientAddr,
    host: HostDomain,
    headers: HeaderMap,
    params: Params,
) -> Response {
    api(state, peer, host, headers, params).await
}

/// Why an action was not answered in its own shape.
enum Refusal {
    /// It needs credentials, and none were sent.
    Auth,
    Other(LinksError),
}

impl From<LinksError> for Refusal {
    fn from(e: LinksError) -> Self {
        match e {
            LinksError::NeedsKey(_) => Self::Auth,
            e => Self::Other(e),
        }
    }
}

fn version(params: &Params) -> Answer {
    let mut fields = vec![("version", text(VERSION))];
    // PHP's `$_REQUEST['db'] == 1` compares as numbers.
    if params
        .get("db")
        .and_then(|d| d.trim().parse::<f64>().ok())
        .is_some_and(|d| d == 1.0)
    {
        fields.push(("db_version", text(DB_VERSION)));
    }
    Answer::new(fields, Some(VERSION.to_owned()))
}

/// One request's action, with what every action reads.
struct Call<'a> {
    state: &'a AppState,
    headers: &'a HeaderMap,
    caller: Option<&'a Principal>,
    /// The domain the request's `Host` names.
    domain: DomainId,
    params: &'a Params,
}

/// YOURLS's `yourls_trim_long_string`: at most 60 characters, the last
/// five of them `[...]` when cut.
fn trimmed(s: &str) -> String {
    if s.chars().count() > 60 {
        let mut cut: String = s.chars().take(55).collect();
        cut.push_str("[...]");
        cut
    } else {
        s.to_owned()
    }
}

/// A `shorturl` that failed, in YOURLS's shape.
fn failed(code: &str, message: String) -> Answer {
    Answer::new(
        vec![
            ("status", text("fail")),
            ("code", text(code)),
            ("message", text(message)),
            ("errorCode", text("400")),
            ("statusCode", text("400")),
        ],
        Some(String::new()),
    )
}

/// A link as `shorturl` shows it under `url`: with its `clicks` when it
/// existed already, as YOURLS shows a stored row.
fn url_of(link: &Link, with_clicks: bool) -> Out {
    let mut fields = vec![
        ("keyword".into(), text(link.code.as_str())),
        ("url".into(), text(link.target.as_str())),
        ("title".into(), text(title_of(link))),
        ("date".into(), text(link.created_at.ymd_hms())),
        ("ip".into(), text("")),
    ];
    if with_clicks {
        fields.push(("clicks".into(), Out::Int(clicks(link))));
    }
    Out::Map(fields)
}

fn title_of(link: &Link) -> String {
    link.labels.title.clone().unwrap_or_default()
}

fn clicks(link: &Link) -> u64 {
    link.visits.saturating_add(link.imported_visits)
}

impl Call<'_> {
    fn short_url(&self, link: &Link) -> String {
        self.state.short_url(self.headers, &link.key())
    }

    /// A link as `url-stats` and `stats` show it.
    fn stats_of(&self, link: &Link) -> Out {
        Out::Map(vec![
            ("shorturl".into(), text(self.short_url(link))),
            ("url".into(), text(link.target.as_str())),
            ("title".into(), text(title_of(link))),
            ("timestamp".into(), text(link.created_at.ymd_hms())),
            ("ip".into(), text("")),
            ("clicks".into(), Out::Int(clicks(link))),
        ])
    }

    fn caller(&self) -> Result<&Principal, Refusal> {
        self.caller.ok_or(Refusal::Auth)
    }

    async fn shorten(
        &self,
        client: Option<crate::links::limit::Client>,
    ) -> Result<Answer, Refusal> {
        let raw = self.params.get("url").unwrap_or_default().trim();
        if raw.is_empty() || raw == "http://" || raw == "https://" {
            return Ok(failed("error:nourl", "Missing or malformed URL".into()));
        }
        let url = match TargetUrl::from_text(raw) {
            Ok(url) => url,
            Err(why) => {
                return Ok(failed(
                    "error:nourl",
                    format!("Missing or malformed URL: {why}"),
                ));
            }
        };
        let keyword = match self.params.given("keyword") {
            None => None,
            Some(_) if self.caller.is_none() => return Err(Refusal::Auth),
            Some(k) => match Alias::from_text(k) {
                Ok(alias) => Some(alias),
                Err(why) => {
                    return Ok(failed(
                        "error:keyword",
                        format!("Short URL {k} is not a keyword this server takes: {why}"),
                    ));
                }
            },
        };
        let title = match self.params.given("title") {
            None => None,
            Some(t) => match Title::from_text(t) {
                Ok(title) => Some(title),
                Err(why) => return Ok(failed("error:title", format!("Title refused: {why}"))),
            },
        };
        let asker = crate::links::Asker {
            caller: self.caller,
            client,
            host: self.state.host(self.headers),
        };
        let ask = ShortenRequest {
            domain: self.domain,
            url,
            keyword: keyword.clone(),
            title,
        };
        let done = match self.state.links.yourls_shorten(&asker, ask).await {
            Ok(done) => done,
            Err(LinksError::Invalid(why)) => return Ok(failed("error:url", why)),
            Err(e) => return Err(e.into()),
        };
        Ok(match done {
            Shortened::Created(link) => {
                let short_url = self.short_url(&link);
                let url = link.target.as_str();
                Answer::new(
                    vec![
                        ("status", text("success")),
                        ("code", text("")),
                        (
                            "message",
                            text(format!("{} added to database", trimmed(url))),
                        ),
                        ("errorCode", text("")),
                        ("statusCode", text("200")),
                        ("url", url_of(&link, false)),
                        ("title", text(title_of(&link))),
                        ("shorturl", text(short_url.clone())),
                    ],
                    Some(short_url),
                )
            }
            Shortened::Exists(link) => {
                let short_url = self.short_url(&link);
                let url = link.target.as_str();
                let bare = short_url
                    .strip_prefix("https://")
                    .or_else(|| short_url.strip_prefix("http://"))
                    .unwrap_or(&short_url);
                Answer::new(
                    vec![
                        ("status", text("fail")),
                        ("code", text("error:url")),
                        (
                            "message",
                            text(format!(
                                "{} already exists in database (short URL: {bare})",
                                trimmed(url)
                            )),
                        ),
                        ("errorCode", text("400")),
                        ("statusCode", text("400")),
                        ("url", url_of(&link, true)),
                        ("title", text(title_of(&link))),
                        ("shorturl", text(short_url.clone())),
                    ],
                    Some(short_url),
                )
            }
            Shortened::Loop => failed("error:noloop", "URL is a short URL".into()),
            Shortened::Taken => failed(
                "error:keyword",
                format!(
                    "Short URL {} already exists in database or is reserved",
                    keyword.map(|k| k.0.to_string()).unwrap_or_default()
                ),
            ),
        })
    }

    /// The link `shorturl=` names (a code, or a full short URL), and the
    /// keyword as shown back; `None` for what cannot be a code.
    fn named(&self) -> (String, Option<LinkKey>) {
        let asked = self.params.get("shorturl").unwrap_or_default().trim();
        let (domain, keyword) = match url::Url::parse(asked) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {
                let domain = url
                    .host_str()
                    .and_then(|h| {
                        let host = match url.port() {
                            Some(port) => format!("{h}:{port}"),
                            None => h.to_owned(),
                        };
                        self.state.links.domains().of_request(Some(host.as_bytes()))
                    })
                    .unwrap_or(self.domain);
                (domain, url.path().trim_start_matches('/').to_owned())
            }
            _ => (self.domain, asked.to_owned()),
        };
        let key = ShortCode::parse(&keyword)
            .ok()
            .map(|code| LinkKey::new(domain, code));
        (keyword, key)
    }

    async fn expand(&self) -> Result<Answer, Refusal> {
        let (keyword, key) = self.named();
        let found = match &key {
            Some(key) => self.state.links.yourls_expand(key).await?,
            None => None,
        };
        Ok(match found {
            Some((link, target)) => {
                let longurl = target.as_str().to_owned();
                Answer::new(
                    vec![
                        ("keyword", text(keyword)),
                        ("shorturl", text(self.short_url(&link))),
                        ("longurl", text(longurl.clone())),
                        ("title", text(title_of(&link))),
                        ("message", text("success")),
                        ("statusCode", text("200")),
                    ],
                    Some(longurl),
                )
            }
            None => Answer::new(
                vec![
                    ("keyword", text(keyword)),
                    ("message", text(NOT_FOUND)),
                    ("errorCode", text("404")),
                ],
                Some("not found".into()),
            ),
        })
    }

    async fn url_stats(&self) -> Result<Answer, Refusal> {
        let caller = self.caller()?;
        let (_, key) = self.named();
        let found = match &key {
            Some(key) => self.state.links.yourls_link(caller, key).await?,
            None => None,
        };
        let simple = Some(STATS_ONLY_STRUCTURED.to_owned());
        Ok(match found {
            Some(link) => Answer::new(
                vec![
                    ("statusCode", text("200")),
                    ("message", text("success")),
                    ("link", self.stats_of(&link)),
                ],
                simple,
            ),
            None => Answer::new(
                vec![("statusCode", text("404")), ("message", text(NOT_FOUND))],
                simple,
            ),
        })
    }

    async fn stats(&self) -> Result<Answer, Refusal> {
        let caller = self.caller()?;
        let rank = match self.params.get("filter") {
            Some("bottom") => Rank::LeastVisited,
            Some("last") => Rank::Newest,
            Some("rand" | "random") => Rank::Random,
            _ => Rank::MostVisited,
        };
        let limit = php_int(self.params.get("limit"));
        let start = php_int(self.params.get("start")).max(0);
        let page = (limit > 0).then(|| {
            (
                rank,
                start.unsigned_abs(),
                usize::try_from(limit).unwrap_or(usize::MAX),
            )
        });
        let (totals, links) = self
            .state
            .links
            .yourls_stats(caller, self.domain, page)
            .await?;
        let mut fields = Vec::new();
        if !links.is_empty() {
            let listed = links
                .iter()
                .enumerate()
                .map(|(i, link)| (format!("link_{}", i + 1), self.stats_of(link)))
                .collect();
            fields.push(("links", Out::Map(listed)));
        }
        fields.extend([
            ("stats", totals_of(totals)),
            ("statusCode", text("200")),
            ("message", text("success")),
        ]);
        Ok(Answer::new(fields, Some(STATS_ONLY_STRUCTURED.to_owned())))
    }

    async fn db_stats(&self) -> Result<Answer, Refusal> {
        let caller = self.caller()?;
        let (totals, _) = self
            .state
            .links
            .yourls_stats(caller, self.domain, None)
            .await?;
        Ok(Answer::new(
            vec![
                ("db-stats", totals_of(totals)),
                ("statusCode", text("200")),
                ("message", text("success")),
            ],
            Some(STATS_ONLY_STRUCTURED.to_owned()),
        ))
    }
}

fn totals_of(totals: LinkTotals) -> Out {
    Out::Map(vec![
        ("total_links".into(), Out::Int(totals.links)),
        ("total_clicks".into(), Out::Int(totals.visits)),
    ])
}

/// The integer PHP's `intval` reads at the start of a parameter (0 for
/// none).
fn php_int(value: Option<&str>) -> i64 {
    crate::keys::php_int(value.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_urls_are_cut_as_yourls_cuts_them() {
        let long = format!("https://example.com/{}", "a".repeat(80));
        let cut = trimmed(&long);
        assert_eq!(cut.chars().count(), 60);
        assert!(cut.ends_with("[...]"));
        assert_eq!(trimmed("https://example.com/"), "https://example.com/");
    }

    #[test]
    fn xml_escapes_every_text() {
        let out = xml(&[(
            "message".into(),
            text("<a href=\"x\">&amp;</a>\u{1}\ttab\r"),
        )]);
        assert_eq!(
            out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<root><message>\
             &lt;a href=\"x\"&gt;&amp;amp;&lt;/a&gt;tab&#13;</message></root>\n"
        );
    }

    #[test]
    fn the_status_is_status_code_then_error_code() {
        let a = Answer::new(vec![("errorCode", text("404"))], None);
        assert_eq!(a.status(), StatusCode::NOT_FOUND);
        let a = Answer::new(
            vec![("errorCode", text("")), ("statusCode", text("200"))],
            None,
        );
        assert_eq!(a.status(), StatusCode::OK);
        let a = Answer::new(vec![("version", text("1.10.4"))], None);
        assert_eq!(a.status(), StatusCode::OK);
    }
}
