//! Visits as litelink keeps them: counts per link and hour, and per link
//! and day the referrer hosts and user-agent classes. Never a row per
//! visit, never an address.

use compact_str::CompactString;
use serde::Serialize;
use smallvec::SmallVec;
use strum::{Display, EnumString, IntoStaticStr};

use super::Timestamp;

pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 24 * HOUR_MS;

/// Referrer hosts kept per link and day; the rest count as [`OTHER_HOST`].
/// Bounds what an attacker sending random `Referer`s can make us store.
pub const REFERRER_HOSTS_PER_DAY: usize = 50;

/// The referrer "host" of visits whose host was not kept.
pub const OTHER_HOST: &str = "(other)";
/// The referrer "host" of visits without a `Referer`.
pub const DIRECT_HOST: &str = "(direct)";

/// What sent a visit, from its `User-Agent`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Display,
    EnumString,
    IntoStaticStr,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum AgentClass {
    /// A web browser that is not a known bot.
    Browser,
    /// A known bot or crawler (the `isbot` crate's list).
    Bot,
    /// Anything else: command-line tools, apps, no `User-Agent`.
    Other,
}

impl AgentClass {
    pub fn is_bot(self) -> bool {
        self == Self::Bot
    }
}

/// Hours since the Unix epoch (UTC) of `t`.
pub fn hour_of(t: Timestamp) -> i64 {
    t.millis().div_euclid(HOUR_MS)
}

/// Days since the Unix epoch (UTC) of `t`.
pub fn day_of(t: Timestamp) -> i64 {
    t.millis().div_euclid(DAY_MS)
}

/// One link's visits in one hour. The agent classes are kept here too
/// (`browsers`; bots are `bots`; the rest of the humans are other), so a
/// flush writes one row per link and hour for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HourCount {
    pub hour: i64,
    pub humans: u64,
    pub bots: u64,
    /// Of the humans, those with a browser's User-Agent.
    pub browsers: u64,
}

impl HourCount {
    pub fn others(&self) -> u64 {
        self.humans.saturating_sub(self.browsers)
    }
}

/// Counts of one link: those waiting in memory, those stored, or both.
///
/// One hour and one host are held inline (so are short hosts), so that
/// counting a redirect touches the tally's own memory only: each pointer
/// followed on a random link is a cache miss (docs/benchmarks.md).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VisitCounts {
    pub hours: SmallVec<[HourCount; 1]>,
    /// `(day, host, count)`.
    pub referrers: SmallVec<[(i64, CompactString, u64); 1]>,
}

impl VisitCounts {
    pub fn total(&self) -> u64 {
        self.hours.iter().map(|h| h.humans + h.bots).sum()
    }

    /// Counts one visit. Vectors, not maps: between two flushes a link
    /// almost always has one hour, one day and a handful of hosts.
    pub fn add(&mut self, at: Timestamp, class: AgentClass, referrer: &str) {
        self.add_n(hour_of(at), class, referrer, 1);
    }

    fn add_n(&mut self, hour: i64, class: AgentClass, referrer: &str, n: u64) {
        let mut h = HourCount {
            hour,
            humans: 0,
            bots: 0,
            browsers: 0,
        };
        match class {
            AgentClass::Bot => h.bots = n,
            AgentClass::Browser => (h.humans, h.browsers) = (n, n),
            AgentClass::Other => h.humans = n,
        }
        self.add_hour(h);
        self.add_referrer(hour.div_euclid(24), referrer, n);
    }

    fn add_hour(&mut self, h: HourCount) {
        match self.hours.iter_mut().find(|x| x.hour == h.hour) {
            Some(x) => {
                x.humans += h.humans;
                x.bots += h.bots;
                x.browsers += h.browsers;
            }
            None => self.hours.push(h),
        }
    }

    /// Adds to a host's count; a host beyond [`REFERRER_HOSTS_PER_DAY`] of
    /// its day counts as [`OTHER_HOST`], so memory stays bounded too.
    fn add_referrer(&mut self, day: i64, host: &str, n: u64) {
        if let Some((_, _, count)) = self
            .referrers
            .iter_mut()
            .find(|(d, h, _)| *d == day && &**h == host)
        {
            *count += n;
            return;
        }
        let hosts = self.referrers.iter().filter(|(d, _, _)| *d == day).count();
        if hosts >= REFERRER_HOSTS_PER_DAY && host != OTHER_HOST {
            return self.add_referrer(day, OTHER_HOST, n);
        }
        self.referrers.push((day, host.into(), n));
    }

    /// Adds every count of `other` to these.
    pub fn merge(&mut self, other: VisitCounts) {
        for h in other.hours {
            self.add_hour(h);
        }
        for (day, host, n) in other.referrers {
            self.add_referrer(day, &host, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_split_humans_from_bots_and_bound_the_hosts() {
        let at = Timestamp::from_millis(10 * DAY_MS + 5 * HOUR_MS + 1);
        let mut c = VisitCounts::default();
        c.add(at, AgentClass::Browser, "a.example");
        c.add(at, AgentClass::Bot, DIRECT_HOST);
        c.add(at, AgentClass::Other, "a.example");
        assert_eq!(
            c.hours.as_slice(),
            [HourCount {
                hour: 10 * 24 + 5,
                humans: 2,
                bots: 1,
                browsers: 1,
            }]
        );
        assert_eq!(c.total(), 3);
        for i in 0..2 * REFERRER_HOSTS_PER_DAY {
            c.add(at, AgentClass::Browser, &format!("h{i}.example"));
        }
        let hosts: Vec<_> = c.referrers.iter().map(|(_, h, _)| &**h).collect();
        assert_eq!(hosts.len(), REFERRER_HOSTS_PER_DAY + 1);
        let other = c
            .referrers
            .iter()
            .find(|(_, h, _)| &**h == OTHER_HOST)
            .map(|r| r.2);
        // 50 slots: a.example, (direct) and 48 new hosts; (other), let in
        // past the bound, takes the remaining 52.
        assert_eq!(other, Some(2 * REFERRER_HOSTS_PER_DAY as u64 - 48));
        let mut merged = c.clone();
        merged.merge(c.clone());
        assert_eq!(merged.total(), 2 * c.total());
    }
}
