//! Event streams: RabbitMQ and NATS JetStream as two more destinations of
//! the outbox. Each is a row of the webhooks table whose URL names the
//! stream (never the broker's address, which may hold a password), made at
//! start from the options, and hidden from the webhook API.

use std::sync::Arc;

use async_nats::jetstream;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

use super::{StreamSettings, TIMEOUT};
use crate::store::outbox::{EventKind, WebhookWrite};
use crate::store::{LinkStore, StoreError};

const AMQP: &str = "stream+amqp://";
const NATS: &str = "stream+nats://";

/// Whether a webhook row is an event stream's.
pub fn is_stream(url: &str) -> bool {
    url.starts_with("stream+")
}

/// One event as sent, with the headers a webhook delivery carries.
pub(crate) struct Message<'a> {
    pub kind: &'a str,
    pub id: &'a str,
    pub timestamp: i64,
    pub signature: &'a str,
    pub body: &'a [u8],
}

/// The brokers events go to, as the options name them.
#[derive(Default)]
pub(crate) struct Streams {
    amqp: Option<Amqp>,
    nats: Option<Nats>,
}

impl Streams {
    pub(crate) fn new(settings: &StreamSettings) -> Self {
        Self {
            amqp: settings.amqp_url.as_ref().map(|url| Amqp {
                url: url.clone(),
                exchange: settings.amqp_exchange.clone(),
                channel: Default::default(),
            }),
            nats: settings.nats_url.as_ref().map(|url| Nats {
                url: url.clone(),
                stream: settings.nats_stream.clone(),
                context: Default::default(),
            }),
        }
    }

    /// Sends `messages` to the stream of row `url`, in order: how many
    /// the broker has (confirmed, acknowledged) before the first it did
    /// not take, and why it did not.
    pub(crate) async fn send(
        &self,
        url: &str,
        messages: &[Message<'_>],
    ) -> (usize, Option<String>) {
        let sent = if url.starts_with(AMQP) {
            match &self.amqp {
                Some(amqp) => tokio::time::timeout(TIMEOUT, amqp.publish(messages)).await,
                None => return (0, Some("no --events-amqp-url".into())),
            }
        } else if url.starts_with(NATS) {
            match &self.nats {
                Some(nats) => tokio::time::timeout(TIMEOUT, nats.publish(messages)).await,
                None => return (0, Some("no --events-nats-url".into())),
            }
        } else {
            return (0, Some(format!("{url}: not an event stream")));
        };
        let (taken, error) =
            sent.unwrap_or_else(|_| (0, Some(format!("no answer within {}s", TIMEOUT.as_secs()))));
        if error.is_some() {
            // The next try connects afresh.
            if url.starts_with(AMQP)
                && let Some(amqp) = &self.amqp
            {
                amqp.channel.lock().await.take();
            } else if let Some(nats) = &self.nats {
                nats.context.lock().await.take();
            }
        }
        (taken, error)
    }
}

/// Makes the outbox rows of the configured streams (enabled, every event),
/// and disables those of streams no longer configured, so that no events
/// pile up for them.
pub(crate) async fn ensure(
    store: &Arc<dyn LinkStore>,
    settings: &StreamSettings,
) -> Result<(), StoreError> {
    let wanted: Vec<String> = [
        settings
            .amqp_url
            .as_ref()
            .map(|_| format!("{AMQP}{}", settings.amqp_exchange)),
        settings
            .nats_url
            .as_ref()
            .map(|_| format!("{NATS}{}", settings.nats_stream)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let rows = store.webhooks().await?;
    for row in rows.iter().filter(|w| is_stream(&w.url)) {
        let keep = wanted.contains(&row.url);
        if keep != row.enabled || (keep && row.events != EventKind::ALL) {
            store
                .write_webhook(WebhookWrite::Set {
                    id: row.id,
                    url: None,
                    events: keep.then(|| EventKind::ALL.to_vec()),
                    domain: None,
                    enabled: Some(keep),
                })
                .await?;
        }
    }
    for url in wanted {
        if !rows.iter().any(|w| w.url == url) {
            store
                .write_webhook(WebhookWrite::Add {
                    url,
                    events: EventKind::ALL.to_vec(),
                    domain: None,
                    secret: super::sign::new_secret(),
                })
                .await?;
        }
    }
    Ok(())
}

/// A RabbitMQ publisher with confirms, on one channel, connected on first
/// use and again after a failure.
struct Amqp {
    url: String,
    exchange: String,
    channel: tokio::sync::Mutex<Option<(Connection, Channel)>>,
}

impl Amqp {
    async fn connect(&self) -> Result<(Connection, Channel), String> {
        let failed = |e: lapin::Error| format!("RabbitMQ: {e}");
        let connection = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(failed)?;
        let channel = connection.create_channel().await.map_err(failed)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(failed)?;
        channel
            .exchange_declare(
                self.exchange.as_str().into(),
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(failed)?;
        Ok((connection, channel))
    }

    /// Publishes `messages` one after another without waiting, then
    /// waits for their confirms in order.
    async fn publish(&self, messages: &[Message<'_>]) -> (usize, Option<String>) {
        let mut slot = self.channel.lock().await;
        if slot.is_none() {
            match self.connect().await {
                Ok(connected) => *slot = Some(connected),
                Err(e) => return (0, Some(e)),
            }
        }
        let Some((_, channel)) = slot.as_ref() else {
            return (0, Some("RabbitMQ: no channel".into()));
        };
        let failed = |e: lapin::Error| format!("RabbitMQ: {e}");
        let mut confirms = Vec::with_capacity(messages.len());
        let mut error = None;
        for message in messages {
            let mut headers = FieldTable::default();
            for (name, value) in [
                ("webhook-id", message.id.to_owned()),
                ("webhook-timestamp", message.timestamp.to_string()),
                ("webhook-signature", message.signature.to_owned()),
            ] {
                headers.insert(name.into(), AMQPValue::LongString(value.into()));
            }
            let properties = BasicProperties::default()
                .with_content_type("application/json".into())
                .with_message_id(message.id.into())
                .with_timestamp(message.timestamp.max(0) as u64)
                // Persistent: kept by the broker across its restarts.
                .with_delivery_mode(2)
                .with_headers(headers);
            match channel
                .basic_publish(
                    self.exchange.as_str().into(),
                    message.kind.into(),
                    BasicPublishOptions::default(),
                    message.body,
                    properties,
                )
                .await
            {
                Ok(confirm) => confirms.push(confirm),
                Err(e) => {
                    error = Some(failed(e));
                    break;
                }
            }
        }
        let mut taken = 0;
        for confirm in confirms {
            match confirm.await {
                Ok(c) if c.is_ack() => taken += 1,
                Ok(_) => return (taken, Some("RabbitMQ refused the event (nack)".into())),
                Err(e) => return (taken, Some(failed(e))),
            }
        }
        (taken, error)
    }
}

/// A JetStream publisher, connected on first use and again after a
/// failure; its stream is made if missing.
struct Nats {
    url: String,
    stream: String,
    context: tokio::sync::Mutex<Option<jetstream::Context>>,
}

impl Nats {
    async fn connect(&self) -> Result<jetstream::Context, String> {
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(TIMEOUT)
            .request_timeout(Some(TIMEOUT))
            .connect(self.url.as_str())
            .await
            .map_err(|e| format!("NATS: {e}"))?;
        let context = jetstream::new(client);
        context
            .get_or_create_stream(jetstream::stream::Config {
                name: self.stream.clone(),
                subjects: vec!["litelink.>".into()],
                ..Default::default()
            })
            .await
            .map_err(|e| format!("NATS: the stream {}: {e}", self.stream))?;
        Ok(context)
    }

    /// Publishes `messages` one after another without waiting, then
    /// waits for their acknowledgements in order.
    async fn publish(&self, messages: &[Message<'_>]) -> (usize, Option<String>) {
        let context = {
            let mut slot = self.context.lock().await;
            if slot.is_none() {
                match self.connect().await {
                    Ok(connected) => *slot = Some(connected),
                    Err(e) => return (0, Some(e)),
                }
            }
            match slot.as_ref() {
                Some(context) => context.clone(),
                None => return (0, Some("NATS: not connected".into())),
            }
        };
        let failed = |e: &dyn std::fmt::Display| format!("NATS: {e}");
        let mut acks = Vec::with_capacity(messages.len());
        let mut error = None;
        for message in messages {
            let mut headers = async_nats::HeaderMap::new();
            // JetStream drops a message whose id it has seen (within its
            // duplicate window): a retry after a lost ack is not stored twice.
            headers.insert("Nats-Msg-Id", message.id);
            headers.insert("webhook-id", message.id);
            headers.insert("webhook-timestamp", message.timestamp.to_string().as_str());
            headers.insert("webhook-signature", message.signature);
            headers.insert("content-type", "application/json");
            match context
                .publish_with_headers(
                    format!("litelink.{}", message.kind),
                    headers,
                    bytes::Bytes::copy_from_slice(message.body),
                )
                .await
            {
                Ok(ack) => acks.push(ack),
                Err(e) => {
                    error = Some(failed(&e));
                    break;
                }
            }
        }
        let mut taken = 0;
        for ack in acks {
            match ack.await {
                Ok(_) => taken += 1,
                Err(e) => return (taken, Some(failed(&e))),
            }
        }
        (taken, error)
    }
}
