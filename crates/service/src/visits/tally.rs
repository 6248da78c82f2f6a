//! Counting a redirect: a tally per link in the worker's shard, and what
//! waits in memory read back for the API.

use tokio::sync::RwLockReadGuard;

use compact_str::CompactString;

use super::{AGENTS_PER_SHARD, Visit, VisitRecord, Visits, lock, shard_index};
use crate::domain::classify::{Agent, agent_key, agent_of, referrer_host};
use crate::domain::{AgentClass, Country, Facets, LinkKey, TargetUrl, Timestamp, VisitCounts};

/// The agent of `ua` from the shard's memory, or parsed and remembered;
/// with the shard's lock, held again.
fn agent_in<'s>(
    shard: &'s std::sync::Mutex<super::Shard>,
    mut s: std::sync::MutexGuard<'s, super::Shard>,
    ua: Option<&[u8]>,
) -> (Agent, std::sync::MutexGuard<'s, super::Shard>) {
    let Some(ua) = ua else {
        return (Agent::NONE, s);
    };
    if let Some(agent) = s.agents.get(ua) {
        return (*agent, s);
    }
    // The patterns take microseconds: not under the lock.
    drop(s);
    let agent = agent_of(ua);
    s = lock(shard);
    if s.agents.len() >= AGENTS_PER_SHARD {
        s.agents.clear();
    }
    s.agents.insert(ua.into(), agent);
    (agent, s)
}

impl Visits {
    /// Counts a redirect of a link without a limit to `target` (when
    /// counting is on).
    pub(crate) fn record(&self, code: &LinkKey, visit: Visit<'_>, target: &TargetUrl) {
        if self.settings.counting {
            self.add(code, visit, target);
        }
    }

    pub(super) fn add(&self, code: &LinkKey, visit: Visit<'_>, target: &TargetUrl) {
        let agent = agent_key(visit.user_agent).filter(|_| visit.agent.is_none());
        let host = referrer_host(visit.referer);
        // The address becomes a place here, outside the lock, and goes no
        // further.
        let place = self.geo.place(visit.client, visit.country);
        let now = Timestamp::now();
        let shard = &self.shards[shard_index()];
        let (found, mut s) = agent_in(shard, lock(shard), agent);
        let agent = visit.agent.unwrap_or(found);
        let facets = Facets {
            country: place.country,
            device: agent.device,
            os: agent.os,
            browser: agent.browser,
            rule: visit.rule,
        };
        // Looked up by reference: the key is cloned only for a link's
        // first visit since the last flush.
        let counts = match s.tallies.get_mut(code) {
            Some(counts) => counts,
            None => s.tallies.entry(code.clone()).or_default(),
        };
        counts.add(now, agent.class, &host);
        counts.add_facets(now, facets, place.city.as_deref());
        s.counted += 1;
        if self.recording.load(std::sync::atomic::Ordering::Relaxed) {
            static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let record = VisitRecord {
                seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                at: now,
                target: target.clone(),
                facets,
                bot: agent.class == AgentClass::Bot,
                host: CompactString::from(host.as_ref()),
                city: place.city,
            };
            s.records.push((code.clone(), record));
        }
    }

    /// What a `User-Agent` says of its sender, from the worker's shard's
    /// memory when it has seen it: for a link's device rules.
    pub(crate) fn agent(&self, user_agent: Option<&[u8]>) -> Agent {
        let shard = &self.shards[shard_index()];
        agent_in(shard, lock(shard), agent_key(user_agent)).0
    }

    /// The visitor's country, for a link's country rules.
    pub(crate) fn country(&self, visit: &Visit<'_>) -> Country {
        self.geo.place(visit.client, visit.country).country
    }

    /// What waits in memory for `code`.
    pub(crate) fn pending(&self, code: &LinkKey) -> VisitCounts {
        let mut out = VisitCounts::default();
        for shard in self.shards.iter() {
            if let Some(c) = lock(shard).tallies.get(code) {
                out.merge(c.clone());
            }
        }
        if let Some(c) = lock(&self.staged).get(code) {
            out.merge(c.clone());
        }
        out
    }

    /// Everything waiting in memory, per link.
    pub(crate) fn pending_all(&self) -> Vec<(LinkKey, VisitCounts)> {
        let mut out: std::collections::HashMap<LinkKey, VisitCounts> = Default::default();
        let shards = self.shards.iter().map(|s| lock(s).tallies.clone());
        for tallies in shards.chain(std::iter::once(lock(&self.staged).clone())) {
            for (key, counts) in tallies {
                out.entry(key).or_default().merge(counts);
            }
        }
        out.into_iter().collect()
    }

    /// Held while reading stored counts to add [`pending`](Self::pending)
    /// to: no flush moves counts from memory to the store meanwhile.
    pub(crate) async fn read_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Drops what is counted in memory for a deleted link.
    pub(crate) fn forget(&self, code: &LinkKey) {
        for shard in self.shards.iter() {
            lock(shard).tallies.remove(code);
        }
        lock(&self.staged).remove(code);
        lock(&self.staged_records).remove(code);
        lock(&self.limits).remove(code);
    }
}
