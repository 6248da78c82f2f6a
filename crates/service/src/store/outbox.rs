//! Webhooks as a store keeps them, and the outbox of their events: each
//! event is written in the transaction of the change it reports, one row
//! for each webhook that wants it, and leaves only once delivered.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::domain::{DomainId, LinkKey, Owner, ShortCode, TargetUrl, Timestamp, UserId};
use crate::domain::{Labels, Link};
use crate::store::ExtraColumns;

/// What a webhook can be told of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    LinkCreated,
    LinkUpdated,
    LinkDeleted,
    /// Its time ran out, or a visit used up its `max_visits`.
    LinkExpired,
    /// One for each import, with its counts, instead of one for each link.
    LinksImported,
    /// One for each counted visit.
    LinkVisited,
}

impl EventKind {
    pub const ALL: [EventKind; 6] = [
        EventKind::LinkCreated,
        EventKind::LinkUpdated,
        EventKind::LinkDeleted,
        EventKind::LinkExpired,
        EventKind::LinksImported,
        EventKind::LinkVisited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::LinkCreated => "link.created",
            EventKind::LinkUpdated => "link.updated",
            EventKind::LinkDeleted => "link.deleted",
            EventKind::LinkExpired => "link.expired",
            EventKind::LinksImported => "links.imported",
            EventKind::LinkVisited => "link.visited",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Self::parse(&name).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|k| k.as_str()).collect();
            serde::de::Error::custom(format!(
                "unknown event '{name}' (events: {})",
                known.join(", ")
            ))
        })
    }
}

impl EventKind {
    /// Whether the event's data is a link ([`snapshot`]); else it is the
    /// JSON it was recorded with.
    pub fn is_about_a_link(self) -> bool {
        !matches!(self, EventKind::LinksImported | EventKind::LinkVisited)
    }
}

/// A registered webhook, its secrets included (they sign, so they are
/// kept as they are, never shown after the answer that made them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub id: i64,
    pub url: String,
    pub events: Vec<EventKind>,
    /// Only this domain's links; `None`: every domain's.
    pub domain: Option<DomainId>,
    pub enabled: bool,
    pub created_at: Timestamp,
    /// `whsec_<base64>`.
    pub secret: String,
    /// The secret before the last rotation, and until when it still signs.
    pub previous: Option<(String, Timestamp)>,
}

/// The events column: their names, comma-separated, in a fixed order.
pub(crate) fn events_column(events: &[EventKind]) -> String {
    let mut sorted = events.to_vec();
    sorted.sort();
    sorted.dedup();
    sorted
        .iter()
        .map(|e| e.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn events_of(column: &str) -> Vec<EventKind> {
    column.split(',').filter_map(EventKind::parse).collect()
}

/// A change to the webhooks.
#[derive(Debug, Clone)]
pub enum WebhookWrite {
    Add {
        url: String,
        events: Vec<EventKind>,
        domain: Option<DomainId>,
        secret: String,
    },
    /// Each field that is `Some` is set.
    Set {
        id: i64,
        url: Option<String>,
        events: Option<Vec<EventKind>>,
        domain: Option<Option<DomainId>>,
        enabled: Option<bool>,
    },
    /// A new secret; the current one signs too until `overlap_until`.
    Rotate {
        id: i64,
        secret: String,
        overlap_until: Timestamp,
    },
    Remove {
        id: i64,
    },
}

/// What an event's delivery came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Delivered,
    /// Tried again at this time.
    Retry(Timestamp),
    /// Out of tries: kept as failed, and its webhook disabled.
    Failed,
    /// The receiver answered 410: its webhook is disabled, the event kept
    /// pending for when it is enabled again.
    Gone,
    /// Some of its messages went and more are left: due again now, and
    /// not an attempt that failed.
    Progress,
    /// Not tried (its claim's time ran out first): only its lease ends,
    /// and the history does not show it.
    Released,
}

impl Settled {
    /// The event's state column: 0 pending, 1 delivered, 2 failed.
    pub fn state(self) -> i16 {
        match self {
            Settled::Delivered => 1,
            Settled::Failed => 2,
            Settled::Retry(_) | Settled::Gone | Settled::Progress | Settled::Released => 0,
        }
    }

    /// When it is due again, if that changes.
    pub fn due(self) -> Option<Timestamp> {
        match self {
            Settled::Retry(at) => Some(at),
            _ => None,
        }
    }

    /// Whether it counts toward the retry schedule.
    pub fn is_an_attempt(self) -> bool {
        !matches!(self, Settled::Progress | Settled::Released)
    }

    /// Whether the history shows it.
    pub fn is_recorded(self) -> bool {
        self != Settled::Released
    }

    /// Whether its webhook is disabled.
    pub fn disables(self) -> bool {
        matches!(self, Settled::Failed | Settled::Gone)
    }
}

/// One attempt at one event, as the history shows it.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub webhook: i64,
    pub event: i64,
    pub at: Timestamp,
    /// The HTTP status, when an answer came.
    pub status: Option<u16>,
    pub duration_ms: u64,
    pub error: Option<String>,
}

/// An attempt and what it came to, for the store to record.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub attempt: Attempt,
    pub settled: Settled,
    /// How many of the event's messages are now behind it (delivered):
    /// a retry of a link's visits resumes after them.
    pub done: u32,
}

/// An attempt as the history lists it, with its event.
#[derive(Debug, Clone)]
pub struct AttemptRow {
    pub id: i64,
    pub attempt: Attempt,
    pub kind: String,
    /// `pending`, `delivered` or `failed`: where the event is now.
    pub state: EventState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    Pending,
    Delivered,
    Failed,
}

impl EventState {
    pub(crate) fn of(n: i64) -> Self {
        match n {
            1 => EventState::Delivered,
            2 => EventState::Failed,
            _ => EventState::Pending,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Pending => "pending",
            EventState::Delivered => "delivered",
            EventState::Failed => "failed",
        }
    }
}

/// An event claimed for delivery: no other instance sends it until its
/// lease runs out or it is settled.
#[derive(Debug, Clone)]
pub struct OutboxEvent {
    pub id: i64,
    pub webhook: i64,
    pub kind: String,
    pub key: LinkKey,
    /// The link as it was at the change ([`snapshot`]).
    pub data: String,
    pub at: Timestamp,
    /// Attempts made before this one.
    pub attempts: u32,
    /// The messages it holds: one, or a link's visits from one flush.
    pub count: u32,
    /// How many of them are behind it, delivered or dropped.
    pub done: u32,
}

/// A link's counted visits from one flush, for `link.visited`: one outbox
/// row for them all, so that a visit costs the store a few bytes, not a
/// row, a claim and a settlement. Each is still its own message.
#[derive(Debug, Clone)]
pub struct Visited {
    pub key: LinkKey,
    /// The first visit's time.
    pub at: Timestamp,
    /// A [`VisitBatch`] as JSON.
    pub data: String,
    pub count: u32,
}

/// One counted visit as `link.visited` tells of it: the time, the target
/// served, the rule, the referrer's host, the place and the agent's
/// class; never the address or the `User-Agent`.
#[derive(Debug, Serialize, Deserialize)]
pub struct VisitData<'a> {
    pub at: Timestamp,
    #[serde(borrow)]
    pub code: Cow<'a, str>,
    /// The domain's host, filled in when the event is sent (the flush
    /// knows only its id); `null`: the default domain.
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(borrow)]
    pub target: Cow<'a, str>,
    /// The index of the rule that served the target, if one did.
    pub rule: Option<u8>,
    #[serde(borrow)]
    pub referrer_host: Cow<'a, str>,
    #[serde(borrow)]
    pub country: Cow<'a, str>,
    #[serde(borrow)]
    pub city: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pub device: Cow<'a, str>,
    #[serde(borrow)]
    pub system: Cow<'a, str>,
    #[serde(borrow)]
    pub browser: Cow<'a, str>,
    pub bot: bool,
}

/// A link's visits from one flush as the outbox keeps them: each target
/// once, and each visit as a row of small values, about a quarter of
/// their bodies' size (each is written to the store, and read, once).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct VisitBatch<'a> {
    #[serde(borrow)]
    targets: Vec<Cow<'a, str>>,
    #[serde(borrow)]
    visits: Vec<StoredVisit<'a>>,
}

/// `(at in ms, target index, rule, referrer host, country, city, device,
/// system, browser, bot)`.
#[derive(Debug, Serialize, Deserialize)]
struct StoredVisit<'a>(
    i64,
    u32,
    Option<u8>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Option<Cow<'a, str>>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    bool,
);

impl<'a> VisitBatch<'a> {
    /// Adds a visit, after those already in.
    pub fn push(&mut self, visit: VisitData<'a>) {
        let target = match self.targets.iter().rposition(|t| *t == visit.target) {
            Some(i) => i,
            None => {
                self.targets.push(visit.target);
                self.targets.len() - 1
            }
        };
        self.visits.push(StoredVisit(
            visit.at.millis(),
            u32::try_from(target).unwrap_or(u32::MAX),
            visit.rule,
            visit.referrer_host,
            visit.country,
            visit.city,
            visit.device,
            visit.system,
            visit.browser,
            visit.bot,
        ));
    }

    pub fn len(&self) -> usize {
        self.visits.len()
    }

    pub fn is_empty(&self) -> bool {
        self.visits.is_empty()
    }

    /// The visits of link `code`, in order.
    fn into_visits(self, code: &'a str) -> Result<Vec<VisitData<'a>>, String> {
        let targets = self.targets;
        self.visits
            .into_iter()
            .map(|v| {
                let target = targets
                    .get(v.1 as usize)
                    .cloned()
                    .ok_or("an outbox event: a visit's target is missing")?;
                Ok(VisitData {
                    at: Timestamp::from_millis(v.0),
                    code: Cow::Borrowed(code),
                    domain: None,
                    target,
                    rule: v.2,
                    referrer_host: v.3,
                    country: v.4,
                    city: v.5,
                    device: v.6,
                    system: v.7,
                    browser: v.8,
                    bot: v.9,
                })
            })
            .collect()
    }
}

/// The visits of link `code` an outbox row holds: a [`VisitBatch`], or one
/// [`VisitData`] (rows written before visits were kept a flush to a row).
pub fn visits_of<'a>(data: &'a str, code: &'a str) -> Result<Vec<VisitData<'a>>, String> {
    let failed = |e: serde_json::Error| format!("an outbox event: {e}");
    if data.contains("\"targets\":") {
        serde_json::from_str::<VisitBatch<'a>>(data)
            .map_err(failed)?
            .into_visits(code)
    } else {
        serde_json::from_str(data)
            .map(|one| vec![one])
            .map_err(failed)
    }
}

/// How many attempts the history keeps for each webhook.
pub const HISTORY: i64 = 100;

/// A link as the outbox keeps it: the store's own columns, so that the
/// service can show it later as the API shows links.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    domain: i64,
    /// The domain's host at the change: the event names it even once the
    /// domain is gone.
    #[serde(default)]
    host: Option<String>,
    code: String,
    target: String,
    created_at: i64,
    expires_at: Option<i64>,
    owner: Option<(i64, String)>,
    max_visits: Option<u64>,
    visits: u64,
    imported_visits: u64,
    password: Option<String>,
    rules: Option<String>,
    expired_url: Option<String>,
    title: Option<String>,
    tags: Vec<String>,
}

/// `link`, on the domain of `host`, as the outbox's data column holds it.
pub(crate) fn snapshot(link: &Link, host: Option<&str>) -> String {
    let extra = ExtraColumns::of(link.extra.as_deref());
    let snapshot = Snapshot {
        domain: link.domain.0,
        host: host.map(str::to_owned),
        code: link.code.as_str().to_owned(),
        target: link.target.as_str().to_owned(),
        created_at: link.created_at.millis(),
        expires_at: link.expires_at.map(Timestamp::millis),
        owner: link.owner.as_ref().map(|o| (o.id.0, o.name.clone())),
        max_visits: link.max_visits,
        visits: link.visits,
        imported_visits: link.imported_visits,
        password: extra.password,
        rules: extra.rules,
        expired_url: extra.expired_url,
        title: link.labels.title.clone(),
        tags: link.labels.tags.clone(),
    };
    serde_json::to_string(&snapshot).unwrap_or_default()
}

/// The link a [`snapshot`] holds, and its domain's host then; an error
/// for data that is not one.
pub fn link_of(data: &str) -> Result<(Link, Option<String>), String> {
    let s: Snapshot = serde_json::from_str(data).map_err(|e| format!("an outbox event: {e}"))?;
    let link = Link {
        domain: DomainId(s.domain),
        code: ShortCode::from_trusted(&s.code),
        target: TargetUrl::parse(&s.target).map_err(|e| e.to_string())?,
        created_at: Timestamp::from_millis(s.created_at),
        expires_at: s.expires_at.map(Timestamp::from_millis),
        owner: s.owner.map(|(id, name)| Owner {
            id: UserId(id),
            name,
        }),
        max_visits: s.max_visits,
        visits: s.visits,
        imported_visits: s.imported_visits,
        extra: ExtraColumns::read(
            s.password.as_deref(),
            s.rules.as_deref(),
            s.expired_url.as_deref(),
        )?,
        labels: Labels {
            title: s.title,
            tags: s.tags,
        },
    };
    Ok((link, s.host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_gives_back_the_link() {
        let link = Link {
            domain: DomainId(3),
            code: ShortCode::from_trusted("abc"),
            target: TargetUrl::parse("https://example.com/a?b=c").expect("url"),
            created_at: Timestamp::from_millis(1_700_000_000_123),
            expires_at: Some(Timestamp::from_millis(1_800_000_000_000)),
            owner: Some(Owner {
                id: UserId(7),
                name: "ann".into(),
            }),
            max_visits: Some(9),
            visits: 4,
            imported_visits: 2,
            extra: None,
            labels: Labels {
                title: Some("T".into()),
                tags: vec!["a".into(), "B".into()],
            },
        };
        let (back, host) = link_of(&snapshot(&link, Some("go.example"))).expect("parsed");
        assert_eq!(format!("{back:?}"), format!("{link:?}"));
        assert_eq!(host.as_deref(), Some("go.example"));
        assert!(link_of("{}").is_err());
    }

    #[test]
    fn a_batch_of_visits_gives_them_back_in_order() {
        let visit = |ms: i64, target: &'static str, bot: bool| VisitData {
            at: Timestamp::from_millis(ms),
            code: "abc".into(),
            domain: None,
            target: target.into(),
            rule: bot.then_some(2),
            referrer_host: "news.example.org".into(),
            country: "FR".into(),
            city: bot.then(|| "Lyon \"x\"".into()),
            device: "mobile".into(),
            system: "iOS".into(),
            browser: "Safari".into(),
            bot,
        };
        let mut batch = VisitBatch::default();
        batch.push(visit(1, "https://a.example/", false));
        batch.push(visit(2, "https://b.example/", true));
        batch.push(visit(3, "https://a.example/", false));
        assert_eq!(batch.len(), 3);
        let data = serde_json::to_string(&batch).expect("json");
        assert_eq!(
            data.matches("a.example").count(),
            1,
            "each target once: {data}"
        );
        let back = visits_of(&data, "abc").expect("read");
        let as_json = |v: &[VisitData<'_>]| serde_json::to_value(v).expect("json");
        let want = [
            visit(1, "https://a.example/", false),
            visit(2, "https://b.example/", true),
            visit(3, "https://a.example/", false),
        ];
        assert_eq!(as_json(&back), as_json(&want));
        // A row of one visit, as written before batches.
        let one = serde_json::to_string(&want[1]).expect("json");
        assert_eq!(
            as_json(&visits_of(&one, "abc").expect("read")),
            as_json(&want[1..2])
        );
        assert!(
            visits_of(
                "{\"targets\":[],\"visits\":[[1,0,null,\"\",\"\",null,\"\",\"\",\"\",false]]}",
                "abc"
            )
            .is_err()
        );
    }

    #[test]
    fn events_are_written_once_in_a_fixed_order() {
        let column = events_column(&[
            EventKind::LinkDeleted,
            EventKind::LinkCreated,
            EventKind::LinkDeleted,
        ]);
        assert_eq!(column, "link.created,link.deleted");
        assert_eq!(
            events_of(&column),
            vec![EventKind::LinkCreated, EventKind::LinkDeleted]
        );
    }
}
