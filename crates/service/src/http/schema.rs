//! The request and error bodies as the OpenAPI document describes them:
//! what the handlers' `#[utoipa::path]` attributes name, apart from the
//! document itself ([`super::openapi`]), which names the handlers.

use serde::Serialize;
use utoipa::ToSchema;

/// Every error answer's body.
#[derive(Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorMessage {
    /// What was wrong, in words; never an internal detail.
    pub error: String,
}

/// The body of a create, as the document describes it. The extractor
/// (`extract::NewLinkBody`) checks each field by hand so that every
/// mistake has its own message; this is the same contract, for clients.
#[derive(ToSchema)]
#[schema(as = NewLink)]
#[allow(dead_code)]
pub struct NewLinkRequest {
    /// An http or https URL (at most 4,096 bytes) without user info;
    /// stored and served in its canonical (WHATWG) form.
    #[schema(
        min_length = 1,
        max_length = 4096,
        format = "uri",
        example = "https://example.com/a?b=c"
    )]
    url: String,
    /// A custom code (needs an API key): 3 to 64 of `[A-Za-z0-9_-]`, not a
    /// reserved name; 409 when taken.
    #[schema(nullable, pattern = "^[A-Za-z0-9_-]{3,64}$")]
    code: Option<String>,
    /// The link's domain: a host added to this server, or `default`
    /// (when absent, a domain-limited key's own domain, else the default
    /// domain); 400 when there is no such domain.
    #[schema(nullable, max_length = 253)]
    domain: Option<String>,
    /// When the link stops redirecting (RFC 3339, in the future).
    #[schema(nullable, format = DateTime)]
    expires_at: Option<String>,
    /// Redirects the link serves before it answers 410.
    #[schema(nullable, minimum = 1, maximum = 9223372036854775807i64)]
    max_visits: Option<i64>,
    /// A password visitors must give (1 to 1,024 bytes); stored only as
    /// an Argon2id hash. `null` removes it.
    #[schema(nullable, min_length = 1, max_length = 1024)]
    password: Option<String>,
    /// Targeted redirects, at most 16, tried in order; `null` or `[]`
    /// removes them.
    #[schema(nullable, max_items = 16)]
    rules: Option<Vec<RuleRequest>>,
    /// Where the link sends visitors once expired or out of visits,
    /// instead of 410.
    #[schema(nullable, min_length = 1, max_length = 4096, format = "uri")]
    expired_url: Option<String>,
}

/// The body of an edit: any of its fields; `null` clears an expiry or a
/// visit limit.
#[derive(ToSchema)]
#[schema(as = LinkPatch)]
#[allow(dead_code)]
pub struct PatchRequest {
    /// A new target, with the rules of a create.
    #[schema(min_length = 1, max_length = 4096, format = "uri")]
    url: Option<String>,
    #[schema(nullable, format = DateTime)]
    expires_at: Option<String>,
    #[schema(nullable, minimum = 1, maximum = 9223372036854775807i64)]
    max_visits: Option<i64>,
    /// A password visitors must give (1 to 1,024 bytes); stored only as
    /// an Argon2id hash. `null` removes it.
    #[schema(nullable, min_length = 1, max_length = 1024)]
    password: Option<String>,
    /// Targeted redirects, at most 16, tried in order; `null` or `[]`
    /// removes them.
    #[schema(nullable, max_items = 16)]
    rules: Option<Vec<RuleRequest>>,
    /// Where the link sends visitors once expired or out of visits,
    /// instead of 410.
    #[schema(nullable, min_length = 1, max_length = 4096, format = "uri")]
    expired_url: Option<String>,
}

/// A targeted redirect: when every condition in `if` holds, `url`, or one
/// of `split`'s targets drawn by weight. Each condition's value is one
/// value or an array of them (any may match): `device` (`ios`,
/// `android`, `mobile`, `desktop`), `language` (a primary tag such as
/// `de`, against the most preferred in `Accept-Language`), `country`
/// (ISO 3166 alpha-2), `query` (`{"name": "value"}` against the short
/// URL's query), `after` and `before` (RFC 3339). An invalid rule is a 400
/// naming its index and field (`rules[2].if.device`).
#[derive(ToSchema)]
#[schema(as = Rule)]
#[allow(dead_code)]
pub struct RuleRequest {
    #[schema(rename = "if", value_type = Object)]
    conditions: Option<serde_json::Value>,
    #[schema(min_length = 1, max_length = 4096, format = "uri")]
    url: Option<String>,
    #[schema(max_items = 16)]
    split: Option<Vec<SplitTarget>>,
}

/// One target of a split, chosen with the chance weight / sum of weights.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct SplitTarget {
    #[schema(min_length = 1, max_length = 4096, format = "uri")]
    url: String,
    #[schema(minimum = 1, maximum = 1000000)]
    weight: u32,
}

/// The password form of a link behind one.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct UnlockForm {
    #[schema(min_length = 1, max_length = 1024)]
    password: String,
}

/// The body of `POST /api/v1/domains`.
#[derive(ToSchema)]
#[schema(as = NewDomain)]
#[allow(dead_code)]
pub struct NewDomainRequest {
    /// A host name (an internationalised one in either form); stored
    /// lowercase, in ASCII.
    #[schema(min_length = 1, max_length = 253, example = "go.example.com")]
    host: String,
    /// Where `GET /` on the domain goes (the page when absent).
    #[schema(nullable, format = "uri", max_length = 4096)]
    root_redirect: Option<String>,
    /// Where an unknown or deleted code goes (404 when absent).
    #[schema(nullable, format = "uri", max_length = 4096)]
    not_found_redirect: Option<String>,
    /// Where an expired link, or one out of visits, goes (410 when absent).
    #[schema(nullable, format = "uri", max_length = 4096)]
    expired_redirect: Option<String>,
}

/// The body of `PATCH /api/v1/domains/{host}`: any of the redirects;
/// `null` clears one.
#[derive(ToSchema)]
#[schema(as = DomainPatch)]
#[allow(dead_code)]
pub struct DomainPatchRequest {
    #[schema(nullable, format = "uri", max_length = 4096)]
    root_redirect: Option<String>,
    #[schema(nullable, format = "uri", max_length = 4096)]
    not_found_redirect: Option<String>,
    #[schema(nullable, format = "uri", max_length = 4096)]
    expired_redirect: Option<String>,
}
