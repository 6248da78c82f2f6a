//! `litelink export` and `import`: links as JSON lines or CSV, with every
//! field the store holds and deleted codes as tombstones.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Write};
use std::sync::Arc;

use crate::domain::classify::referrer_host;
use crate::domain::rules;
use crate::domain::visit::{
    BROWSER_FAMILIES, Country, DAY_MS, DIRECT_HOST, Device, HOUR_MS, HourCount, NO_RULE_VALUE,
    OS_FAMILIES, OTHER_HOST, REFERRER_HOSTS_PER_DAY, VALUES_PER_DAY,
};
use crate::domain::wire::{csv_cell, from_csv_cell};
use crate::domain::{
    DEFAULT_NAME, Domain, DomainId, Host, ShortCode, TargetPolicy, TargetUrl, Timestamp, UserId,
    is_reserved,
};
use crate::domain::{Dim, Labels, LinkRules, PasswordHash, Tags, Title, VisitCounts, extra_of};
use crate::store::{History, ImportRow, Record, User};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display, strum::VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum Format {
    Jsonl,
    Csv,
}

/// The CSV columns, in order; also its header line. Files with only the
/// first six (written before visits), eight (before domains), nine
/// (before titles and tags) or eleven (before imported visits) are read
/// too. An empty `domain` is the default
/// domain; `tags` are joined by `|`.
pub const CSV_COLUMNS: [&str; 12] = [
    "code",
    "url",
    "created_at",
    "expires_at",
    "owner",
    "deleted_at",
    "max_visits",
    "visits",
    "domain",
    "title",
    "tags",
    "imported_visits",
];

/// Columns of CSV exports from before visits, domains, titles, and
/// imported visits.
const OLDER_CSV_COLUMNS: [usize; 4] = [6, 8, 9, 11];

/// Writes records in `format`.
pub enum Writer<W: Write> {
    Jsonl(W),
    Csv(Box<csv::Writer<W>>),
}

impl<W: Write> Writer<W> {
    pub fn new(format: Format, out: W) -> std::io::Result<Self> {
        Ok(match format {
            Format::Jsonl => Self::Jsonl(out),
            Format::Csv => {
                let mut w = csv::Writer::from_writer(out);
                w.write_record(CSV_COLUMNS)?;
                Self::Csv(Box::new(w))
            }
        })
    }

    pub fn write(&mut self, r: &Record) -> std::io::Result<()> {
        match self {
            Self::Jsonl(out) => {
                serde_json::to_writer(&mut *out, r)?;
                out.write_all(b"\n")
            }
            Self::Csv(w) => {
                let max_visits = r.max_visits.map(|n| n.to_string());
                let visits = r.visits.map(|n| n.to_string());
                let tags = r.tags.join("|");
                let imported = r.imported_visits.map(|n| n.to_string());
                let fields = [
                    r.code.as_deref(),
                    r.url.as_deref(),
                    Some(r.created_at.as_str()),
                    r.expires_at.as_deref(),
                    r.owner.as_deref(),
                    r.deleted_at.as_deref(),
                    max_visits.as_deref(),
                    visits.as_deref(),
                    r.domain.as_deref(),
                    r.title.as_deref(),
                    Some(tags.as_str()),
                    imported.as_deref(),
                ];
                let cells = fields.map(|f| csv_cell(f.unwrap_or("")));
                Ok(w.write_record(cells.iter().map(|c| c.as_bytes()))?)
            }
        }
    }

    /// Whether `r` is written whole: CSV has no columns for a password,
    /// rules or an expired target.
    pub fn carries(&self, r: &Record) -> bool {
        matches!(self, Self::Jsonl(_))
            || (r.password_hash.is_none() && r.rules.is_none() && r.expired_url.is_none())
    }

    pub fn finish(self) -> std::io::Result<W> {
        match self {
            Self::Jsonl(mut out) => {
                out.flush()?;
                Ok(out)
            }
            Self::Csv(w) => w.into_inner().map_err(|e| e.into_error()),
        }
    }
}

/// The line a CSV row starts on, whether it was read or not.
pub(crate) fn csv_line(row: &Result<csv::StringRecord, csv::Error>) -> u64 {
    let position = match row {
        Ok(r) => r.position(),
        Err(e) => e.position(),
    };
    position.map_or(0, csv::Position::line)
}

/// Reads records with their line numbers; a line that cannot be read as a
/// record is an `Err` with its message.
pub fn read<R: BufRead + Send + 'static>(
    format: Format,
    input: R,
) -> Box<dyn Iterator<Item = (u64, Result<Record, String>)> + Send> {
    match format {
        Format::Jsonl => Box::new(
            input
                .lines()
                .enumerate()
                .map(|(i, line)| (i as u64 + 1, line))
                .filter(|(_, line)| !matches!(line, Ok(l) if l.trim().is_empty()))
                .map(|(n, line)| {
                    let record = line.map_err(|e| e.to_string()).and_then(|l| {
                        serde_json::from_str::<Record>(&l).map_err(|e| e.to_string())
                    });
                    (n, record)
                }),
        ),
        Format::Csv => {
            let reader = csv::ReaderBuilder::new()
                .has_headers(true)
                .from_reader(input);
            Box::new(reader.into_records().map(|row| {
                let line = csv_line(&row);
                let record = row.map_err(|e| e.to_string()).and_then(|r| {
                    if r.len() != CSV_COLUMNS.len() && !OLDER_CSV_COLUMNS.contains(&r.len()) {
                        return Err(format!("expected {} columns", CSV_COLUMNS.len()));
                    }
                    let opt = |i: usize| {
                        r.get(i)
                            .map(|c| from_csv_cell(c).to_owned())
                            .filter(|s| !s.is_empty())
                    };
                    let number = |i: usize, name: &str| -> Result<Option<u64>, String> {
                        opt(i)
                            .map(|s| {
                                s.parse::<u64>()
                                    .map_err(|_| format!("{name}: '{s}' is not a count"))
                            })
                            .transpose()
                    };
                    Ok(Record {
                        domain: opt(8),
                        max_visits: number(6, "max_visits")?,
                        visits: number(7, "visits")?,
                        imported_visits: number(11, "imported_visits")?,
                        code: opt(0),
                        url: opt(1),
                        created_at: from_csv_cell(&r[2]).to_owned(),
                        expires_at: opt(3),
                        owner: opt(4),
                        deleted_at: opt(5),
                        history: None,
                        password_hash: None,
                        rules: None,
                        expired_url: None,
                        title: opt(9),
                        tags: opt(10)
                            .map(|t| t.split('|').map(str::to_owned).collect())
                            .unwrap_or_default(),
                    })
                });
                (line, record)
            }))
        }
    }
}

/// Turns records into rows the store takes: every field checked as the API
/// would (except that past expiries are kept), owners found by name.
pub struct Checker {
    owners: HashMap<String, UserId>,
    /// The domains here, by host.
    domains: HashMap<Host, DomainId>,
    /// The targets refused, as the server refuses them.
    targets: TargetPolicy,
    /// Owner names without a user here, each warned about once.
    pub unknown_owners: HashSet<String>,
    /// Hosts whose links land on the default domain.
    default_hosts: HashSet<Host>,
    /// The owner of every link, whatever the records say.
    owner: Option<UserId>,
    /// Domain names already parsed, and what they parsed to.
    hosts: std::cell::RefCell<HashMap<String, Result<Host, String>>>,
}

impl Checker {
    pub fn new(users: &[User], domains: &[Domain], targets: TargetPolicy) -> Self {
        Self {
            owners: users.iter().map(|u| (u.name.clone(), u.id)).collect(),
            domains: domains
                .iter()
                .filter_map(|d| Some((d.host.clone()?, d.id)))
                .collect(),
            targets,
            unknown_owners: HashSet::new(),
            default_hosts: HashSet::new(),
            owner: None,
            hosts: Default::default(),
        }
    }

    /// Links on `host` land on the default domain: the source served its
    /// default domain there.
    pub fn default_host(mut self, host: Host) -> Self {
        self.default_hosts.insert(host);
        self
    }

    /// Every link gets the user named `name` as its owner; an error when
    /// there is none.
    pub fn owned_by(mut self, name: &str) -> Result<Self, String> {
        let id = self
            .owners
            .get(name)
            .or_else(|| {
                let folded = crate::domain::user::fold_name(name);
                self.owners
                    .iter()
                    .find(|(n, _)| crate::domain::user::fold_name(n) == folded)
                    .map(|(_, id)| id)
            })
            .ok_or_else(|| format!("--owner: no user '{name}' here"))?;
        self.owner = Some(*id);
        Ok(self)
    }

    /// The domain a record names, if it names one: `Ok(None)` for the
    /// default domain (by name, or by a host that stands for it).
    fn host_of(&self, r: &Record) -> Result<Option<Host>, String> {
        match r.domain.as_deref() {
            None => Ok(None),
            Some(name) if name.eq_ignore_ascii_case(DEFAULT_NAME) => Ok(None),
            Some(name) => {
                // Most records of a file name one domain, or a few: each
                // name is parsed (IDNA and all) once.
                let mut seen = self.hosts.borrow_mut();
                let host = match seen.get(name) {
                    Some(host) => host.clone(),
                    None => {
                        let parsed = Host::parse(name).map_err(|e| format!("domain: {e}"));
                        if seen.len() < 10_000 {
                            seen.insert(name.to_owned(), parsed.clone());
                        }
                        parsed
                    }
                }?;
                Ok((!self.default_hosts.contains(&host)).then_some(host))
            }
        }
    }

    /// Why a record on a domain this database lacks is skipped (without
    /// `--create-domains`).
    pub fn missing_domain(&self, r: &Record) -> Option<String> {
        match self.host_of(r) {
            Ok(Some(host)) if !self.domains.contains_key(&host) => Some(format!(
                "no domain '{host}' here (add it, import with --create-domains, or name the source's \
                 default host with --source-default-domain)"
            )),
            _ => None,
        }
    }

    /// The host a record names that is no domain here (to add, with
    /// `--create-domains`); `Err` when it is not a host name at all.
    pub fn new_domain(&self, r: &Record) -> Result<Option<Host>, String> {
        Ok(self
            .host_of(r)?
            .filter(|host| !self.domains.contains_key(host)))
    }

    /// A domain added since the checker was made.
    pub fn learn(&mut self, host: Host, id: DomainId) {
        self.domains.insert(host, id);
    }

    /// The row, or why the record is refused. A new unknown owner name
    /// comes back in the `Option` for the caller to warn about.
    pub fn check(&mut self, line: u64, r: Record) -> Result<(ImportRow, Option<String>), String> {
        let domain = match self.host_of(&r)? {
            None => DomainId::DEFAULT,
            Some(host) => *self.domains.get(&host).ok_or_else(|| {
                format!("no domain '{host}' here (add it, or import with --create-domains)")
            })?,
        };
        let code = match &r.code {
            None => None,
            Some(code) => {
                let code = ShortCode::parse(code).map_err(|e| format!("code: {e}"))?;
                if is_reserved(code.as_str()) {
                    return Err(format!("code '{code}' is reserved"));
                }
                Some(code)
            }
        };
        let stamp = |name: &str, v: Option<&str>| {
            v.map(|s| Timestamp::parse(s).map_err(|e| format!("{name}: {e}")))
                .transpose()
        };
        let deleted_at = stamp("deleted_at", r.deleted_at.as_deref())?;
        let target = match (&r.url, deleted_at) {
            (None, Some(_)) if code.is_none() => return Err("a deleted link needs its code".into()),
            (Some(url), None) => {
                let target = TargetUrl::parse(url).map_err(|e| format!("url: {e}"))?;
                self.targets
                    .check(&target, None)
                    .map_err(|e| format!("url: {e}"))?;
                Some(target)
            }
            (None, Some(_)) => None,
            (Some(_), Some(_)) => return Err("a deleted code has no url".into()),
            (None, None) => return Err("url is required".into()),
        };
        let created_at = Timestamp::parse(&r.created_at).map_err(|e| format!("created_at: {e}"))?;
        // A minute's grace for the clock of the server that exported.
        if created_at.millis() > Timestamp::now().millis() + 60_000 {
            return Err(format!("created_at: '{}' is in the future", r.created_at));
        }
        let expires_at = stamp("expires_at", r.expires_at.as_deref())?;
        if r.max_visits == Some(0) {
            return Err("max_visits must be at least 1".into());
        }
        for (name, n) in [("visits", r.visits), ("imported_visits", r.imported_visits)] {
            if n.is_some_and(|n| n > MAX_TOTAL) {
                return Err(format!(
                    "{name}: more than {MAX_TOTAL}, which no link could have"
                ));
            }
        }
        let extra = self.extra_of(&r)?;
        if extra.is_some() && deleted_at.is_some() {
            return Err("a deleted code has no password, rules or expired_url".into());
        }
        let labels = Labels {
            title: r
                .title
                .as_deref()
                .map(|t| Title::parse(t).map(|t| t.0))
                .transpose()
                .map_err(|e| format!("title: {e}"))?,
            tags: Tags::parse(r.tags.iter().map(String::as_str))
                .map_err(|e| format!("tags: {e}"))?
                .0,
        };
        if !labels.is_empty() && deleted_at.is_some() {
            return Err("a deleted code has no title or tags".into());
        }
        let mut warn = None;
        let owner = match r.owner {
            _ if self.owner.is_some() => self.owner,
            None => None,
            Some(name) => match self.owners.get(&name) {
                Some(id) => Some(*id),
                None => {
                    if self.unknown_owners.insert(name.clone()) {
                        warn = Some(name);
                    }
                    None
                }
            },
        };
        Ok((
            ImportRow {
                line,
                domain,
                code,
                target,
                created_at,
                expires_at,
                owner,
                deleted_at,
                max_visits: r.max_visits,
                visits: r.visits.unwrap_or(0),
                imported_visits: r.imported_visits.unwrap_or(0),
                history: r.history.as_ref().map(counts_of).transpose()?,
                extra,
                labels,
            },
            warn,
        ))
    }

    /// A record's password hash, rules and expired target, each checked as
    /// the API checks them (a hash must be Argon2id's PHC string).
    fn extra_of(&self, r: &Record) -> Result<Option<Arc<LinkRules>>, String> {
        let password = match &r.password_hash {
            None => None,
            Some(phc) => {
                crate::passwords::is_servers_own(phc).map_err(|e| format!("password_hash: {e}"))?;
                Some(
                    PasswordHash::from_stored(phc)
                        .ok_or("password_hash: not an Argon2id hash in PHC form")?,
                )
            }
        };
        let check = |u: &str| -> Result<TargetUrl, String> {
            let t = TargetUrl::parse(u).map_err(|e| e.to_string())?;
            self.targets.check(&t, None).map_err(|e| e.to_string())?;
            Ok(t)
        };
        let rules = match &r.rules {
            None => Vec::new(),
            Some(v) => {
                let rules::Rules(rules) =
                    crate::domain::wire::from_value("rules", v).map_err(|e| e.0)?;
                for (at, target) in rules::Rules::targets(&rules) {
                    self.targets
                        .check(target, None)
                        .map_err(|e| format!("{at}: {e}"))?;
                }
                rules
            }
        };
        let expired_url = match &r.expired_url {
            None => None,
            Some(u) => Some(check(u).map_err(|e| format!("expired_url: {e}"))?),
        };
        Ok(extra_of(LinkRules {
            password,
            rules,
            expired_url,
        }))
    }
}

/// Most entries of each list of one record's history: twenty years of
/// hours, and as many referrer and facet rows.
const HISTORY_ENTRIES: usize = 200_000;

/// The most visits one history entry (an hour, or a day's referrer or
/// value) may count, and the most a link may have: counts no link could
/// have are refused, so that sums of them stay far from overflowing.
const MAX_ENTRY: u64 = 1 << 32;
const MAX_TOTAL: u64 = (1 << 53) - 1;

/// The longest referrer host or facet value a history may hold.
const VALUE_BYTES: usize = 253;

/// Whether the counter could have kept `host` as a referrer: what it
/// makes of a `Referer` naming that host, or no host at all.
fn counted_referrer(host: &str) -> bool {
    if host == DIRECT_HOST || host == OTHER_HOST {
        return true;
    }
    let referer = format!("http://{host}/");
    host.len() <= VALUE_BYTES
        && host.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '[')
        && referrer_host(Some(referer.as_bytes())) == host
}

/// Whether the counter could have kept `value` in `dim`: a country code, a
/// known family, a rule's index; a city after its country, printable and
/// starting as a name does (never as a spreadsheet formula).
fn counted_value(dim: Dim, value: &str) -> bool {
    let country =
        |c: &str| c == Country::UNKNOWN_NAME || Country::parse(c.as_bytes()).as_str() == c;
    value == OTHER_HOST
        || match dim {
            Dim::Country => country(value),
            Dim::City => value.split_once('/').is_some_and(|(cc, city)| {
                cc != Country::UNKNOWN_NAME
                    && country(cc)
                    && city.len() <= VALUE_BYTES
                    && city.starts_with(|c: char| c.is_alphanumeric())
                    && !city
                        .chars()
                        .any(|c| c.is_control() || matches!(c, '<' | '>'))
            }),
            Dim::Device => value.parse::<Device>().is_ok(),
            Dim::Os => OS_FAMILIES.contains(&value),
            Dim::Browser => BROWSER_FAMILIES.contains(&value),
            Dim::Rule => {
                value == NO_RULE_VALUE
                    || value
                        .parse::<usize>()
                        .is_ok_and(|i| i < rules::MAX_RULES && i.to_string() == value)
            }
        }
}

/// Refuses a history that keeps more values on one day (of a dimension,
/// or referrer hosts) than the counter keeps before it counts the rest as
/// `(other)`.
fn over_a_days_values(counts: &VisitCounts) -> Result<(), String> {
    let mut hosts: HashMap<i64, usize> = HashMap::new();
    for (day, host, _) in &counts.referrers {
        let n = hosts.entry(*day).or_default();
        *n += usize::from(&**host != OTHER_HOST);
        if *n > REFERRER_HOSTS_PER_DAY {
            return Err(format!(
                "history: more than {REFERRER_HOSTS_PER_DAY} referrer hosts on one day"
            ));
        }
    }
    let mut values: HashMap<(i64, Dim), usize> = HashMap::new();
    for (day, dim, value, _) in &counts.dims {
        let n = values.entry((*day, *dim)).or_default();
        *n += usize::from(value != OTHER_HOST);
        if *n > VALUES_PER_DAY {
            return Err(format!(
                "history: more than {VALUES_PER_DAY} {} values on one day",
                <&str>::from(*dim)
            ));
        }
    }
    Ok(())
}

/// A record's history, checked: whole hours and days, known dimensions,
/// bounded sizes.
fn counts_of(h: &History) -> Result<VisitCounts, String> {
    if [h.hours.len(), h.referrers.len(), h.facets.len()]
        .iter()
        .any(|n| *n > HISTORY_ENTRIES)
    {
        return Err(format!(
            "history: more than {HISTORY_ENTRIES} entries in a list"
        ));
    }
    let units = |what: &str, s: &str, len: i64| {
        let t = Timestamp::parse(s).map_err(|e| format!("history {what}: {e}"))?;
        if t.millis().rem_euclid(len) != 0 {
            return Err(format!("history {what}: '{s}' does not start one"));
        }
        Ok(t.millis().div_euclid(len))
    };

    let count = |what: &str, n: u64| {
        if n > MAX_ENTRY {
            Err(format!(
                "history {what}: a count of {n} is over {MAX_ENTRY}, which no link could have"
            ))
        } else {
            Ok(n)
        }
    };
    let mut counts = VisitCounts::default();
    for (start, humans, bots, browsers) in &h.hours {
        count("hour", humans.saturating_add(*bots))?;
        count("hour", *browsers)?;
        counts.hours.push(HourCount {
            hour: units("hour", start, HOUR_MS)?,
            humans: *humans,
            bots: *bots,
            browsers: (*browsers).min(*humans),
        });
    }
    for (day, host, n) in &h.referrers {
        if !counted_referrer(host) {
            return Err(format!(
                "history referrer: '{}' is not a host the counter could have kept",
                host.escape_debug()
            ));
        }
        counts.referrers.push((
            units("day", day, DAY_MS)?,
            host.as_str().into(),
            count("referrer", *n)?,
        ));
    }
    for (day, dim, value, n) in &h.facets {
        let dim: Dim = dim
            .parse()
            .map_err(|_| format!("history: no dimension '{dim}'"))?;
        if !counted_value(dim, value) {
            return Err(format!(
                "history {}: '{}' is not a value the counter could have kept",
                <&str>::from(dim),
                value.escape_debug()
            ));
        }
        counts.dims.push((
            units("day", day, DAY_MS)?,
            dim,
            value.clone(),
            count("facet", *n)?,
        ));
    }
    over_a_days_values(&counts)?;
    if counts.total() > MAX_TOTAL {
        return Err(format!(
            "history: more than {MAX_TOTAL} visits, which no link could have"
        ));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(code: &str, url: Option<&str>) -> Record {
        Record {
            domain: None,
            code: Some(code.into()),
            url: url.map(Into::into),
            created_at: "2026-01-01T00:00:00Z".into(),
            expires_at: None,
            owner: Some("alice, \"the\" admin".into()),
            deleted_at: None,
            max_visits: Some(5),
            visits: Some(3),
            imported_visits: Some(9),
            history: None,
            password_hash: None,
            rules: None,
            expired_url: None,
            title: Some("Spring, \"sale\"".into()),
            tags: vec!["Sales".into(), "q3 launch".into()],
        }
    }

    #[test]
    fn both_formats_read_back_what_they_wrote() {
        let records = vec![
            record("abc123", Some("https://example.com/a,b")),
            Record {
                deleted_at: Some("2026-02-01T00:00:00Z".into()),
                ..record("gone12", None)
            },
            Record {
                domain: Some("ex.co".into()),
                ..record("abc123", Some("https://example.com/b"))
            },
        ];
        for format in [Format::Jsonl, Format::Csv] {
            let mut w = Writer::new(format, Vec::new()).expect("writer");
            for r in &records {
                w.write(r).expect("write");
            }
            let bytes = w.finish().expect("finish");
            let back: Vec<Record> = read(format, std::io::Cursor::new(bytes))
                .map(|(_, r)| r.expect("record"))
                .collect();
            assert_eq!(back, records, "{format}");
        }
    }

    #[test]
    fn records_are_checked_like_api_input() {
        let domains = [Domain {
            id: DomainId(4),
            host: Some(Host::parse("ex.co").unwrap()),
            redirects: Default::default(),
        }];
        let mut c = Checker::new(&[], &domains, TargetPolicy::default());
        assert!(
            c.check(1, record("abc123", Some("https://example.com")))
                .is_ok()
        );
        assert!(
            c.check(2, record("health", Some("https://example.com")))
                .is_err()
        );
        assert!(
            c.check(3, record("a b", Some("https://example.com")))
                .is_err()
        );
        assert!(
            c.check(4, record("abc124", Some("ftp://example.com")))
                .is_err()
        );
        assert!(c.check(5, record("abc125", None)).is_err());
        // The unknown owner is reported once, and the link kept ownerless.
        let (row, warn) = c
            .check(6, record("abc126", Some("https://e.com")))
            .expect("ok");
        assert!(row.owner.is_none() && warn.is_none(), "warned already");
        // A domain is found by its host in any form; an unknown one is
        // refused, and named for --create-domains.
        let on = |domain: &str| Record {
            domain: Some(domain.into()),
            ..record("abc127", Some("https://e.com"))
        };
        assert_eq!(
            c.check(7, on("EX.co")).expect("known").0.domain,
            DomainId(4)
        );
        assert_eq!(
            c.check(8, on("default")).expect("default").0.domain,
            DomainId(0)
        );
        assert!(c.check(9, on("new.example")).is_err());
        assert_eq!(
            c.new_domain(&on("new.example")),
            Ok(Some(Host::parse("new.example").unwrap()))
        );
        assert_eq!(c.new_domain(&on("ex.co")), Ok(None));
        assert!(c.check(10, on("not a host")).is_err());
    }
}
