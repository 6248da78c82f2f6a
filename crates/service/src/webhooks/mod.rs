//! Webhooks: what the API reads and shows of them, and their delivery.
//! The rules (who may register one, which URLs) are in `links::webhooks`;
//! the registry and the outbox are in the store (`store::outbox`), where
//! each event is written in the transaction of the change it reports.
//!
//! `deliver` claims due events from the outbox, signs each as Standard
//! Webhooks says (`sign`), posts it through a client that connects only to
//! public addresses it checked itself, and records the attempt.

pub mod deliver;
pub mod sign;
pub mod streams;

use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::wire::Patch;
use crate::domain::{TargetPolicy, TargetUrl, Timestamp};
use crate::store::outbox::EventKind;

/// How webhooks are delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Let webhooks reach private and loopback addresses, and plain http
    /// (`--webhooks-allow-private`): off, since a webhook would otherwise
    /// let an admin key reach the internal network.
    pub allow_private: bool,
    /// The waits between attempts (`--webhooks-retry-delays`); an event is
    /// failed once they are used up.
    pub retry_delays: Vec<Duration>,
    /// The most events the outbox keeps (`--webhooks-max-pending`): past
    /// it, the oldest `link.visited` events are dropped; change events
    /// never are.
    pub max_pending: u64,
    /// How often the outbox is looked at when nothing was due.
    pub poll: Duration,
    /// How often links whose time ran out are looked for (`link.expired`).
    pub expiry_scan: Duration,
    /// The brokers that get every event too.
    pub streams: StreamSettings,
}

/// Event streams: the same events, from the same outbox, to the brokers
/// operators already run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSettings {
    /// RabbitMQ (`--events-amqp-url`): each event is published to a durable
    /// topic exchange with its type as the routing key, and leaves the
    /// outbox once the broker confirms it.
    pub amqp_url: Option<String>,
    pub amqp_exchange: String,
    /// NATS JetStream (`--events-nats-url`): each event on the subject
    /// `litelink.<type>`, into a stream made if missing, acknowledged.
    pub nats_url: Option<String>,
    pub nats_stream: String,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            amqp_url: None,
            amqp_exchange: "litelink".into(),
            nats_url: None,
            nats_stream: "litelink".into(),
        }
    }
}

impl Default for WebhookSettings {
    fn default() -> Self {
        Self {
            allow_private: false,
            retry_delays: [5, 60, 300, 1800, 7200, 21600, 43200]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            max_pending: 1_000_000,
            poll: Duration::from_millis(500),
            expiry_scan: Duration::from_secs(60),
            streams: StreamSettings::default(),
        }
    }
}

/// How long a delivery may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a receiver's answer is read.
pub const MAX_ANSWER: usize = 64 << 10;

/// How long an instance holds the events it claimed: past it, another
/// may send them (the delivery's own timeout is far shorter).
pub const LEASE: Duration = Duration::from_secs(60);

/// How long the secret before a rotation still signs.
pub const ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// A new secret for webhook `id`, and the write that rotates it in: the
/// old one signs too for [`ROTATION_OVERLAP`].
pub fn rotation(id: i64) -> (String, crate::store::outbox::WebhookWrite) {
    let secret = sign::new_secret();
    let overlap_until =
        Timestamp::from_millis(Timestamp::now().millis() + ROTATION_OVERLAP.as_millis() as i64);
    let write = crate::store::outbox::WebhookWrite::Rotate {
        id,
        secret: secret.clone(),
        overlap_until,
    };
    (secret, write)
}

/// Why `url` cannot be a webhook's: `policy` is the server's own (its deny
/// list, its own hosts).
pub fn url_problem(url: &TargetUrl, policy: &TargetPolicy, allow_private: bool) -> Option<String> {
    if let Err(e) = policy.check(url, None) {
        return Some(e.to_string());
    }
    if allow_private {
        return None;
    }
    if !url.as_str().starts_with("https://") {
        return Some(
            "a webhook's url must be https (or the server must allow private destinations)".into(),
        );
    }
    let private = TargetPolicy::new(true, None).map_or(true, |p| p.check(url, None).is_err());
    private.then(|| {
        "a webhook may not reach a private or loopback address (the server must allow private destinations)".into()
    })
}

/// The events a webhook can want, as the OpenAPI document names them
/// (the bodies read them as `store::outbox::EventKind`).
#[derive(ToSchema)]
#[schema(as = WebhookEvent)]
#[allow(dead_code)]
pub(crate) enum EventName {
    #[schema(rename = "link.created")]
    LinkCreated,
    #[schema(rename = "link.updated")]
    LinkUpdated,
    #[schema(rename = "link.deleted")]
    LinkDeleted,
    #[schema(rename = "link.expired")]
    LinkExpired,
    #[schema(rename = "links.imported")]
    LinksImported,
    #[schema(rename = "link.visited")]
    LinkVisited,
}

/// The body of `POST /api/v1/webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewWebhook)]
pub(crate) struct NewWebhookBody {
    /// Where events are posted: https, unless the server allows private
    /// destinations.
    #[serde(deserialize_with = "crate::domain::wire::required")]
    pub url: TargetUrl,
    /// The events wanted: `link.created`, `link.updated`, `link.deleted`,
    /// `link.expired`, `links.imported`, `link.visited`.
    #[serde(deserialize_with = "crate::domain::wire::required")]
    #[schema(value_type = Vec<EventName>, min_items = 1, example = json!(["link.created"]))]
    pub events: Vec<EventKind>,
    /// Only this domain's links (a host, or `default`); all when absent.
    #[serde(default)]
    pub domain: Option<String>,
}

/// The body of `PATCH /api/v1/webhooks/{id}`: each field present is set;
/// `domain: null` makes it hear every domain.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WebhookPatch)]
pub(crate) struct WebhookPatchBody {
    #[serde(default, deserialize_with = "crate::domain::wire::not_null")]
    pub url: Option<TargetUrl>,
    #[serde(default, deserialize_with = "crate::domain::wire::not_null")]
    #[schema(value_type = Option<Vec<EventName>>, min_items = 1)]
    pub events: Option<Vec<EventKind>>,
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub domain: Patch<String>,
    #[serde(default, deserialize_with = "crate::domain::wire::not_null")]
    pub enabled: Option<bool>,
}

/// A webhook as the API shows it (never its secret, but once).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Webhook)]
pub(crate) struct WebhookView {
    pub id: i64,
    pub url: String,
    #[schema(value_type = Vec<EventName>)]
    pub events: Vec<EventKind>,
    /// Its domain's host (`default` for the default domain); null: all.
    pub domain: Option<String>,
    pub enabled: bool,
    pub created_at: Timestamp,
}

/// A new webhook, or one whose secret was rotated, with the secret shown
/// this once.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = CreatedWebhook)]
pub(crate) struct CreatedWebhook {
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// `whsec_<base64>`: the key that signs each delivery, as Standard
    /// Webhooks' verifiers take it. Shown only here.
    pub secret: String,
}

/// One attempt at one event.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = WebhookDelivery)]
pub(crate) struct DeliveryView {
    pub id: i64,
    /// The event's id: `POST .../deliveries/{event}/retry` sends it again.
    pub event: i64,
    /// The event's type.
    #[serde(rename = "type")]
    pub kind: String,
    pub at: Timestamp,
    /// The receiver's HTTP status; null when none came.
    pub status: Option<u16>,
    pub duration_ms: u64,
    pub error: Option<String>,
    /// Where the event is now: `pending`, `delivered` or `failed`.
    pub state: &'static str,
}
