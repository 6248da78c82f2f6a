//! Another shortener's visit log replayed through the classifier that
//! counts live visits: each logged visit lands in its hour (humans, bots,
//! browsers), its day's referrer host, and its day's country, device,
//! system and browser, with the same cap of values a day. Addresses are
//! never read.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::domain::classify::{Agent, agent_key, agent_of, referrer_host};
use crate::domain::visit::{OTHER_HOST, VALUES_PER_DAY, day_of, facet_values};
use crate::domain::{Country, Dim, Facets, Timestamp, VisitCounts};
use crate::store::History;

/// Distinct `User-Agent`s remembered while replaying: a log repeats a few
/// thousand of them, and parsing one takes microseconds.
const AGENTS_KEPT: usize = 100_000;

/// The classifier's memory across one import.
#[derive(Default)]
pub struct Replay {
    agents: HashMap<Box<[u8]>, Agent>,
}

/// One link's replayed visits.
#[derive(Debug, Default)]
pub(crate) struct Logged {
    counts: VisitCounts,
    /// Per day and dimension, the values kept so far (at most
    /// [`VALUES_PER_DAY`]; later ones count as `(other)`, as live).
    kept: HashMap<(i64, Dim), HashSet<String>>,
    dims: BTreeMap<(i64, Dim, String), u64>,
    pub visits: u64,
}

/// A visit as a log keeps it.
pub(crate) struct LoggedVisit<'a> {
    pub at: Timestamp,
    /// `None` or empty: a direct visit.
    pub referrer: Option<&'a str>,
    pub user_agent: Option<&'a str>,
    /// ISO 3166 alpha-2, when the source located the visit.
    pub country: Option<&'a str>,
}

impl Replay {
    pub(crate) fn add(&mut self, into: &mut Logged, visit: LoggedVisit<'_>) {
        let agent = match agent_key(visit.user_agent.map(str::as_bytes)) {
            None => Agent::NONE,
            Some(ua) => match self.agents.get(ua) {
                Some(a) => *a,
                None => {
                    let a = agent_of(ua);
                    if self.agents.len() >= AGENTS_KEPT {
                        self.agents.clear();
                    }
                    self.agents.insert(ua.into(), a);
                    a
                }
            },
        };
        let referrer = visit
            .referrer
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::as_bytes);
        let host = referrer_host(referrer);
        into.counts.add(visit.at, agent.class, &host);
        let facets = Facets {
            country: visit
                .country
                .map_or(Country::UNKNOWN, |c| Country::parse(c.trim().as_bytes())),
            device: agent.device,
            os: agent.os,
            browser: agent.browser,
            rule: Facets::NO_RULES,
        };
        let day = day_of(visit.at);
        for (dim, value) in facet_values(Some(&facets), None) {
            let kept = into.kept.entry((day, dim)).or_default();
            let value = if kept.contains(&value) {
                value
            } else if kept.len() < VALUES_PER_DAY {
                kept.insert(value.clone());
                value
            } else {
                OTHER_HOST.to_owned()
            };
            *into.dims.entry((day, dim, value)).or_default() += 1;
        }
        into.visits += 1;
    }
}

impl Logged {
    /// The counts as an export's history, for the checker to take as it
    /// takes litelink's own.
    pub(crate) fn history(mut self) -> Option<History> {
        self.counts.dims = std::mem::take(&mut self.dims)
            .into_iter()
            .map(|((day, dim, value), n)| (day, dim, value, n))
            .collect();
        History::of(&self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_is_counted_as_live_visits_are() {
        let mut replay = Replay::default();
        let mut logged = Logged::default();
        let at = Timestamp::parse("2024-05-06T07:08:09Z").unwrap();
        let firefox =
            "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:125.0) Gecko/20100101 Firefox/125.0";
        for (referrer, ua, country) in [
            (
                Some("https://www.google.com/search?q=x"),
                Some(firefox),
                Some("DE"),
            ),
            (
                None,
                Some("Googlebot/2.1 (+http://www.google.com/bot.html)"),
                None,
            ),
            (Some(""), None, Some("fr")),
        ] {
            replay.add(
                &mut logged,
                LoggedVisit {
                    at,
                    referrer,
                    user_agent: ua,
                    country,
                },
            );
        }
        assert_eq!(logged.visits, 3);
        let h = logged.history().expect("a history");
        assert_eq!(h.hours, vec![("2024-05-06T07:00:00Z".into(), 2, 1, 1)]);
        let mut referrers = h.referrers.clone();
        referrers.sort();
        assert_eq!(
            referrers,
            vec![
                ("2024-05-06T00:00:00Z".into(), "(direct)".into(), 2),
                ("2024-05-06T00:00:00Z".into(), "www.google.com".into(), 1),
            ]
        );
        assert!(
            h.facets
                .iter()
                .any(|f| f.1 == "country" && f.2 == "DE" && f.3 == 1)
        );
        assert!(
            h.facets
                .iter()
                .any(|f| f.1 == "browser" && f.2 == "Firefox" && f.3 == 1)
        );
    }

    #[test]
    fn a_day_keeps_at_most_its_cap_of_values() {
        let mut replay = Replay::default();
        let mut logged = Logged::default();
        let at = Timestamp::parse("2024-05-06T07:08:09Z").unwrap();
        let codes: Vec<String> = (0..60)
            .map(|i| format!("{}{}", (b'A' + i / 26) as char, (b'A' + i % 26) as char))
            .collect();
        for c in &codes {
            replay.add(
                &mut logged,
                LoggedVisit {
                    at,
                    referrer: None,
                    user_agent: None,
                    country: Some(c),
                },
            );
        }
        let h = logged.history().expect("a history");
        let countries: Vec<_> = h.facets.iter().filter(|f| f.1 == "country").collect();
        assert_eq!(countries.len(), VALUES_PER_DAY + 1, "{countries:?}");
        assert!(countries.iter().any(|f| f.2 == "(other)" && f.3 == 10));
    }
}
