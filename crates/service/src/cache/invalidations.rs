//! Cache invalidations between instances that share a database, over
//! Valkey (or Redis) pub/sub.
//!
//! Every create, edit and delete is published on one channel before the
//! request is answered; every instance subscribes and forgets the code in
//! its in-process tier, so a change made through one instance is seen by
//! the others within the time a message takes (under a millisecond on one
//! network; docs/benchmarks.md), and a code created on one is no longer
//! remembered as unknown on the others. While the subscription is down,
//! the in-process tier serves an entry only for a short TTL after it was
//! cached (`--invalidations-down-ttl-ms`, 1 s; 0: the tier is off), so a
//! change made elsewhere is seen within it, and it starts empty when the
//! subscription comes back: nothing missed is served afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde::Serialize;

use crate::cache::LinkCache;
use crate::cache::valkey::{self, ValkeyTls};
use crate::domain::LinkKey;
use crate::observability::logging::Throttle;
use crate::store::LinkStore;

/// Where invalidations travel (`--invalidations-url`).
#[derive(Debug, Clone, Default)]
pub struct InvalidationSettings {
    /// `redis://host:port`; `None`: this instance is alone on its store.
    pub url: Option<String>,
    /// The channel, shared by every instance of one deployment.
    pub channel: String,
    /// Certificates for a `rediss://` URL: the cache's (`--valkey-ca-file`...).
    pub tls: ValkeyTls,
}

/// Bound on one publish: a write waits at most this for its message.
const PUBLISH_TIMEOUT: Duration = Duration::from_millis(200);
/// Codes whose publish failed, kept to publish again every
/// [`RETRY_EVERY`]; past this many, one "forget everything" replaces them.
const MAX_PENDING: usize = 10_000;
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// The message that empties every instance's in-process tier (not a code:
/// codes never contain `*`).
const FORGET_ALL: &str = "*";
/// Wait between attempts to subscribe again after the connection broke.
const RESUBSCRIBE_EVERY: Duration = Duration::from_millis(500);

static PUBLISH_FAILED: std::sync::LazyLock<Throttle> =
    std::sync::LazyLock::new(|| Throttle::new(Duration::from_secs(10)));

#[derive(Debug, Default)]
struct Counters {
    subscribed: AtomicBool,
    published: AtomicU64,
    publish_failures: AtomicU64,
    received: AtomicU64,
    resubscribed: AtomicU64,
    pending: std::sync::Mutex<Pending>,
}

/// Invalidations still to be published after a failure.
#[derive(Debug, Default)]
struct Pending {
    /// Whole messages, oldest first.
    codes: Vec<String>,
    /// Too many piled up: publish [`FORGET_ALL`] instead.
    all: bool,
    /// The newest position among them, for that message.
    newest: Option<u64>,
}

impl Pending {
    fn forget_all_message(&self) -> String {
        message(FORGET_ALL, self.newest)
    }
}

/// A message: what changed, and where in the database's history.
fn message(code: &str, position: Option<u64>) -> String {
    match position {
        Some(at) => format!("{code} {at}"),
        None => code.to_owned(),
    }
}

/// A message's code (or [`FORGET_ALL`]) and position; `None` when it is
/// neither (another program's message on the channel).
fn parse(payload: &str) -> Option<(Option<LinkKey>, Option<u64>)> {
    let (what, position) = match payload.split_once(' ') {
        Some((what, at)) => (what, Some(at.parse().ok()?)),
        None => (payload, None),
    };
    if what == FORGET_ALL {
        return Some((None, position));
    }
    Some((Some(LinkKey::parse_wire(what)?), position))
}

/// `/stats` of the invalidation channel.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InvalidationStats {
    pub subscribed: bool,
    pub published: u64,
    pub publish_failures: u64,
    pub received: u64,
    pub resubscribed: u64,
    /// Changes not yet published (retried every 100 ms).
    pub pending: u64,
}

/// The publishing side, and the handle of the subscriber task.
pub(crate) struct Invalidations {
    channel: String,
    publisher: ConnectionManager,
    counters: Arc<Counters>,
    subscriber: tokio::task::JoinHandle<()>,
    retrier: tokio::task::JoinHandle<()>,
}

impl Invalidations {
    /// Connects the publisher and starts the subscriber, which keeps
    /// `cache`'s in-process tier off (and `store`'s replica unread) until
    /// it is subscribed.
    pub(crate) async fn start(
        settings: &InvalidationSettings,
        url: &str,
        cache: Arc<dyn LinkCache>,
        store: Arc<dyn LinkStore>,
    ) -> anyhow::Result<Self> {
        let channel = settings.channel.clone();
        let client = valkey::client(url, &settings.tls)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(PUBLISH_TIMEOUT));
        let publisher = ConnectionManager::new_with_config(client.clone(), config).await?;
        let counters = Arc::new(Counters::default());
        cache.set_local(false);
        store.hearing_others(false);
        let subscriber = tokio::spawn(subscribe(
            client,
            channel.clone(),
            cache,
            store,
            Arc::clone(&counters),
        ));
        let retrier = tokio::spawn(retry(
            publisher.clone(),
            channel.clone(),
            Arc::clone(&counters),
        ));
        Ok(Self {
            channel,
            publisher,
            counters,
            subscriber,
            retrier,
        })
    }

    /// Tells every instance that `code` changed at `position`. A failure
    /// is counted, logged (at a limited rate) and retried every 100 ms
    /// until Valkey takes it; meanwhile another instance may serve the old
    /// version from its in-process tier.
    pub(crate) async fn publish(&self, code: &LinkKey, position: Option<u64>) {
        let message = message(&code.wire(), position);
        if let Err(why) = send(&self.publisher, &self.channel, &message).await {
            self.counters.failed(&why);
            let mut pending = self
                .counters
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            pending.newest = pending.newest.max(position);
            if pending.codes.len() < MAX_PENDING {
                pending.codes.push(message);
            } else {
                pending.codes.clear();
                pending.all = true;
            }
        } else {
            self.counters.published.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn stats(&self) -> InvalidationStats {
        let c = &self.counters;
        let pending = {
            let p = c.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.codes.len() as u64 + u64::from(p.all)
        };
        InvalidationStats {
            pending,
            subscribed: c.subscribed.load(Ordering::Relaxed),
            published: c.published.load(Ordering::Relaxed),
            publish_failures: c.publish_failures.load(Ordering::Relaxed),
            received: c.received.load(Ordering::Relaxed),
            resubscribed: c.resubscribed.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Invalidations {
    fn drop(&mut self) {
        self.subscriber.abort();
        self.retrier.abort();
    }
}

impl Counters {
    fn failed(&self, why: &str) {
        self.publish_failures.fetch_add(1, Ordering::Relaxed);
        crate::throttled!(PUBLISH_FAILED, warn, error = %why, "an invalidation could not be published");
    }
}

async fn send(publisher: &ConnectionManager, channel: &str, message: &str) -> Result<(), String> {
    let mut conn = publisher.clone();
    let sent = tokio::time::timeout(
        PUBLISH_TIMEOUT,
        redis::cmd("PUBLISH")
            .arg(channel)
            .arg(message)
            .query_async::<i64>(&mut conn),
    )
    .await;
    match sent {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

/// Publishes what failed before, oldest first, every [`RETRY_EVERY`].
async fn retry(publisher: ConnectionManager, channel: String, counters: Arc<Counters>) {
    loop {
        tokio::time::sleep(RETRY_EVERY).await;
        let (codes, all, everything) = {
            let mut p = counters.pending.lock().unwrap_or_else(|e| e.into_inner());
            let everything = p.forget_all_message();
            (
                std::mem::take(&mut p.codes),
                std::mem::take(&mut p.all),
                everything,
            )
        };
        let messages: Vec<&str> = if all {
            vec![everything.as_str()]
        } else {
            codes.iter().map(String::as_str).collect()
        };
        for (i, message) in messages.iter().enumerate() {
            if let Err(why) = send(&publisher, &channel, message).await {
                counters.failed(&why);
                // Put back what is left, before anything newer.
                let mut p = counters.pending.lock().unwrap_or_else(|e| e.into_inner());
                if all || p.all {
                    p.all = true;
                    p.codes.clear();
                } else {
                    let mut left: Vec<String> =
                        messages[i..].iter().map(|m| m.to_string()).collect();
                    left.append(&mut p.codes);
                    left.truncate(MAX_PENDING);
                    p.codes = left;
                }
                break;
            }
            counters.published.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn subscribe(
    client: redis::Client,
    channel: String,
    cache: Arc<dyn LinkCache>,
    store: Arc<dyn LinkStore>,
    counters: Arc<Counters>,
) {
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => {
                if pubsub.subscribe(&channel).await.is_ok() {
                    // From here on nothing can be missed: start empty.
                    store.hearing_others(true);
                    cache.set_local(true);
                    counters.subscribed.store(true, Ordering::Relaxed);
                    let mut messages = pubsub.on_message();
                    while let Some(msg) = messages.next().await {
                        counters.received.fetch_add(1, Ordering::Relaxed);
                        let Ok(payload) = msg.get_payload::<String>() else {
                            continue;
                        };
                        // The store first: a lookup after the cache has
                        // forgotten must not read a replica behind it.
                        match parse(&payload) {
                            Some((None, position)) => {
                                store.changed_elsewhere(None, position);
                                cache.set_local(false);
                                cache.set_local(true);
                            }
                            Some((Some(code), position)) => {
                                store.changed_elsewhere(Some(&code), position);
                                cache.forget_local(&code);
                            }
                            None => {}
                        }
                    }
                    cache.set_local(false);
                    store.hearing_others(false);
                    counters.subscribed.store(false, Ordering::Relaxed);
                    counters.resubscribed.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        "the invalidation channel broke: the in-process cache serves entries only for \
                         --invalidations-down-ttl-ms until it is back"
                    );
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "cannot subscribe to the invalidation channel yet");
            }
        }
        tokio::time::sleep(RESUBSCRIBE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_a_code_and_maybe_a_position() {
        let code = crate::domain::ShortCode::parse("abc123").expect("code");
        let keys = [
            LinkKey::default_domain(code.clone()),
            LinkKey::new(crate::domain::DomainId(3), code),
        ];
        for (key, position) in keys
            .iter()
            .flat_map(|k| [None, Some(0), Some(123_456_789)].map(|p| (k, p)))
        {
            assert_eq!(
                parse(&message(&key.wire(), position)),
                Some((Some(key.clone()), position))
            );
            assert_eq!(
                parse(&message(FORGET_ALL, position)),
                Some((None, position))
            );
        }
        assert_eq!(parse("abc123 notanumber"), None);
        assert_eq!(parse("not a code"), None);
    }
}
