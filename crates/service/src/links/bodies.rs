//! What a client sends to create or change a link, and the link as it is
//! shown: serde types that are also the OpenAPI document's schemas, so the
//! document describes exactly what is read. Each value parses itself
//! ([`crate::domain::wire`]); what depends on the server's state (the deny
//! list, its own hosts, the domains in use, the clock) and on several
//! fields at once is checked by [`super::Links`].

use serde::{Deserialize, Deserializer, Serialize};
use utoipa::ToSchema;

use crate::domain::rules::{Rule, RuleSpec};
use crate::domain::wire::{Patch, not_null, required};
use crate::domain::{Alias, Link, Password, Rules, Tags, TargetUrl, Timestamp, Title};

/// The body of a create (`POST /link`, `POST /api/v1/links`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewLink)]
pub(crate) struct NewLinkBody {
    /// Where the link leads (at most 4,096 bytes).
    #[serde(deserialize_with = "required")]
    pub url: TargetUrl,
    #[serde(default)]
    pub code: Option<Alias>,
    /// The link's domain: a host added to this server, or `default`
    /// (when absent, a domain-limited key's own domain, else the default
    /// domain); 400 when there is no such domain.
    #[serde(default)]
    #[schema(max_length = 253)]
    pub domain: Option<String>,
    /// When the link stops redirecting (in the future).
    #[serde(default)]
    pub expires_at: Option<Timestamp>,
    /// Redirects the link serves before it answers 410.
    #[serde(default, deserialize_with = "max_visits")]
    #[schema(minimum = 1, maximum = 9223372036854775807i64)]
    pub max_visits: Option<u64>,
    #[serde(default)]
    pub password: Option<Password>,
    /// Targeted redirects, at most 16, tried in order; `null` or `[]` is
    /// none.
    #[serde(default)]
    #[schema(value_type = Option<Vec<RuleSpec>>, max_items = 16)]
    pub rules: Option<Rules>,
    /// Where the link sends visitors once expired or out of visits,
    /// instead of 410.
    #[serde(default)]
    pub expired_url: Option<TargetUrl>,
    #[serde(default)]
    pub title: Option<Title>,
    #[serde(default)]
    pub tags: Option<Tags>,
}

/// A create's body read as the server reads it: its target, or what is
/// wrong (the fuzz target's way in).
pub fn read_create(body: &[u8]) -> Result<TargetUrl, crate::domain::wire::BodyError> {
    crate::domain::wire::from_json::<NewLinkBody>(body).map(|b| b.url)
}

/// The body of an edit (`PATCH /api/v1/links/{code}`): any of its fields;
/// `null` clears an expiry, a visit limit, the password, the rules, the
/// expired target or the title; `[]` (or `null`) clears the tags.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = LinkPatch)]
pub(crate) struct LinkPatchBody {
    /// A new target, checked as a create's.
    #[serde(default, deserialize_with = "not_null")]
    pub url: Option<TargetUrl>,
    #[serde(default)]
    #[schema(value_type = Option<Timestamp>)]
    pub expires_at: Patch<Timestamp>,
    #[serde(default, deserialize_with = "max_visits_patch")]
    #[schema(value_type = Option<i64>, minimum = 1, maximum = 9223372036854775807i64)]
    pub max_visits: Patch<u64>,
    #[serde(default)]
    #[schema(value_type = Option<Password>)]
    pub password: Patch<Password>,
    /// Targeted redirects, at most 16; `null` or `[]` removes them.
    #[serde(default)]
    #[schema(value_type = Option<Vec<RuleSpec>>, max_items = 16)]
    pub rules: Patch<Rules>,
    #[serde(default)]
    #[schema(value_type = Option<TargetUrl>)]
    pub expired_url: Patch<TargetUrl>,
    #[serde(default)]
    #[schema(value_type = Option<Title>)]
    pub title: Patch<Title>,
    #[serde(default)]
    #[schema(value_type = Option<Tags>)]
    pub tags: Patch<Tags>,
}

/// `max_visits`: a whole number from 1 to `i64::MAX`, or null (no limit).
fn max_visits<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let Some(n) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    match n.as_u64() {
        Some(m) if (1..=i64::MAX as u64).contains(&m) => Ok(Some(m)),
        _ => Err(serde::de::Error::custom(format!(
            "must be a whole number from 1 to {}, not {n}",
            i64::MAX
        ))),
    }
}

fn max_visits_patch<'de, D: Deserializer<'de>>(d: D) -> Result<Patch<u64>, D::Error> {
    Ok(max_visits(d)?.map_or(Patch::Clear, Patch::Set))
}

/// A link as the management API shows it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Link)]
pub(crate) struct LinkView {
    /// The link's domain: its host, or null on a default domain without
    /// one.
    pub domain: Option<String>,
    pub code: String,
    /// The target; null on a protected link for a caller who is neither
    /// its owner nor an admin (a viewer).
    pub url: Option<TargetUrl>,
    pub short_url: String,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub expired: bool,
    /// The name of the user who owns it.
    pub owner: Option<String>,
    /// Counted redirects, those not yet flushed included.
    pub visits: u64,
    /// Visits carried over from another shortener without a time: in the
    /// visit report's total, never toward `max_visits`.
    pub imported_visits: u64,
    pub max_visits: Option<u64>,
    /// Whether a visitor needs a password (the hash is never shown).
    pub protected: bool,
    /// Targeted redirects, tried in order.
    #[schema(value_type = Vec<RuleSpec>)]
    pub rules: Vec<Rule>,
    /// Where the link sends visitors once expired or out of visits.
    pub expired_url: Option<TargetUrl>,
    /// Its title, as its owner gave it.
    pub title: Option<String>,
    /// Its tags, each as first written on this server.
    pub tags: Vec<String>,
}

impl LinkView {
    /// `link` as shown, on the domain of host `domain`, at `short_url`;
    /// without `secrets`, a protected link's targets are left out.
    pub(crate) fn new(
        link: Link,
        domain: Option<String>,
        short_url: String,
        secrets: bool,
    ) -> Self {
        let expired = link.resolved().is_expired();
        let extra = link.extra.as_deref();
        let protected = extra.is_some_and(|e| e.password.is_some());
        let shown = secrets || !protected;
        Self {
            domain,
            code: link.code.to_string(),
            short_url,
            expired,
            protected,
            rules: extra
                .filter(|_| shown)
                .map(|e| e.rules.clone())
                .unwrap_or_default(),
            expired_url: extra.filter(|_| shown).and_then(|e| e.expired_url.clone()),
            url: shown.then_some(link.target),
            created_at: link.created_at,
            expires_at: link.expires_at,
            owner: link.owner.map(|o| o.name),
            visits: link.visits,
            imported_visits: link.imported_visits,
            max_visits: link.max_visits,
            title: link.labels.title,
            tags: link.labels.tags,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::wire::from_json;

    #[test]
    fn a_create_reads_each_field_once_and_names_what_is_wrong() {
        let body: NewLinkBody = from_json(
            br#"{"url": "HTTPS://Example.COM", "code": "my-link", "max_visits": 3,
                 "rules": [{"if": {"device": "ios"}, "url": "https://a.example/"}]}"#,
        )
        .expect("valid");
        assert_eq!(body.url.as_str(), "https://example.com/");
        assert_eq!(
            body.code.map(|a| a.0.to_string()).as_deref(),
            Some("my-link")
        );
        assert_eq!(body.max_visits, Some(3));
        assert_eq!(body.rules.map(|r| r.0.len()), Some(1));
        for (raw, want) in [
            (&br#"{"url": ""}"#[..], "url: url must not be empty"),
            (
                br#"{"url": "ftp://x.y"}"#,
                "url: url scheme must be http or https",
            ),
            (
                br#"{"url": "https://a.b/", "code": "app"}"#,
                "code: code 'app' is reserved",
            ),
            (
                br#"{"url": "https://a.b/", "max_visits": 0}"#,
                "max_visits: must be a whole",
            ),
            (
                br#"{"url": "https://a.b/", "max_visits": "1"}"#,
                "max_visits: must be",
            ),
            (
                br#"{"url": "https://a.b/", "expires_at": "soon"}"#,
                "expires_at: 'soon' is not",
            ),
            (
                br#"{"url": "https://a.b/", "password": ""}"#,
                "password: must be 1 to 1024",
            ),
            (
                br#"{"url": "https://a.b/", "expire_at": 1}"#,
                "unknown field 'expire_at'",
            ),
        ] {
            let e = from_json::<NewLinkBody>(raw).expect_err("refused");
            assert!(e.0.starts_with(want), "{e} / {want}");
        }
    }

    #[test]
    fn a_patch_tells_left_out_from_null() {
        let body: LinkPatchBody =
            from_json(br#"{"expires_at": null, "max_visits": 5, "rules": []}"#).expect("valid");
        assert!(body.url.is_none());
        assert_eq!(body.expires_at, Patch::Clear);
        assert_eq!(body.max_visits, Patch::Set(5));
        assert_eq!(body.password, Patch::Keep);
        assert_eq!(body.rules, Patch::Set(Rules::default()));
        let e = from_json::<LinkPatchBody>(br#"{"url": null}"#).expect_err("null url");
        assert!(e.0.contains("url"), "{e}");
    }
}
