//! Rows of the schema as domain values: one place that knows the columns.

use std::sync::Arc;

use rusqlite::Row;

use crate::domain::{
    Domain, DomainId, DomainRedirects, Host, KeyId, Labels, Link, LinkRules, Owner, Role,
    ShortCode, TargetUrl, Timestamp, UserId,
};
use crate::store::{ApiKey, ExtraColumns, Session, User};

/// The columns [`link`] reads, from `links l LEFT JOIN users u`.
pub(super) const LINK_COLUMNS: &str = "l.code, l.target, l.created_at, l.expires_at, l.owner, \
     u.name, l.max_visits, l.visits, l.domain, l.password, l.rules, l.expired_url, l.title, \
     l.tags, l.imported_visits";

/// `FROM` clause for [`LINK_COLUMNS`].
pub(super) const LINK_FROM: &str = "links l LEFT JOIN users u ON u.id = l.owner";

/// The key by which a live link is found by its target: the first 8 bytes
/// of the target's SHA-256, as an integer. It keeps the index a third the
/// size of one on the whole hash; the query compares the target itself,
/// so a collision costs a row read, never a wrong answer.
pub(super) fn target_key(target: &str) -> i64 {
    let hash = crate::store::target_hash(target);
    i64::from_be_bytes([
        hash[0], hash[1], hash[2], hash[3], hash[4], hash[5], hash[6], hash[7],
    ])
}

pub(super) fn link(row: &Row<'_>) -> rusqlite::Result<Link> {
    link_at(row, 0)
}

/// [`link`] for a row whose [`LINK_COLUMNS`] start at column `at`.
pub(super) fn link_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Link> {
    let owner = match (
        row.get::<_, Option<i64>>(at + 4)?,
        row.get::<_, Option<String>>(at + 5)?,
    ) {
        (Some(id), Some(name)) => Some(Owner {
            id: UserId(id),
            name,
        }),
        _ => None,
    };
    Ok(Link {
        domain: DomainId(row.get(at + 8)?),
        code: ShortCode::from_trusted(row.get_ref(at)?.as_str()?),
        target: TargetUrl::from_trusted(row.get_ref(at + 1)?.as_str()?),
        created_at: Timestamp::from_millis(row.get(at + 2)?),
        expires_at: row
            .get::<_, Option<i64>>(at + 3)?
            .map(Timestamp::from_millis),
        owner,
        max_visits: row.get::<_, Option<i64>>(at + 6)?.map(|n| n.max(0) as u64),
        visits: row.get::<_, i64>(at + 7)?.max(0) as u64,
        imported_visits: row.get::<_, i64>(at + 14)?.max(0) as u64,
        extra: extra_at(row, at + 9)?,
        labels: Labels {
            title: row.get(at + 12)?,
            tags: tags_of(row.get_ref(at + 13)?.as_str_or_null()?),
        },
    })
}

/// A link's tags from their `|`-joined column (a tag has no `|`).
pub(super) fn tags_of(joined: Option<&str>) -> Vec<String> {
    joined
        .map(|t| t.split('|').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The password, rules and expired target in columns `at..at + 3`.
pub(super) fn extra_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Option<Arc<LinkRules>>> {
    ExtraColumns::read(
        row.get_ref(at)?.as_str_or_null()?,
        row.get_ref(at + 1)?.as_str_or_null()?,
        row.get_ref(at + 2)?.as_str_or_null()?,
    )
    .map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(at, rusqlite::types::Type::Text, e.into())
    })
}

/// The columns [`key`] reads, from `keys k JOIN users u ON u.id = k.user_id`:
/// a key works on its own domain, else on its user's.
pub(super) const KEY_COLUMNS: &str = "k.id, k.name, k.hash, k.created_at, k.last_used_at, \
     k.revoked_at, coalesce(k.domain, u.domain), k.user_id, u.name, u.role, \
     (u.disabled_at IS NOT NULL OR u.suspended_at IS NOT NULL)";

pub(super) fn key(row: &Row<'_>) -> rusqlite::Result<ApiKey> {
    let hash: Vec<u8> = row.get(2)?;
    let hash: [u8; 32] = hash.try_into().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            2,
            rusqlite::types::Type::Blob,
            "a key hash is 32 bytes".into(),
        )
    })?;
    Ok(ApiKey {
        id: KeyId(row.get(0)?),
        name: row.get(1)?,
        hash,
        created_at: Timestamp::from_millis(row.get(3)?),
        last_used_at: row.get::<_, Option<i64>>(4)?.map(Timestamp::from_millis),
        revoked_at: row.get::<_, Option<i64>>(5)?.map(Timestamp::from_millis),
        domain: row.get::<_, Option<i64>>(6)?.map(DomainId),
        user: UserId(row.get(7)?),
        user_name: row.get(8)?,
        role: role_at(row, 9)?,
        user_disabled: row.get(10)?,
    })
}

fn role_at(row: &Row<'_>, at: usize) -> rusqlite::Result<Role> {
    row.get_ref(at)?.as_str()?.parse().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            at,
            rusqlite::types::Type::Text,
            "an unknown role".into(),
        )
    })
}

/// The columns [`user`] reads, from `users u`.
pub(super) const USER_COLUMNS: &str = "u.id, u.name, u.email, u.role, u.domain, u.password, \
     u.must_change, u.disabled_at IS NOT NULL, u.created_at, u.suspended_at IS NOT NULL";

pub(super) fn user(row: &Row<'_>) -> rusqlite::Result<User> {
    Ok(User {
        id: UserId(row.get(0)?),
        name: row.get(1)?,
        email: row.get(2)?,
        role: role_at(row, 3)?,
        domain: row.get::<_, Option<i64>>(4)?.map(DomainId),
        password: row.get(5)?,
        must_change: row.get(6)?,
        disabled: row.get(7)?,
        created_at: Timestamp::from_millis(row.get(8)?),
        suspended: row.get(9)?,
    })
}

/// A session: [`USER_COLUMNS`] of its user, then its role, start and
/// last sight.
pub(super) fn session(row: &Row<'_>) -> rusqlite::Result<Session> {
    Ok(Session {
        user: user(row)?,
        role: role_at(row, 10)?,
        created_at: Timestamp::from_millis(row.get(11)?),
        seen_at: Timestamp::from_millis(row.get(12)?),
    })
}

/// The columns [`domain`] reads, from `domains`.
pub(super) const DOMAIN_COLUMNS: &str =
    "id, host, root_redirect, not_found_redirect, expired_redirect";

pub(super) fn domain(row: &Row<'_>) -> rusqlite::Result<Domain> {
    let url = |i: usize| -> rusqlite::Result<Option<TargetUrl>> {
        Ok(row
            .get_ref(i)?
            .as_str_or_null()?
            .map(TargetUrl::from_trusted))
    };
    Ok(Domain {
        id: DomainId(row.get(0)?),
        host: row.get_ref(1)?.as_str_or_null()?.map(Host::from_trusted),
        redirects: DomainRedirects {
            root: url(2)?,
            not_found: url(3)?,
            expired: url(4)?,
        },
    })
}
