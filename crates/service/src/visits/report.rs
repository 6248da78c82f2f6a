//! A link's visit report: its series, top referrers and client classes
//! over a window.

use std::collections::HashMap;

use serde::Serialize;

use crate::domain::visit::{NO_RULE_VALUE, OTHER_HOST};
use crate::domain::wire::csv_cell;
use crate::domain::{AgentClass, Dim, Timestamp, VisitCounts};

/// Buckets of a visit report's series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub(crate) enum Interval {
    Hour,
    Day,
}

/// What a visit report covers: `[from, to)`, all time by default. A bucket
/// (an hour, or a day for referrers and agents) counts when it overlaps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
    pub interval: Interval,
}

impl Window {
    fn overlaps(&self, start_ms: i64, len_ms: i64) -> bool {
        self.from.is_none_or(|f| start_ms + len_ms > f.millis())
            && self.to.is_none_or(|t| start_ms < t.millis())
    }
}

/// Referrer hosts a report names; the rest are summed as `(other)`.
pub(crate) const REPORT_REFERRERS: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct SeriesPoint {
    /// Start of the hour or day (UTC).
    #[schema(value_type = String, format = DateTime)]
    pub start: Timestamp,
    pub humans: u64,
    pub bots: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct HostCount {
    pub host: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct ClassCount {
    pub class: AgentClass,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct CountryCount {
    /// ISO 3166-1 alpha-2, `unknown`, or `(other)`.
    pub country: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct CityCount {
    pub country: String,
    pub city: String,
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct NameCount {
    pub name: String,
    pub count: u64,
}

/// Visits served by one of a link's rules (`index`), or by none of them
/// (`null`: the link's own URL).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct RuleCount {
    pub index: Option<u8>,
    pub count: u64,
}

/// Values a report names per dimension (countries, cities, devices, OS
/// and browser families); the rest are summed as `(other)`.
pub(crate) const REPORT_VALUES: usize = 50;

/// `GET /api/v1/links/{code}/visits`: every figure covers the window.
/// The series lists buckets with visits only, oldest first. Countries,
/// cities, devices, systems and browsers are counted per day, as
/// referrers are; visits counted before they were kept are in no row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub(crate) struct VisitReport {
    /// Visits in the window; a report over all time (no `from` or `to`)
    /// adds `imported_visits`.
    pub total: u64,
    /// Visits carried over from another shortener without a time: in no
    /// series point or breakdown, and never counted toward `max_visits`.
    pub imported_visits: u64,
    pub humans: u64,
    pub bots: u64,
    pub series: Vec<SeriesPoint>,
    pub referrers: Vec<HostCount>,
    pub agents: Vec<ClassCount>,
    pub countries: Vec<CountryCount>,
    /// Only where a GeoIP database names a city.
    pub cities: Vec<CityCount>,
    /// `desktop`, `mobile`, `tablet`, `bot` or `other`.
    pub devices: Vec<NameCount>,
    pub os: Vec<NameCount>,
    pub browsers: Vec<NameCount>,
    /// Which rule served each visit, for a link with rules (rule order,
    /// then `null` for none).
    pub rules: Vec<RuleCount>,
}

/// One dimension's counts in the window, largest first (then by name),
/// at most [`REPORT_VALUES`] and `(other)` for the rest.
fn top(
    counts: &[(i64, Dim, String, u64)],
    dim: Dim,
    in_window: impl Fn(i64) -> bool,
) -> Vec<(String, u64)> {
    let mut values: HashMap<&str, u64> = HashMap::new();
    for (day, d, value, n) in counts {
        if *d == dim && in_window(*day) {
            let v = values.entry(value).or_default();
            *v = v.saturating_add(*n);
        }
    }
    let other = values.remove(OTHER_HOST).unwrap_or(0);
    let mut out: Vec<(String, u64)> = values
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(v, n)| (v.to_owned(), n))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let rest = saturating_sum(out.iter().skip(REPORT_VALUES).map(|v| v.1));
    out.truncate(REPORT_VALUES);
    let other = other.saturating_add(rest);
    if other > 0 {
        out.push((OTHER_HOST.to_owned(), other));
    }
    out
}

/// A sum that stops at `u64::MAX`: stored counts come from imports too,
/// and no count may wrap or panic a report.
fn saturating_sum(counts: impl Iterator<Item = u64>) -> u64 {
    counts.fold(0, u64::saturating_add)
}

impl VisitReport {
    pub(crate) fn build(counts: &VisitCounts, window: &Window) -> Self {
        use crate::domain::visit::{DAY_MS, HOUR_MS};
        use std::collections::BTreeMap;
        let mut series: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
        for h in &counts.hours {
            if !window.overlaps(h.hour * HOUR_MS, HOUR_MS) {
                continue;
            }
            let start = match window.interval {
                Interval::Hour => h.hour * HOUR_MS,
                Interval::Day => h.hour.div_euclid(24) * DAY_MS,
            };
            let b = series.entry(start).or_default();
            b.0 = b.0.saturating_add(h.humans);
            b.1 = b.1.saturating_add(h.bots);
        }
        let humans = saturating_sum(series.values().map(|b| b.0));
        let bots = saturating_sum(series.values().map(|b| b.1));
        let in_window = |day: i64| window.overlaps(day * DAY_MS, DAY_MS);
        let mut hosts: HashMap<&str, u64> = HashMap::new();
        for (day, host, n) in &counts.referrers {
            if in_window(*day) {
                let c = hosts.entry(host).or_default();
                *c = c.saturating_add(*n);
            }
        }
        let other = hosts.remove(OTHER_HOST).unwrap_or(0);
        let mut referrers: Vec<HostCount> = hosts
            .into_iter()
            .map(|(host, count)| HostCount {
                host: host.to_owned(),
                count,
            })
            .collect();
        referrers.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.host.cmp(&b.host)));
        let rest = saturating_sum(referrers.iter().skip(REPORT_REFERRERS).map(|r| r.count));
        referrers.truncate(REPORT_REFERRERS);
        let other = other.saturating_add(rest);
        if other > 0 {
            referrers.push(HostCount {
                host: OTHER_HOST.to_owned(),
                count: other,
            });
        }
        // Agent classes at day granularity, like referrers: every hour of
        // a day that overlaps the window.
        let (mut browser, mut other, mut bot) = (0, 0, 0);
        for h in &counts.hours {
            if in_window(h.hour.div_euclid(24)) {
                browser = u64::saturating_add(browser, h.browsers);
                other = u64::saturating_add(other, h.others());
                bot = u64::saturating_add(bot, h.bots);
            }
        }
        let mut agents: Vec<ClassCount> = [
            (AgentClass::Browser, browser),
            (AgentClass::Bot, bot),
            (AgentClass::Other, other),
        ]
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(class, count)| ClassCount { class, count })
        .collect();
        agents.sort_by(|a, b| b.count.cmp(&a.count).then(a.class.cmp(&b.class)));
        let dims = counts.dimensions();
        let named = |dim| {
            top(&dims, dim, in_window)
                .into_iter()
                .map(|(name, count)| NameCount { name, count })
                .collect()
        };
        let countries = top(&dims, Dim::Country, in_window)
            .into_iter()
            .map(|(country, count)| CountryCount { country, count })
            .collect();
        let cities = top(&dims, Dim::City, in_window)
            .into_iter()
            .map(|(value, count)| {
                let (country, city) = value.split_once('/').unwrap_or(("", &value));
                CityCount {
                    country: country.to_owned(),
                    city: city.to_owned(),
                    count,
                }
            })
            .collect();
        let all_time = window.from.is_none() && window.to.is_none();
        Self {
            total: (humans + bots).saturating_add(if all_time { counts.imported } else { 0 }),
            imported_visits: counts.imported,
            humans,
            bots,
            series: series
                .into_iter()
                .map(|(start, (humans, bots))| SeriesPoint {
                    start: Timestamp::from_millis(start),
                    humans,
                    bots,
                })
                .collect(),
            referrers,
            agents,
            countries,
            cities,
            devices: named(Dim::Device),
            os: named(Dim::Os),
            browsers: named(Dim::Browser),
            rules: rule_counts(&top(&dims, Dim::Rule, in_window)),
        }
    }
}

/// The rule dimension's values as counts per rule: the rules in order,
/// then visits no rule served.
fn rule_counts(values: &[(String, u64)]) -> Vec<RuleCount> {
    let mut out: Vec<RuleCount> = values
        .iter()
        .filter_map(|(v, n)| {
            let index = if v == NO_RULE_VALUE {
                None
            } else {
                Some(v.parse::<u8>().ok()?)
            };
            Some(RuleCount { index, count: *n })
        })
        .collect();
    out.sort_by_key(|r| r.index.map_or(u16::MAX, u16::from));
    out
}

impl VisitReport {
    /// The report as one CSV table, `dimension,value,start,humans,bots,count`:
    /// the series first (`series` rows: start, humans, bots and their
    /// sum), then a row per value of each dimension (value and count).
    pub(crate) fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut row = |fields: [&str; 6]| {
            // Writing to a Vec cannot fail.
            let _ = w.write_record(fields);
        };
        row(["dimension", "value", "start", "humans", "bots", "count"]);
        for p in &self.series {
            let (start, humans, bots) = (p.start.to_string(), p.humans, p.bots);
            row([
                "series",
                "",
                &start,
                &humans.to_string(),
                &bots.to_string(),
                &humans.saturating_add(bots).to_string(),
            ]);
        }
        // Values came from requests (and imports): none may run as a
        // spreadsheet's formula.
        let mut value =
            |dim: &str, v: &str, n: u64| row([dim, &csv_cell(v), "", "", "", &n.to_string()]);
        for c in &self.countries {
            value("country", &c.country, c.count);
        }
        for c in &self.cities {
            value("city", &format!("{}/{}", c.country, c.city), c.count);
        }
        for (dim, list) in [
            ("device", &self.devices),
            ("os", &self.os),
            ("browser", &self.browsers),
        ] {
            for v in list {
                value(dim, &v.name, v.count);
            }
        }
        for r in &self.referrers {
            value("referrer", &r.host, r.count);
        }
        for r in &self.rules {
            let index = r.index.map_or(NO_RULE_VALUE.to_owned(), |i| i.to_string());
            value("rule", &index, r.count);
        }
        for a in &self.agents {
            value("agent", a.class.into(), a.count);
        }
        if self.imported_visits > 0 {
            value("imported", "", self.imported_visits);
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::visit::DIRECT_HOST;

    #[test]
    fn a_report_covers_its_window_and_names_the_top_referrers() {
        use crate::domain::visit::{DAY_MS, HOUR_MS};
        let mut counts = VisitCounts::default();
        let day0 = 20_000 * DAY_MS;
        // Day 0, 10:00: 12 hosts, host i with i + 1 visits; day 1, 03:00:
        // 5 bot visits without a referrer.
        for i in 0..12u64 {
            for _ in 0..=i {
                let at = Timestamp::from_millis(day0 + 10 * HOUR_MS);
                counts.add(at, AgentClass::Browser, &format!("h{i:02}.example"));
            }
        }
        for _ in 0..5 {
            let at = Timestamp::from_millis(day0 + DAY_MS + 3 * HOUR_MS + 59_000);
            counts.add(at, AgentClass::Bot, DIRECT_HOST);
        }
        let all = |interval| Window {
            from: None,
            to: None,
            interval,
        };
        let r = VisitReport::build(&counts, &all(Interval::Hour));
        assert_eq!((r.total, r.humans, r.bots), (78 + 5, 78, 5));
        assert_eq!(r.series.len(), 2);
        assert_eq!(r.series[0].start.to_string(), "2024-10-04T10:00:00Z");
        // The ten largest by count (h11 down to h03, with (direct) at 5
        // beside h04), then the rest: h02, h01 and h00.
        assert_eq!(r.referrers.len(), REPORT_REFERRERS + 1);
        assert_eq!(r.referrers[0].host, "h11.example");
        let other = r.referrers.last().expect("other");
        assert_eq!((other.host.as_str(), other.count), (OTHER_HOST, 3 + 2 + 1));
        let sum: u64 = r.referrers.iter().map(|h| h.count).sum();
        assert_eq!(sum, r.total);
        assert_eq!(
            r.agents,
            vec![
                ClassCount {
                    class: AgentClass::Browser,
                    count: 78
                },
                ClassCount {
                    class: AgentClass::Bot,
                    count: 5
                },
            ]
        );
        let daily = VisitReport::build(&counts, &all(Interval::Day));
        assert_eq!(daily.series[1].start.to_string(), "2024-10-05T00:00:00Z");
        // From 03:30 on day 1: its 03:00 hour overlaps, day 0 does not.
        let late = Window {
            from: Some(Timestamp::from_millis(
                day0 + DAY_MS + 3 * HOUR_MS + 1_800_000,
            )),
            to: None,
            interval: Interval::Hour,
        };
        let r = VisitReport::build(&counts, &late);
        assert_eq!((r.total, r.bots), (5, 5));
        assert_eq!(
            r.referrers,
            vec![HostCount {
                host: DIRECT_HOST.into(),
                count: 5
            }]
        );
        // Up to 10:00 on day 0, exclusive: nothing.
        let early = Window {
            from: None,
            to: Some(Timestamp::from_millis(day0 + 10 * HOUR_MS)),
            interval: Interval::Hour,
        };
        assert_eq!(VisitReport::build(&counts, &early).total, 0);
    }
}
