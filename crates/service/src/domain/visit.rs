//! Visits as litelink keeps them: counts per link and hour, and per link
//! and day the referrer hosts and user-agent classes. Never a row per
//! visit, never an address.

use compact_str::CompactString;
use serde::Serialize;
use smallvec::SmallVec;
use strum::{Display, EnumString, IntoStaticStr};

use super::Timestamp;

pub(crate) const HOUR_MS: i64 = 3_600_000;
pub(crate) const DAY_MS: i64 = 24 * HOUR_MS;

/// Referrer hosts kept per link and day; the rest count as [`OTHER_HOST`].
/// Bounds what an attacker sending random `Referer`s can make us store.
pub(crate) const REFERRER_HOSTS_PER_DAY: usize = 50;

/// The referrer "host" of visits whose host was not kept.
pub(crate) const OTHER_HOST: &str = "(other)";
/// The referrer "host" of visits without a `Referer`.
pub(crate) const DIRECT_HOST: &str = "(direct)";

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
pub(crate) enum AgentClass {
    /// A web browser that is not a known bot.
    Browser,
    /// A known bot or crawler (the `isbot` crate's list).
    Bot,
    /// Anything else: command-line tools, apps, no `User-Agent`.
    Other,
}

impl AgentClass {
    pub(crate) fn is_bot(self) -> bool {
        self == Self::Bot
    }
}

/// The kind of device a visit came from, from its `User-Agent`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    Display,
    EnumString,
    IntoStaticStr,
)]
#[strum(serialize_all = "lowercase")]
pub enum Device {
    Desktop,
    Mobile,
    Tablet,
    Bot,
    #[default]
    Other,
}

/// Operating system families a visit is counted under; anything else is
/// `other`, and no `User-Agent` is `unknown`.
pub(crate) const OS_FAMILIES: [&str; 14] = [
    "unknown",
    "other",
    "Windows",
    "macOS",
    "iOS",
    "Android",
    "Linux",
    "ChromeOS",
    "Windows Phone",
    "BlackBerry",
    "BSD",
    "PlayStation",
    "Xbox",
    "Nintendo",
];

/// Browser families a visit is counted under, as [`OS_FAMILIES`].
pub(crate) const BROWSER_FAMILIES: [&str; 13] = [
    "unknown",
    "other",
    "Chrome",
    "Safari",
    "Firefox",
    "Edge",
    "Internet Explorer",
    "Opera",
    "Samsung Internet",
    "Yandex Browser",
    "Vivaldi",
    "WebView",
    "bot",
];

/// A country as ISO 3166-1 alpha-2 in upper case, or unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Country([u8; 2]);

impl Country {
    pub(crate) const UNKNOWN: Self = Self(*b"--");
    pub(crate) const UNKNOWN_NAME: &str = "unknown";

    /// Two ASCII letters in either case; anything else is unknown (`XX`,
    /// `T1` and the like that CDNs send for no country are letters or
    /// digits that name none: `XX` stays, a digit makes it unknown).
    pub(crate) fn parse(code: &[u8]) -> Self {
        match code {
            [a, b] if a.is_ascii_alphabetic() && b.is_ascii_alphabetic() => {
                Self([a.to_ascii_uppercase(), b.to_ascii_uppercase()])
            }
            _ => Self::UNKNOWN,
        }
    }

    pub(crate) fn is_known(self) -> bool {
        self != Self::UNKNOWN
    }

    /// ISO 3166's user-assigned codes (`AA`, `QM` to `QZ`, `XA` to `XZ`,
    /// `ZZ`): no country has one, though a CDN may send `XX` for none.
    pub(crate) fn is_user_assigned(self) -> bool {
        matches!(
            self.0,
            [b'A', b'A'] | [b'Q', b'M'..=b'Z'] | [b'X', _] | [b'Z', b'Z']
        )
    }

    pub(crate) fn as_str(&self) -> &str {
        if self.is_known() {
            // Two ASCII letters, checked by `parse`.
            std::str::from_utf8(&self.0).unwrap_or(Self::UNKNOWN_NAME)
        } else {
            Self::UNKNOWN_NAME
        }
    }
}

/// What a visit is counted under besides its hour and referrer: its
/// country, device class, and OS and browser families (indexes into
/// [`OS_FAMILIES`] and [`BROWSER_FAMILIES`]). Small and `Copy`, so that a
/// tally finds its entry with one comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Facets {
    pub country: Country,
    pub device: Device,
    pub os: u8,
    pub browser: u8,
    /// Which of the link's rules served the visit: [`Facets::NO_RULES`],
    /// [`Facets::FELL_THROUGH`], or the rule's index plus one.
    pub rule: u8,
}

impl Facets {
    /// The link has no rules: nothing is counted by rule.
    pub(crate) const NO_RULES: u8 = 0;
    /// No rule held: the link's own URL served the visit.
    pub(crate) const FELL_THROUGH: u8 = u8::MAX;

    /// The rule value of a visit served by rule `index` (`None`: none held).
    pub(crate) fn rule_of(index: Option<usize>) -> u8 {
        index
            .and_then(|i| u8::try_from(i + 1).ok())
            .filter(|r| *r != Self::FELL_THROUGH)
            .unwrap_or(Self::FELL_THROUGH)
    }

    pub(crate) fn os_name(&self) -> &'static str {
        OS_FAMILIES
            .get(usize::from(self.os))
            .copied()
            .unwrap_or("other")
    }

    pub(crate) fn browser_name(&self) -> &'static str {
        BROWSER_FAMILIES
            .get(usize::from(self.browser))
            .copied()
            .unwrap_or("other")
    }
}

/// A tally's count of one facet combination: `(day, facets, city, count)`.
pub(crate) type FacetCount = (i64, Option<Facets>, Option<CompactString>, u64);

/// The dimensions a link's visits are counted by per day, besides
/// referrers (which keep their own table).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Display, EnumString, IntoStaticStr,
)]
#[strum(serialize_all = "lowercase")]
pub enum Dim {
    Country,
    /// `CC/City`: the city with its country.
    City,
    Device,
    Os,
    Browser,
    /// Which rule served a visit: its index, or `default` when none held.
    Rule,
}

impl Dim {
    pub(crate) const ALL: [Dim; 6] = [
        Dim::Country,
        Dim::City,
        Dim::Device,
        Dim::Os,
        Dim::Browser,
        Dim::Rule,
    ];
}

/// The rule dimension's value for visits no rule served.
pub(crate) const NO_RULE_VALUE: &str = "default";

/// Distinct values kept per link, day and dimension; the rest count as
/// [`OTHER_HOST`] (`(other)`).
pub(crate) const VALUES_PER_DAY: usize = 50;

/// Distinct facet combinations one link keeps in memory between flushes;
/// past it, visits count under `(other)` in every dimension.
pub(crate) const FACETS_PER_TALLY: usize = 256;

/// Hours since the Unix epoch (UTC) of `t`.
pub(crate) fn hour_of(t: Timestamp) -> i64 {
    t.millis().div_euclid(HOUR_MS)
}

/// Days since the Unix epoch (UTC) of `t`.
pub(crate) fn day_of(t: Timestamp) -> i64 {
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
    pub(crate) fn others(&self) -> u64 {
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
    /// Counted in memory: `(day, facets, city, count)`, one entry per
    /// combination (at most [`FACETS_PER_TALLY`]; `None` facets past it
    /// are `(other)` in every dimension).
    pub facets: SmallVec<[FacetCount; 1]>,
    /// Read from the store: `(day, dimension, value, count)`.
    pub dims: Vec<(i64, Dim, String, u64)>,
    /// Read from the store: visits imported without a time (the link's
    /// `imported_visits`), in no hour or day.
    pub imported: u64,
}

impl VisitCounts {
    pub(crate) fn total(&self) -> u64 {
        // Saturating: stored counts, imported ones included, are added to
        // these, and no total may wrap.
        self.hours
            .iter()
            .fold(0, |n, h| n.saturating_add(h.humans.saturating_add(h.bots)))
    }

    /// Counts one visit. Vectors, not maps: between two flushes a link
    /// almost always has one hour, one day and a handful of hosts.
    pub(crate) fn add(&mut self, at: Timestamp, class: AgentClass, referrer: &str) {
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
        // One visit at a time cannot wrap a count: plain sums, on the
        // redirect path.
        match self.hours.iter_mut().find(|x| x.hour == h.hour) {
            Some(x) => {
                x.humans += h.humans;
                x.bots += h.bots;
                x.browsers += h.browsers;
            }
            None => self.hours.push(h),
        }
        self.add_referrer(hour.div_euclid(24), referrer, n);
    }

    /// Adds an hour's counts, stopping at `u64::MAX`: counts read from
    /// the store (imported ones too) are merged with these.
    fn add_hour(&mut self, h: HourCount) {
        match self.hours.iter_mut().find(|x| x.hour == h.hour) {
            Some(x) => {
                x.humans = x.humans.saturating_add(h.humans);
                x.bots = x.bots.saturating_add(h.bots);
                x.browsers = x.browsers.saturating_add(h.browsers);
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
            *count = count.saturating_add(n);
            return;
        }
        let hosts = self.referrers.iter().filter(|(d, _, _)| *d == day).count();
        if hosts >= REFERRER_HOSTS_PER_DAY && host != OTHER_HOST {
            return self.add_referrer(day, OTHER_HOST, n);
        }
        self.referrers.push((day, host.into(), n));
    }

    /// Counts one visit's facets (its city where one is known).
    pub(crate) fn add_facets(&mut self, at: Timestamp, facets: Facets, city: Option<&str>) {
        self.add_facets_n(day_of(at), Some(facets), city, 1);
    }

    fn add_facets_n(&mut self, day: i64, facets: Option<Facets>, city: Option<&str>, n: u64) {
        let found = self
            .facets
            .iter_mut()
            .find(|(d, f, c, _)| *d == day && *f == facets && c.as_deref() == city);
        if let Some(entry) = found {
            entry.3 = entry.3.saturating_add(n);
            return;
        }
        if facets.is_some() && self.facets.len() >= FACETS_PER_TALLY {
            return self.add_facets_n(day, None, None, n);
        }
        self.facets
            .push((day, facets, city.map(CompactString::from), n));
    }

    /// Every dimension's counts: those read from the store and those
    /// counted in memory, summed per `(day, dimension, value)`.
    pub(crate) fn dimensions(&self) -> Vec<(i64, Dim, String, u64)> {
        let mut out: std::collections::BTreeMap<(i64, Dim, String), u64> = Default::default();
        for (day, dim, value, n) in &self.dims {
            let c = out.entry((*day, *dim, value.clone())).or_default();
            *c = c.saturating_add(*n);
        }
        for (day, facets, city, n) in &self.facets {
            for (dim, value) in facet_values(facets.as_ref(), city.as_deref()) {
                let c = out.entry((*day, dim, value)).or_default();
                *c = c.saturating_add(*n);
            }
        }
        out.into_iter()
            .map(|((d, dim, v), n)| (d, dim, v, n))
            .collect()
    }

    /// Adds every count of `other` to these.
    pub(crate) fn merge(&mut self, other: VisitCounts) {
        for h in other.hours {
            self.add_hour(h);
        }
        for (day, host, n) in other.referrers {
            self.add_referrer(day, &host, n);
        }
        for (day, facets, city, n) in other.facets {
            self.add_facets_n(day, facets, city.as_deref(), n);
        }
        self.dims.extend(other.dims);
        self.imported = self.imported.saturating_add(other.imported);
    }
}

/// The value of each dimension a facet combination is counted under
/// (`(other)` in each for `None`); a city only where one is known.
pub(crate) fn facet_values(facets: Option<&Facets>, city: Option<&str>) -> Vec<(Dim, String)> {
    let Some(f) = facets else {
        return Dim::ALL
            .into_iter()
            .filter(|d| *d != Dim::City && *d != Dim::Rule)
            .map(|d| (d, OTHER_HOST.to_owned()))
            .collect();
    };
    let mut out = vec![
        (Dim::Country, f.country.as_str().to_owned()),
        (Dim::Device, <&str>::from(f.device).to_owned()),
        (Dim::Os, f.os_name().to_owned()),
        (Dim::Browser, f.browser_name().to_owned()),
    ];
    if let (Some(city), true) = (city, f.country.is_known()) {
        out.push((Dim::City, format!("{}/{city}", f.country.as_str())));
    }
    match f.rule {
        Facets::NO_RULES => {}
        Facets::FELL_THROUGH => out.push((Dim::Rule, NO_RULE_VALUE.to_owned())),
        r => out.push((Dim::Rule, (r - 1).to_string())),
    }
    out
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
