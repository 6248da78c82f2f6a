//! A link as the management API sees it, and the times it carries.

use std::fmt;
use std::sync::Arc;

use serde::{Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{DomainId, LinkKey, LinkRules, ShortCode, TargetUrl};

/// A point in time, in milliseconds since the Unix epoch; written as
/// RFC 3339 in UTC (`2027-03-01T00:00:00Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{0}' is not an RFC 3339 time such as 2027-03-01T00:00:00Z")]
pub struct TimestampError(pub String);

impl Timestamp {
    /// The system clock, in milliseconds. Read as a duration since the
    /// epoch, not as a calendar date: the date's fields cost about 300
    /// instructions a call, and a redirect reads the clock for its visit.
    pub(crate) fn now() -> Self {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Self(i64::try_from(since_epoch.as_millis()).unwrap_or(i64::MAX))
    }

    pub(crate) fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    pub(crate) fn millis(self) -> i64 {
        self.0
    }

    /// An RFC 3339 time. A leap second (`23:59:60`) is refused wherever a
    /// time is read: Unix time, which every stored time is, has none.
    pub(crate) fn parse(raw: &str) -> Result<Self, TimestampError> {
        // `YYYY-MM-DDTHH:MM:SS`: the seconds are bytes 17 and 18.
        if raw.get(17..19) == Some("60") {
            return Err(TimestampError(raw.into()));
        }
        let t = OffsetDateTime::parse(raw, &Rfc3339).map_err(|_| TimestampError(raw.into()))?;
        let ms = t.unix_timestamp_nanos() / 1_000_000;
        i64::try_from(ms)
            .map(Self)
            .map_err(|_| TimestampError(raw.into()))
    }
}

impl Timestamp {
    /// `Y-m-d H:i:s` in UTC, to the second: how YOURLS writes a time.
    pub(crate) fn ymd_hms(self) -> String {
        let t = OffsetDateTime::from_unix_timestamp(self.0.div_euclid(1000))
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(self.0) * 1_000_000)
            .map_err(|_| fmt::Error)?;
        let s = t.format(&Rfc3339).map_err(|_| fmt::Error)?;
        f.write_str(&s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl super::wire::FromText for Timestamp {
    const EXPECTING: &'static str = "an RFC 3339 time string";

    fn from_text(text: &str) -> Result<Self, String> {
        Self::parse(text).map_err(|e| e.to_string())
    }
}

super::wire::deserialize_from_text!(Timestamp);

super::wire::string_schema!(
    Timestamp,
    "Time",
    super::wire::StringSchema {
        format: Some("date-time"),
        min_length: None,
        max_length: None,
        pattern: None,
        description: "A time in RFC 3339 (2027-03-01T00:00:00Z); written back in UTC",
    }
);

/// An API key's row id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub i64);

/// Who owns a link: a user, by id and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub id: super::UserId,
    pub name: String,
}

/// What a lookup needs: where to send the client, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub target: TargetUrl,
    pub expires_at: Option<Timestamp>,
    /// Redirects after which the link answers 410, bots included.
    pub max_visits: Option<u64>,
    /// Its password, rules and expired target, when it has any.
    pub extra: Option<Arc<LinkRules>>,
}

impl Resolved {
    /// Whether the link has expired at `now`. Links without an expiry
    /// never read the clock.
    pub(crate) fn is_expired(&self) -> bool {
        self.expires_at.is_some_and(|e| e <= Timestamp::now())
    }
}

/// `Some` only when `rules` has anything: a plain link carries none.
pub fn extra_of(rules: LinkRules) -> Option<Arc<LinkRules>> {
    (!rules.is_empty()).then(|| Arc::new(rules))
}

/// A stored, live link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub domain: DomainId,
    pub code: ShortCode,
    pub target: TargetUrl,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub owner: Option<Owner>,
    pub max_visits: Option<u64>,
    /// Counted redirects as stored; the service adds those not yet flushed.
    pub visits: u64,
    /// Visits another shortener counted without saying when (or that its
    /// log did not carry): in a report's total, never toward `max_visits`.
    pub imported_visits: u64,
    /// Its password, rules and expired target, when it has any.
    pub extra: Option<Arc<LinkRules>>,
    /// Its title and tags.
    pub labels: super::Labels,
}

impl Link {
    /// What the link is found by.
    pub(crate) fn key(&self) -> LinkKey {
        LinkKey::new(self.domain, self.code.clone())
    }

    pub(crate) fn resolved(&self) -> Resolved {
        Resolved {
            target: self.target.clone(),
            expires_at: self.expires_at,
            max_visits: self.max_visits,
            extra: self.extra.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip_through_rfc_3339() {
        for s in ["2027-03-01T00:00:00Z", "1970-01-01T00:00:00.001Z"] {
            assert_eq!(Timestamp::parse(s).expect("parses").to_string(), s);
        }
        let t = Timestamp::parse("2027-03-01T01:00:00+01:00").expect("offset");
        assert_eq!(t.to_string(), "2027-03-01T00:00:00Z");
        for bad in ["", "2027-03-01", "tomorrow", "2027-13-01T00:00:00Z"] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
        // A leap second, on a day that may have one or not: one rule.
        for leap in [
            "2026-12-31T23:59:60Z",
            "2027-06-30T23:59:60.5Z",
            "2027-01-15T23:59:60Z",
        ] {
            assert!(Timestamp::parse(leap).is_err(), "{leap}");
        }
    }
}
