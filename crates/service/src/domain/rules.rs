//! What a link may carry besides its target: a password (as an Argon2id
//! hash), targeted redirects (rules tried in order, each with conditions
//! and a target or a weighted split) and where it sends visitors once it
//! has expired. Parsed and checked once, here; stored as the same JSON the
//! API takes, so a stored rule reads back through the same parser.

use std::fmt;

use serde_json::{Map, Value, json};

use super::classify::Agent;
use super::visit::{Country, Device, OS_FAMILIES};
use super::{TargetUrl, Timestamp};

/// Most rules one link carries.
pub const MAX_RULES: usize = 16;
/// Most targets one split chooses among.
pub const MAX_SPLIT: usize = 16;
/// Most values one condition lists, and most names a query condition has.
pub const MAX_VALUES: usize = 32;
/// Largest weight of a split's target.
pub const MAX_WEIGHT: u64 = 1_000_000;
/// Longest password, in bytes.
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// An Argon2id hash in PHC form (`$argon2id$v=19$...`). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct PasswordHash(String);

impl PasswordHash {
    /// A stored hash, checked to be a PHC string of Argon2id.
    pub fn from_stored(phc: &str) -> Option<Self> {
        phc.starts_with("$argon2id$").then(|| Self(phc.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PasswordHash(..)")
    }
}

/// A device condition's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceIs {
    Ios,
    Android,
    /// Phones and tablets.
    Mobile,
    Desktop,
}

impl DeviceIs {
    const NAMES: [(&'static str, DeviceIs); 4] = [
        ("ios", DeviceIs::Ios),
        ("android", DeviceIs::Android),
        ("mobile", DeviceIs::Mobile),
        ("desktop", DeviceIs::Desktop),
    ];

    fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, d)| *d == self)
            .map_or("", |(n, _)| n)
    }

    /// Whether a visitor of `agent` is this device; a bot is none.
    pub fn holds(self, agent: &Agent) -> bool {
        if agent.class.is_bot() || agent.device == Device::Bot {
            return false;
        }
        let os = OS_FAMILIES
            .get(usize::from(agent.os))
            .copied()
            .unwrap_or("");
        match self {
            DeviceIs::Ios => os == "iOS",
            DeviceIs::Android => os == "Android",
            DeviceIs::Mobile => matches!(agent.device, Device::Mobile | Device::Tablet),
            DeviceIs::Desktop => agent.device == Device::Desktop,
        }
    }
}

/// A rule's conditions; each that is set must hold, and a condition
/// holds when any one of its values does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conditions {
    pub device: Vec<DeviceIs>,
    /// Primary language tags, in lower case.
    pub language: Vec<String>,
    pub country: Vec<Country>,
    /// Query parameters: a name, and the values it may have.
    pub query: Vec<(String, Vec<String>)>,
    pub after: Vec<Timestamp>,
    pub before: Vec<Timestamp>,
}

/// Where a rule sends a visitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    Url(TargetUrl),
    /// Targets with their weights, chosen at random per request.
    Split(Vec<(TargetUrl, u32)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub when: Conditions,
    pub then: Then,
}

/// A link's password, rules and expired target; `None` in a link that has
/// none of them, so a plain link carries one null pointer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkRules {
    pub password: Option<PasswordHash>,
    pub rules: Vec<Rule>,
    pub expired_url: Option<TargetUrl>,
}

impl LinkRules {
    pub fn is_empty(&self) -> bool {
        self.password.is_none() && self.rules.is_empty() && self.expired_url.is_none()
    }
}

/// Every URL the rules may send to (each rule's, each split's).
pub fn all_targets(rules: &[Rule]) -> Vec<&TargetUrl> {
    let mut out = Vec::new();
    for r in rules {
        match &r.then {
            Then::Url(u) => out.push(u),
            Then::Split(s) => out.extend(s.iter().map(|(u, _)| u)),
        }
    }
    out
}

/// What rules may ask of a visit: each is worked out only if a rule asks.
pub trait Facts {
    fn agent(&mut self) -> Agent;
    /// The primary tag of the most preferred language, in any case.
    fn language(&mut self) -> Option<&str>;
    fn country(&mut self) -> Country;
    /// The short URL's query string.
    fn query(&self) -> Option<&str>;
    fn now(&mut self) -> Timestamp;
}

/// A rule's result: the target chosen, and which rule chose it (`None`:
/// none held, the link's own URL).
impl Rule {
    fn holds(&self, facts: &mut dyn Facts) -> bool {
        let w = &self.when;
        if !w.device.is_empty() {
            let agent = facts.agent();
            if !w.device.iter().any(|d| d.holds(&agent)) {
                return false;
            }
        }
        if !w.language.is_empty() {
            let Some(lang) = facts.language() else {
                return false;
            };
            if !w.language.iter().any(|l| l.eq_ignore_ascii_case(lang)) {
                return false;
            }
        }
        if !w.country.is_empty() {
            let country = facts.country();
            if !country.is_known() || !w.country.contains(&country) {
                return false;
            }
        }
        if !w.query.is_empty() {
            let query = facts.query().unwrap_or("");
            for (name, values) in &w.query {
                let found = url::form_urlencoded::parse(query.as_bytes())
                    .any(|(n, v)| n == name.as_str() && values.iter().any(|x| *x == v));
                if !found {
                    return false;
                }
            }
        }
        if !w.after.is_empty() {
            let now = facts.now();
            if !w.after.iter().any(|t| now >= *t) {
                return false;
            }
        }
        if !w.before.is_empty() {
            let now = facts.now();
            if !w.before.iter().any(|t| now < *t) {
                return false;
            }
        }
        true
    }
}

/// The first rule that holds, and its target; `None` when none does.
pub fn choose<'r>(rules: &'r [Rule], facts: &mut dyn Facts) -> Option<(usize, &'r TargetUrl)> {
    let (index, rule) = rules.iter().enumerate().find(|(_, r)| r.holds(facts))?;
    let target = match &rule.then {
        Then::Url(u) => u,
        Then::Split(targets) => pick(targets, rand::random_range(0..split_total(targets))),
    };
    Some((index, target))
}

fn split_total(targets: &[(TargetUrl, u32)]) -> u64 {
    targets
        .iter()
        .map(|(_, w)| u64::from(*w))
        .sum::<u64>()
        .max(1)
}

/// The target whose share of the weights holds `draw` (0 <= draw < sum).
fn pick(targets: &[(TargetUrl, u32)], mut draw: u64) -> &TargetUrl {
    for (url, weight) in targets {
        let w = u64::from(*weight);
        if draw < w {
            return url;
        }
        draw -= w;
    }
    // Only reached with draw >= sum, which `choose` never passes.
    &targets[targets.len() - 1].0
}

/// The primary tag of the most preferred language in an `Accept-Language`
/// value, as sent (in any case): highest q-value, the first among equals;
/// `*`, `q=0` and malformed entries are skipped. One pass over the bytes:
/// splitting a `str` by `char` patterns cost several times as much.
pub fn preferred_language(header: &[u8]) -> Option<&str> {
    // Browsers put their first choice first, without a q-value: q=1 is
    // the highest there is, and the first among equals wins, so that item
    // is the answer and the rest need not be read.
    let first = header
        .iter()
        .position(|&b| b == b',' || b == b';')
        .map_or(header, |end| &header[..end]);
    if header.get(first.len()) != Some(&b';')
        && let Some(tag) = primary_tag(first)
    {
        return Some(tag);
    }
    let mut best: Option<(u32, &str)> = None;
    let mut rest = header;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        let (tag, params) = match item.iter().position(|&b| b == b';') {
            Some(semi) => (&item[..semi], &item[semi + 1..]),
            None => (item, &[][..]),
        };
        let Some(primary) = primary_tag(tag) else {
            continue;
        };
        let q = q_of(params);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, primary));
        }
    }
    best.map(|(_, tag)| tag)
}

/// The primary tag of a language range (`de` of `de-AT`): 1 to 8 ASCII
/// letters; `None` for `*` and anything malformed.
fn primary_tag(range: &[u8]) -> Option<&str> {
    let range = range.trim_ascii();
    let primary = &range[..range.iter().position(|&b| b == b'-').unwrap_or(range.len())];
    let valid = (1..=8).contains(&primary.len()) && primary.iter().all(u8::is_ascii_alphabetic);
    // ASCII letters, checked.
    valid.then(|| std::str::from_utf8(primary).ok()).flatten()
}

/// The q-value among an item's parameters, in thousandths (1000 without
/// one, 0 for a malformed one).
fn q_of(params: &[u8]) -> u32 {
    let mut q = 1000;
    for p in params.split(|&b| b == b';') {
        let p = p.trim_ascii();
        if let Some(v) = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q=")) {
            q = parse_q(v.trim_ascii()).unwrap_or(0);
        }
    }
    q
}

/// A q-value in thousandths: `0` to `1` with at most three decimals.
fn parse_q(v: &[u8]) -> Option<u32> {
    let (whole, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &[][..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let whole: u32 = match whole {
        b"0" => 0,
        b"1" => 1,
        _ => return None,
    };
    let mut thousandths = 0;
    for (i, b) in frac.iter().enumerate() {
        thousandths += u32::from(b - b'0') * [100, 10, 1][i];
    }
    let q = whole * 1000 + thousandths;
    (q <= 1000).then_some(q)
}

/// A rule that cannot be taken, with where it is wrong
/// (`rules[2].if.device`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {message}")]
pub struct RuleError {
    pub at: String,
    pub message: String,
}

fn err(at: impl Into<String>, message: impl Into<String>) -> RuleError {
    RuleError {
        at: at.into(),
        message: message.into(),
    }
}

/// One value or an array of them, each read by `one`; at least one and at
/// most [`MAX_VALUES`].
fn values<T>(
    at: &str,
    value: &Value,
    mut one: impl FnMut(&str, &Value) -> Result<T, RuleError>,
) -> Result<Vec<T>, RuleError> {
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(err(at, "must list at least one value"));
            }
            if items.len() > MAX_VALUES {
                return Err(err(at, format!("lists at most {MAX_VALUES} values")));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, v)| one(&format!("{at}[{i}]"), v))
                .collect()
        }
        v => Ok(vec![one(at, v)?]),
    }
}

fn string<'v>(at: &str, value: &'v Value) -> Result<&'v str, RuleError> {
    value.as_str().ok_or_else(|| err(at, "must be a string"))
}

/// Parses `rules` as the API takes them (and as they are stored), each
/// target checked by `check` (parsing, then the server's policy).
pub fn parse_rules(
    value: &Value,
    check: &dyn Fn(&str) -> Result<TargetUrl, String>,
) -> Result<Vec<Rule>, RuleError> {
    let items = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Array(items) => items,
        _ => return Err(err("rules", "must be an array of rules, or null")),
    };
    if items.len() > MAX_RULES {
        return Err(err(
            "rules",
            format!("a link has at most {MAX_RULES} rules, not {}", items.len()),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| parse_rule(&format!("rules[{i}]"), item, check))
        .collect()
}

fn parse_rule(
    at: &str,
    item: &Value,
    check: &dyn Fn(&str) -> Result<TargetUrl, String>,
) -> Result<Rule, RuleError> {
    let Value::Object(fields) = item else {
        return Err(err(at, "must be an object with 'if' and 'url' or 'split'"));
    };
    for name in fields.keys() {
        if !matches!(name.as_str(), "if" | "url" | "split") {
            return Err(err(
                format!("{at}.{name}"),
                "unknown field (known: if, url, split)",
            ));
        }
    }
    let when = match fields.get("if") {
        None | Some(Value::Null) => Conditions::default(),
        Some(Value::Object(c)) => parse_conditions(&format!("{at}.if"), c)?,
        Some(_) => return Err(err(format!("{at}.if"), "must be an object")),
    };
    let url = |at: &str, v: &Value| -> Result<TargetUrl, RuleError> {
        let s = string(at, v)?;
        check(s).map_err(|m| err(at, m))
    };
    let then = match (fields.get("url"), fields.get("split")) {
        (Some(u), None) => Then::Url(url(&format!("{at}.url"), u)?),
        (None, Some(Value::Array(targets))) => {
            let at = format!("{at}.split");
            if targets.is_empty() || targets.len() > MAX_SPLIT {
                return Err(err(at, format!("lists 1 to {MAX_SPLIT} targets")));
            }
            let mut out = Vec::with_capacity(targets.len());
            for (i, t) in targets.iter().enumerate() {
                let at = format!("{at}[{i}]");
                let Value::Object(t) = t else {
                    return Err(err(at, "must be an object with 'url' and 'weight'"));
                };
                if let Some(name) = t.keys().find(|k| !matches!(k.as_str(), "url" | "weight")) {
                    return Err(err(
                        format!("{at}.{name}"),
                        "unknown field (known: url, weight)",
                    ));
                }
                let u = url(&format!("{at}.url"), t.get("url").unwrap_or(&Value::Null))?;
                let weight = t
                    .get("weight")
                    .and_then(Value::as_u64)
                    .filter(|w| (1..=MAX_WEIGHT).contains(w))
                    .ok_or_else(|| {
                        err(
                            format!("{at}.weight"),
                            format!("must be a whole number from 1 to {MAX_WEIGHT}"),
                        )
                    })?;
                out.push((u, weight as u32));
            }
            Then::Split(out)
        }
        (None, Some(_)) => return Err(err(format!("{at}.split"), "must be an array")),
        (Some(_), Some(_)) => return Err(err(at, "has both 'url' and 'split'; give one")),
        (None, None) => return Err(err(format!("{at}.url"), "is required (or 'split')")),
    };
    Ok(Rule { when, then })
}

fn parse_conditions(at: &str, c: &Map<String, Value>) -> Result<Conditions, RuleError> {
    let mut when = Conditions::default();
    for (name, value) in c {
        let at = format!("{at}.{name}");
        match name.as_str() {
            "device" => {
                when.device = values(&at, value, |at, v| {
                    let s = string(at, v)?;
                    DeviceIs::NAMES
                        .iter()
                        .find(|(n, _)| *n == s)
                        .map(|(_, d)| *d)
                        .ok_or_else(|| {
                            err(
                                at,
                                format!("'{s}' is not one of ios, android, mobile, desktop"),
                            )
                        })
                })?
            }
            "language" => {
                when.language = values(&at, value, |at, v| {
                    let s = string(at, v)?;
                    let ok =
                        (1..=8).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphabetic());
                    if !ok {
                        return Err(err(
                            at,
                            format!("'{s}' is not a primary language tag such as 'de'"),
                        ));
                    }
                    Ok(s.to_ascii_lowercase())
                })?
            }
            "country" => {
                when.country = values(&at, value, |at, v| {
                    let s = string(at, v)?;
                    let c = Country::parse(s.as_bytes());
                    if !c.is_known() {
                        return Err(err(
                            at,
                            format!("'{s}' is not an ISO 3166 alpha-2 country code such as 'DE'"),
                        ));
                    }
                    Ok(c)
                })?
            }
            "query" => {
                let Value::Object(pairs) = value else {
                    return Err(err(at, "must be an object of names and values"));
                };
                if pairs.is_empty() || pairs.len() > MAX_VALUES {
                    return Err(err(at, format!("names 1 to {MAX_VALUES} parameters")));
                }
                for (qname, qvalue) in pairs {
                    let at = format!("{at}.{qname}");
                    if qname.is_empty() {
                        return Err(err(at, "a parameter's name must not be empty"));
                    }
                    let vs = values(&at, qvalue, |at, v| Ok(string(at, v)?.to_owned()))?;
                    when.query.push((qname.clone(), vs));
                }
            }
            "after" | "before" => {
                let times = values(&at, value, |at, v| {
                    Timestamp::parse(string(at, v)?).map_err(|e| err(at, e.to_string()))
                })?;
                if name == "after" {
                    when.after = times;
                } else {
                    when.before = times;
                }
            }
            _ => {
                return Err(err(
                    at,
                    "unknown condition (known: device, language, country, query, after, before)",
                ));
            }
        }
    }
    Ok(when)
}

/// One value as itself, several as an array.
fn one_or_many(mut items: Vec<Value>) -> Value {
    if items.len() == 1 {
        items.remove(0)
    } else {
        Value::Array(items)
    }
}

/// The rules as the API shows them and the store keeps them.
pub fn rules_json(rules: &[Rule]) -> Value {
    Value::Array(rules.iter().map(rule_json).collect())
}

fn rule_json(rule: &Rule) -> Value {
    let w = &rule.when;
    let mut when = Map::new();
    let strs = |v: Vec<String>| one_or_many(v.into_iter().map(Value::String).collect());
    if !w.device.is_empty() {
        when.insert(
            "device".into(),
            strs(w.device.iter().map(|d| d.name().to_owned()).collect()),
        );
    }
    if !w.language.is_empty() {
        when.insert("language".into(), strs(w.language.clone()));
    }
    if !w.country.is_empty() {
        when.insert(
            "country".into(),
            strs(w.country.iter().map(|c| c.as_str().to_owned()).collect()),
        );
    }
    if !w.query.is_empty() {
        let q: Map<String, Value> = w
            .query
            .iter()
            .map(|(n, vs)| (n.clone(), strs(vs.clone())))
            .collect();
        when.insert("query".into(), Value::Object(q));
    }
    if !w.after.is_empty() {
        when.insert(
            "after".into(),
            strs(w.after.iter().map(ToString::to_string).collect()),
        );
    }
    if !w.before.is_empty() {
        when.insert(
            "before".into(),
            strs(w.before.iter().map(ToString::to_string).collect()),
        );
    }
    let mut out = Map::new();
    out.insert("if".into(), Value::Object(when));
    match &rule.then {
        Then::Url(u) => {
            out.insert("url".into(), json!(u.as_str()));
        }
        Then::Split(targets) => {
            let split = targets
                .iter()
                .map(|(u, w)| json!({"url": u.as_str(), "weight": w}))
                .collect();
            out.insert("split".into(), Value::Array(split));
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AgentClass;

    fn check(s: &str) -> Result<TargetUrl, String> {
        TargetUrl::parse(s).map_err(|e| e.to_string())
    }

    struct Fixed {
        agent: Agent,
        language: Option<String>,
        country: Country,
        query: Option<String>,
        now: Timestamp,
    }

    impl Facts for Fixed {
        fn agent(&mut self) -> Agent {
            self.agent
        }
        fn language(&mut self) -> Option<&str> {
            self.language.as_deref()
        }
        fn country(&mut self) -> Country {
            self.country
        }
        fn query(&self) -> Option<&str> {
            self.query.as_deref()
        }
        fn now(&mut self) -> Timestamp {
            self.now
        }
    }

    fn visitor() -> Fixed {
        Fixed {
            agent: Agent::NONE,
            language: None,
            country: Country::UNKNOWN,
            query: None,
            now: Timestamp::parse("2027-01-01T00:00:00Z").expect("time"),
        }
    }

    #[test]
    fn the_most_preferred_language_wins_by_q_value_then_order() {
        let cases = [
            ("fr;q=0.5, de-AT;q=0.9", Some("de")),
            ("de-DE,de;q=0.9,en;q=0.8", Some("de")),
            ("en, fr", Some("en")),
            ("fr;q=0.8, en;q=0.8", Some("fr")),
            ("*, fr;q=0.5", Some("fr")),
            ("de;q=0, en;q=0.1", Some("en")),
            ("EN-gb", Some("EN")),
            ("", None),
            ("*", None),
            ("de;q=2", None),
            ("zh-Hant-TW;q=1.000", Some("zh")),
            ("de-DE", Some("de")),
            (" it , de;q=0.9", Some("it")),
            ("*;q=0.5, fr;q=0.4", Some("fr")),
            ("12, fr;q=0.4", Some("fr")),
        ];
        for (header, want) in cases {
            assert_eq!(preferred_language(header.as_bytes()), want, "{header}");
        }
    }

    #[test]
    fn rules_round_trip_through_their_json() {
        let raw = json!([
            {"if": {"device": ["ios", "android"], "language": "DE", "country": "de",
                    "query": {"utm": ["a", "b"]}, "after": "2027-01-01T00:00:00Z"},
             "url": "https://example.com/a"},
            {"split": [{"url": "https://example.com/b", "weight": 70},
                       {"url": "https://example.com/c", "weight": 30}]}
        ]);
        let rules = parse_rules(&raw, &check).expect("valid");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].when.language, ["de"]);
        let again = parse_rules(&rules_json(&rules), &check).expect("its own JSON parses");
        assert_eq!(again, rules);
    }

    #[test]
    fn each_error_names_the_rule_and_its_field() {
        let cases = [
            (
                json!([{"url": "https://a.example/"}, {"if": {"device": "watch"}, "url": "https://a.example/"}]),
                "rules[1].if.device",
            ),
            (
                json!([{"if": {"country": ["DE", "1x"]}, "url": "https://a.example/"}]),
                "rules[0].if.country[1]",
            ),
            (json!([{"url": "ftp://a.example/"}]), "rules[0].url"),
            (
                json!([{"split": [{"url": "https://a.example/", "weight": 0}]}]),
                "rules[0].split[0].weight",
            ),
            (
                json!([{"if": {"colour": "red"}, "url": "https://a.example/"}]),
                "rules[0].if.colour",
            ),
            (
                json!([{"if": {"after": "soon"}, "url": "https://a.example/"}]),
                "rules[0].if.after",
            ),
            (json!([{"if": {}}]), "rules[0].url"),
            (
                json!([{"url": "https://a.example/", "split": []}]),
                "rules[0]",
            ),
            (json!("x"), "rules"),
        ];
        for (raw, at) in cases {
            let e = parse_rules(&raw, &check).expect_err("invalid");
            assert_eq!(e.at, at, "{raw}: {e}");
        }
        let many = Value::Array(vec![json!({"url": "https://a.example/"}); MAX_RULES + 1]);
        assert_eq!(
            parse_rules(&many, &check).expect_err("too many").at,
            "rules"
        );
    }

    #[test]
    fn conditions_hold_only_together() {
        let rules = parse_rules(
            &json!([
                {"if": {"language": "de", "query": {"src": "mail"}}, "url": "https://a.example/de-mail"},
                {"if": {"country": "JP"}, "url": "https://a.example/jp"},
                {"if": {"before": "2026-01-01T00:00:00Z"}, "url": "https://a.example/old"},
                {"if": {"device": "desktop"}, "url": "https://a.example/desktop"}
            ]),
            &check,
        )
        .expect("valid");
        let mut v = visitor();
        assert_eq!(choose(&rules, &mut v), None);
        v.language = Some("de".into());
        assert_eq!(choose(&rules, &mut v), None);
        v.query = Some("x=1&src=mail".into());
        assert_eq!(choose(&rules, &mut v).map(|c| c.0), Some(0));
        let mut v = visitor();
        v.country = Country::parse(b"jp");
        assert_eq!(choose(&rules, &mut v).map(|c| c.0), Some(1));
        let mut v = visitor();
        v.agent = Agent {
            class: AgentClass::Browser,
            device: Device::Desktop,
            os: 2,
            browser: 2,
        };
        assert_eq!(choose(&rules, &mut v).map(|c| c.0), Some(3));
        v.agent.class = AgentClass::Bot;
        assert_eq!(choose(&rules, &mut v), None);
    }

    #[test]
    fn a_split_draws_each_target_by_its_weight() {
        let (a, b) = (
            check("https://a.example/").unwrap(),
            check("https://b.example/").unwrap(),
        );
        let targets = vec![(a.clone(), 70), (b.clone(), 30)];
        assert_eq!(pick(&targets, 0), &a);
        assert_eq!(pick(&targets, 69), &a);
        assert_eq!(pick(&targets, 70), &b);
        assert_eq!(pick(&targets, 99), &b);
        assert_eq!(split_total(&targets), 100);
    }
}
