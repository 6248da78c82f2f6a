//! The delivery loop: claim due events, post each, record what came of it.
//! One loop per instance; on PostgreSQL several instances share the outbox,
//! each event leased to one of them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{LEASE, MAX_ANSWER, TIMEOUT, WebhookSettings, sign, streams};
use crate::domain::Timestamp;
use crate::links::Links;
use crate::outbound::HttpClient;
use crate::store::LinkStore;
use crate::store::outbox::{
    Attempt, EventKind, OutboxEvent, Outcome, Settled, Webhook, link_of, visits_of,
};

/// Events claimed, and settled, in one transaction each.
const BATCH: usize = 256;

/// Deliveries under way at once.
const IN_FLIGHT: usize = 32;

/// The most messages of one event sent at one claim: a link's visits of
/// one flush may be many, and the rest go at the next.
const PER_CLAIM: usize = 1_000;

/// How often the outbox's gauges are set while events flow.
const GAUGES_EVERY: Duration = Duration::from_secs(1);

/// The longest wait between tries at a stream's broker.
const STREAM_RETRY_CAP: Duration = Duration::from_secs(60);

pub(crate) struct Deliverer {
    store: Arc<dyn LinkStore>,
    links: Links,
    settings: WebhookSettings,
    http: HttpClient,
    streams: streams::Streams,
    /// Where the default domain's short URLs are when no host names it.
    listen: std::net::SocketAddr,
    public_url: Option<String>,
}

impl Deliverer {
    pub(crate) fn new(
        store: Arc<dyn LinkStore>,
        links: Links,
        settings: WebhookSettings,
        listen: std::net::SocketAddr,
        public_url: Option<String>,
    ) -> anyhow::Result<Self> {
        let roots = crate::tls::system_roots().ok();
        let tls = roots
            .map(|r| crate::tls::client_config("a webhook", crate::tls::Verify::Full(r), None))
            .transpose()?;
        let mut http = HttpClient::new(tls)
            .with_limits(TIMEOUT, MAX_ANSWER)
            .cutting_off();
        if !settings.allow_private {
            http = http.public_only();
        }
        Ok(Self {
            streams: streams::Streams::new(&settings.streams),
            store,
            links,
            settings,
            http,
            listen,
            public_url,
        })
    }

    /// Runs until the task is aborted.
    pub(crate) async fn run(self) {
        let failing = crate::observability::logging::Throttle::new(Duration::from_secs(60));
        let mut next_scan = Instant::now() + self.settings.expiry_scan;
        let (mut busy, mut gauged) = (false, Instant::now());
        loop {
            if Instant::now() >= next_scan {
                next_scan = Instant::now() + self.settings.expiry_scan;
                if let Err(e) = self.store.scan_expiries().await
                    && failing.allow().is_some()
                {
                    tracing::warn!(error = %e, "webhook events: expired links cannot be looked for");
                }
            }
            // While events flow, the outbox is counted once a second, not
            // at each claim.
            let count = !busy || gauged.elapsed() >= GAUGES_EVERY;
            if count {
                gauged = Instant::now();
            }
            busy = false;
            match self.round(count).await {
                Ok(0) => tokio::time::sleep(self.settings.poll).await,
                Ok(_) => busy = true,
                Err(e) => {
                    if failing.allow().is_some() {
                        tracing::warn!(error = %e, "webhook deliveries: the outbox cannot be read");
                    }
                    tokio::time::sleep(self.settings.poll).await;
                }
            }
        }
    }

    /// One claim and its deliveries, after counting the outbox if `count`:
    /// how many events were claimed.
    async fn round(&self, count: bool) -> Result<usize, crate::store::StoreError> {
        // Redirects keep a record of each visit only while some webhook
        // or stream wants `link.visited`.
        let webhooks = self.store.webhooks().await?;
        let wanted = webhooks
            .iter()
            .any(|w| w.enabled && w.events.contains(&EventKind::LinkVisited));
        self.links.visits().keep_records(wanted);
        // A read first: with nothing pending, the writer is not asked.
        if count && self.gauges().await? == 0 {
            return Ok(0);
        }
        let events = self.store.claim_events(BATCH, LEASE).await?;
        if events.is_empty() {
            return Ok(0);
        }
        let webhooks: HashMap<i64, Webhook> = webhooks.into_iter().map(|w| (w.id, w)).collect();
        let n = events.len();
        // Well within the lease: no event is sent after another instance
        // may have claimed it.
        let deadline = Instant::now() + LEASE / 2;
        let sends = events.into_iter().filter_map(|event| {
            let webhook = webhooks.get(&event.webhook)?.clone();
            Some(async move { self.deliver(&webhook, event, deadline).await })
        });
        use futures_util::StreamExt;
        let outcomes: Vec<Outcome> = futures_util::stream::iter(sends)
            .buffer_unordered(IN_FLIGHT)
            .collect()
            .await;
        self.store.settle_events(outcomes).await?;
        Ok(n)
    }

    /// Sets the outbox's gauges, past its bound dropping the oldest
    /// `link.visited` events: how many events are pending.
    async fn gauges(&self) -> Result<u64, crate::store::StoreError> {
        let (mut pending, mut oldest) = self.store.pending_events().await?;
        if pending > self.settings.max_pending {
            let dropped = self
                .store
                .drop_visited(pending - self.settings.max_pending)
                .await?;
            if dropped > 0 {
                metrics::counter!("litelink_webhook_events_dropped_total").increment(dropped);
                tracing::warn!(
                    dropped,
                    max = self.settings.max_pending,
                    "the webhook outbox is full: its oldest link.visited events are dropped"
                );
                (pending, oldest) = self.store.pending_events().await?;
            }
        }
        metrics::gauge!("litelink_webhook_events_pending").set(pending as f64);
        let age = oldest.map_or(0, |at| (Timestamp::now().millis() - at.millis()).max(0));
        metrics::gauge!("litelink_webhook_oldest_pending_seconds").set(age as f64 / 1000.0);
        Ok(pending)
    }

    /// The messages of an event not yet behind it, each with its
    /// `webhook-id` and its body `{"type", "timestamp", "data"}`: one, or
    /// a link's visits from one flush.
    fn messages(&self, event: &OutboxEvent) -> Result<Vec<(String, Vec<u8>)>, String> {
        let kind = event.kind.as_str();
        if event.kind == EventKind::LinkVisited.as_str() {
            // The domain's host now: the flush that wrote them knows ids.
            let host = self
                .links
                .domains()
                .host_of(event.key.domain)
                .map(|h| h.to_string());
            return visits_of(&event.data, event.key.code.as_str())?
                .into_iter()
                .enumerate()
                .skip(event.done as usize)
                .take(PER_CLAIM)
                .map(|(i, mut visit)| {
                    visit.domain.clone_from(&host);
                    // Unique beyond this database too (a stream may hear
                    // several, or one made again), the same on every attempt.
                    let id = format!("msg_{:x}_{}_{i}", event.at.millis(), event.id);
                    Ok((id, envelope(kind, visit.at, &visit)?))
                })
                .collect();
        }
        let id = format!("msg_{:x}_{}", event.at.millis(), event.id);
        let about_a_link = EventKind::parse(&event.kind).is_none_or(EventKind::is_about_a_link);
        if !about_a_link {
            let data: serde_json::Value =
                serde_json::from_str(&event.data).map_err(|e| e.to_string())?;
            return Ok(vec![(id, envelope(kind, event.at, &data)?)]);
        }
        let (link, host) = link_of(&event.data)?;
        // An added domain's host as it was at the change: the domain may
        // be gone (removed with its links) by the time this is sent.
        let host = host.filter(|_| !link.domain.is_default());
        let short_url = match &host {
            Some(host) => {
                crate::domains::short_url_on(host, self.public_url.as_deref(), link.code.as_str())
            }
            None => crate::domains::short_url(
                self.links.domains(),
                self.public_url.as_deref(),
                &link.key(),
            )
            .unwrap_or_else(|| format!("http://{}/{}", self.listen, link.code)),
        };
        let mut data = self.links.view(link, short_url, true);
        if host.is_some() {
            data.domain = host;
        }
        Ok(vec![(id, envelope(kind, event.at, &data)?)])
    }

    async fn deliver(&self, webhook: &Webhook, event: OutboxEvent, deadline: Instant) -> Outcome {
        let started = Instant::now();
        let at = Timestamp::now();
        let stream = streams::is_stream(&webhook.url);
        let sent = if started >= deadline {
            Sent::default()
        } else {
            match self.messages(&event) {
                Ok(messages) => {
                    self.send(webhook, &event.kind, &messages, at, deadline)
                        .await
                }
                Err(e) => Sent {
                    error: Some(e),
                    ..Sent::default()
                },
            }
        };
        let done = event.done.saturating_add(sent.delivered);
        let (status, error) = (sent.status, sent.error);
        let refused = error.is_some() || status.is_some_and(|s| !(200..300).contains(&s));
        let delay = self.settings.retry_delays.get(event.attempts as usize);
        let settled = match status {
            _ if done >= event.count => Settled::Delivered,
            _ if !refused && sent.delivered > 0 => Settled::Progress,
            _ if !refused => Settled::Released,
            // A broker that is away is waited for, never given up on: the
            // events stay in order until it is back.
            _ if stream => {
                let last = self.settings.retry_delays.last().copied();
                let wait = delay.copied().or(last).unwrap_or(STREAM_RETRY_CAP);
                Settled::Retry(later(at, jittered(wait.min(STREAM_RETRY_CAP))))
            }
            Some(410) => Settled::Gone,
            _ => match delay {
                Some(delay) => Settled::Retry(later(at, jittered(*delay))),
                None => Settled::Failed,
            },
        };
        let attempt = Attempt {
            webhook: webhook.id,
            event: event.id,
            at,
            status,
            duration_ms: started.elapsed().as_millis() as u64,
            error: error.or_else(|| {
                status
                    .filter(|s| !(200..300).contains(s))
                    .map(|s| format!("the receiver answered {s}"))
            }),
        };
        let outcome = match settled {
            Settled::Delivered => Some("delivered"),
            Settled::Retry(_) => Some("retried"),
            Settled::Failed => Some("failed"),
            Settled::Gone => Some("gone"),
            Settled::Progress | Settled::Released => None,
        };
        if let Some(outcome) = outcome {
            metrics::counter!("litelink_webhook_deliveries_total", "outcome" => outcome)
                .increment(1);
        }
        match settled {
            Settled::Failed => tracing::warn!(
                webhook = webhook.id,
                event = event.id,
                error = attempt.error.as_deref().unwrap_or(""),
                "a webhook event failed every attempt: the webhook is disabled"
            ),
            Settled::Gone => tracing::warn!(
                webhook = webhook.id,
                "a webhook's receiver answered 410 Gone: the webhook is disabled"
            ),
            _ => {}
        }
        Outcome {
            attempt,
            settled,
            done,
        }
    }

    /// Sends `messages` in order, each signed, stopping at the first that
    /// is not taken, or once `deadline` has passed.
    async fn send(
        &self,
        webhook: &Webhook,
        kind: &str,
        messages: &[(String, Vec<u8>)],
        at: Timestamp,
        deadline: Instant,
    ) -> Sent {
        let timestamp = at.millis() / 1000;
        let signed = messages.iter().map(|(id, body)| {
            let mut signatures = vec![sign::signature(&webhook.secret, id, timestamp, body)];
            if let Some((previous, until)) = &webhook.previous
                && until.millis() > at.millis()
            {
                signatures.push(sign::signature(previous, id, timestamp, body));
            }
            let signatures: Vec<String> = signatures.into_iter().flatten().collect();
            signatures.join(" ")
        });
        if streams::is_stream(&webhook.url) {
            let signed: Vec<String> = signed.collect();
            let batch: Vec<streams::Message<'_>> = messages
                .iter()
                .zip(&signed)
                .map(|((id, body), signature)| streams::Message {
                    kind,
                    id,
                    timestamp,
                    signature,
                    body,
                })
                .collect();
            let (delivered, error) = self.streams.send(&webhook.url, &batch).await;
            return Sent {
                delivered: delivered as u32,
                status: None,
                error,
            };
        }
        let mut sent = Sent::default();
        for ((id, body), signature) in messages.iter().zip(signed) {
            if sent.delivered > 0 && Instant::now() >= deadline {
                break;
            }
            let request = hyper::Request::post(webhook.url.as_str())
                .header("content-type", "application/json")
                .header("webhook-id", id)
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature)
                .body(body.clone());
            let answer = match request {
                Ok(request) => self.http.send(request).await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match answer {
                Ok(response) if response.status().is_success() => {
                    sent.status = Some(response.status().as_u16());
                    sent.delivered += 1;
                }
                Ok(response) => {
                    sent.status = Some(response.status().as_u16());
                    break;
                }
                Err(e) => {
                    sent.status = None;
                    sent.error = Some(e);
                    break;
                }
            }
        }
        sent
    }
}

/// An event's body as Standard Webhooks has it.
#[derive(serde::Serialize)]
struct Envelope<'a, T> {
    #[serde(rename = "type")]
    kind: &'a str,
    timestamp: Timestamp,
    data: &'a T,
}

fn envelope<T: serde::Serialize>(
    kind: &str,
    timestamp: Timestamp,
    data: &T,
) -> Result<Vec<u8>, String> {
    serde_json::to_vec(&Envelope {
        kind,
        timestamp,
        data,
    })
    .map_err(|e| e.to_string())
}

/// What came of sending an event's messages.
#[derive(Default)]
struct Sent {
    /// How many were taken, in order.
    delivered: u32,
    /// The last answer's status (a receiver's), if one came.
    status: Option<u16>,
    error: Option<String>,
}

/// `delay`, give or take a tenth, so that the retries of many events that
/// failed together do not all come back at once.
fn jittered(delay: Duration) -> Duration {
    let factor = 0.9 + rand::random::<f64>() * 0.2;
    delay.mul_f64(factor)
}

fn later(at: Timestamp, delay: Duration) -> Timestamp {
    Timestamp::from_millis(at.millis().saturating_add(delay.as_millis() as i64))
}
