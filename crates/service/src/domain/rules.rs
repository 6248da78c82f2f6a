//! What a link may carry besides its target: a password (as an Argon2id
//! hash), targeted redirects (rules tried in order, each with conditions
//! and a target or a weighted split) and where it sends visitors once it
//! has expired. Parsed and checked once, here; stored as the same JSON the
//! API takes, so a stored rule reads back through the same parser.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::classify::Agent;
use super::visit::{Country, Device, OS_FAMILIES};
use super::wire::{FromText, MAX_VALUES, Object, one_or_many, optional_object, optional_objects};
use super::{TargetUrl, Timestamp};

/// Most rules one link carries.
pub(crate) const MAX_RULES: usize = 16;
/// Most targets one split chooses among.
pub(crate) const MAX_SPLIT: usize = 16;
/// Largest weight of a split's target.
pub(crate) const MAX_WEIGHT: u64 = 1_000_000;
/// Longest password, in bytes.
pub(crate) const MAX_PASSWORD_BYTES: usize = 1024;

/// An Argon2id hash in PHC form (`$argon2id$v=19$...`). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct PasswordHash(String);

impl PasswordHash {
    /// A stored hash, checked to be a PHC string of Argon2id.
    pub(crate) fn from_stored(phc: &str) -> Option<Self> {
        phc.starts_with("$argon2id$").then(|| Self(phc.to_owned()))
    }

    pub(crate) fn as_str(&self) -> &str {
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
    pub(crate) fn holds(self, agent: &Agent) -> bool {
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

/// Where a rule sends a visitor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Then {
    Url(TargetUrl),
    /// Targets with their weights, chosen at random per request.
    Split(Vec<(TargetUrl, u32)>),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Object<RuleSpec>", into = "RuleSpec")]
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
    pub(crate) fn is_empty(&self) -> bool {
        self.password.is_none() && self.rules.is_empty() && self.expired_url.is_none()
    }
}

/// What rules may ask of a visit: each is worked out only if a rule asks.
pub(crate) trait Facts {
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
            if !w.language.iter().any(|l| l.0.eq_ignore_ascii_case(lang)) {
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
            for (name, values) in &w.query.0 {
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
pub(crate) fn choose<'r>(
    rules: &'r [Rule],
    facts: &mut dyn Facts,
) -> Option<(usize, &'r TargetUrl)> {
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
/// `q=0` and malformed entries are skipped, and `*` (any language) names
/// none when it is the most preferred. One pass over the bytes: splitting
/// a `str` by `char` patterns cost several times as much.
pub(crate) fn preferred_language(header: &[u8]) -> Option<&str> {
    // Browsers put their first choice first, without a q-value: q=1 is
    // the highest there is, and the first among equals wins, so that item
    // is the answer and the rest need not be read.
    let first = header
        .iter()
        .position(|&b| b == b',' || b == b';')
        .map_or(header, |end| &header[..end]);
    if header.get(first.len()) != Some(&b';') {
        if first.trim_ascii() == b"*" {
            return None;
        }
        if let Some(tag) = primary_tag(first) {
            return Some(tag);
        }
    }
    // The best so far, and its tag (`None`: `*`).
    let mut best: Option<(u32, Option<&str>)> = None;
    let mut rest = header;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
        let item = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        let (tag, params) = match item.iter().position(|&b| b == b';') {
            Some(semi) => (&item[..semi], &item[semi + 1..]),
            None => (item, &[][..]),
        };
        let primary = match primary_tag(tag) {
            Some(primary) => Some(primary),
            None if tag.trim_ascii() == b"*" => None,
            None => continue,
        };
        let q = q_of(params);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, primary));
        }
    }
    best.and_then(|(_, tag)| tag)
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

/// A link's password in clear, as its owner sets it or a visitor types
/// it: 1 to [`MAX_PASSWORD_BYTES`] bytes. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Password(String);

impl Password {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(..)")
    }
}

impl FromText for Password {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        if text.is_empty() || text.len() > MAX_PASSWORD_BYTES {
            return Err(format!("must be 1 to {MAX_PASSWORD_BYTES} bytes"));
        }
        Ok(Self(text.to_owned()))
    }
}

super::wire::deserialize_from_text!(Password);

super::wire::string_schema!(
    Password,
    "Password",
    super::wire::StringSchema {
        format: Some("password"),
        min_length: Some(1),
        max_length: Some(MAX_PASSWORD_BYTES),
        pattern: None,
        description: "A password visitors must give; stored only as an Argon2id hash",
    }
);

impl FromText for DeviceIs {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == text)
            .map(|(_, d)| *d)
            .ok_or_else(|| format!("'{text}' is not one of ios, android, mobile, desktop"))
    }
}

impl fmt::Display for DeviceIs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A language condition's value: a primary tag (`de`), in lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Language(String);

impl Language {
    #[cfg(test)]
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromText for Language {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        // A primary subtag is 2 to 8 letters; a single letter (`x`, `i`)
        // starts a private or grandfathered tag, which names no language.
        let ok = (2..=8).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_alphabetic());
        if !ok {
            return Err(format!(
                "'{text}' is not a primary language tag such as 'de'"
            ));
        }
        Ok(Self(text.to_ascii_lowercase()))
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromText for Country {
    const EXPECTING: &'static str = "a string";

    fn from_text(text: &str) -> Result<Self, String> {
        let c = Country::parse(text.as_bytes());
        if !c.is_known() || c.is_user_assigned() {
            return Err(format!(
                "'{text}' is not an ISO 3166 alpha-2 country code such as 'DE'"
            ));
        }
        Ok(c)
    }
}

impl fmt::Display for Country {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A query condition: names of the short URL's query parameters, each
/// with the values it may have; 1 to [`MAX_VALUES`] names, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryIs(pub Vec<(String, Vec<String>)>);

impl QueryIs {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for QueryIs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = QueryIs;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of names and values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<QueryIs, A::Error> {
                let mut pairs: Vec<(String, Vec<String>)> = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    if name.is_empty() {
                        return Err(de::Error::custom("a parameter's name must not be empty"));
                    }
                    if pairs.iter().any(|(n, _)| *n == name) {
                        return Err(de::Error::custom(format!("'{name}' is given twice")));
                    }
                    if pairs.len() == MAX_VALUES {
                        return Err(de::Error::custom(format!(
                            "names 1 to {MAX_VALUES} parameters"
                        )));
                    }
                    let Values(values) = map.next_value()?;
                    pairs.push((name, values));
                }
                if pairs.is_empty() {
                    return Err(de::Error::custom(format!(
                        "names 1 to {MAX_VALUES} parameters"
                    )));
                }
                Ok(QueryIs(pairs))
            }
        }
        d.deserialize_map(Pairs)
    }
}

/// One value or an array of them, as a type.
struct Values(Vec<String>);

impl<'de> Deserialize<'de> for Values {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_or_many::deserialize(d).map(Values)
    }
}

impl Serialize for QueryIs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Many<'a>(&'a [String]);
        impl Serialize for Many<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                one_or_many::serialize(self.0, s)
            }
        }
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (name, values) in &self.0 {
            map.serialize_entry(name, &Many(values))?;
        }
        map.end()
    }
}

/// The conditions of a rule as the API takes them: each is one value or
/// an array of them (any may match), and every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Conditions)]
pub struct Conditions {
    /// `ios`, `android`, `mobile` (phones and tablets) or `desktop`; a bot
    /// is none of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    #[schema(schema_with = one_or_many::schema)]
    pub device: Vec<DeviceIs>,
    /// Primary language tags such as `de`, against the most preferred in
    /// `Accept-Language`.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    #[schema(schema_with = one_or_many::schema)]
    pub language: Vec<Language>,
    /// ISO 3166 alpha-2 codes, against the visitor's country.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    #[schema(schema_with = one_or_many::schema)]
    pub country: Vec<Country>,
    /// `{"name": "value"}` (or several values) against the short URL's
    /// query: every name must have one of its values.
    #[serde(default, skip_serializing_if = "QueryIs::is_empty")]
    #[schema(value_type = Object)]
    pub query: QueryIs,
    /// From this time on (RFC 3339).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    #[schema(schema_with = one_or_many::schema)]
    pub after: Vec<Timestamp>,
    /// Before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    #[schema(schema_with = one_or_many::schema)]
    pub before: Vec<Timestamp>,
}

/// One target of a split, chosen with the chance weight / sum of weights.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SplitTarget {
    pub url: TargetUrl,
    #[serde(deserialize_with = "weight")]
    #[schema(minimum = 1, maximum = 1000000)]
    pub weight: u32,
}

fn weight<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let w = u64::deserialize(d)
        .map_err(|_| de::Error::custom(format!("must be a whole number from 1 to {MAX_WEIGHT}")))?;
    if !(1..=MAX_WEIGHT).contains(&w) {
        return Err(de::Error::custom(format!(
            "must be a whole number from 1 to {MAX_WEIGHT}, not {w}"
        )));
    }
    Ok(w as u32)
}

/// A targeted redirect as the API takes and shows it, and as a store
/// keeps it: when every condition in `if` holds, `url`, or one of
/// `split`'s targets drawn by weight. An invalid rule is a 400 naming its
/// index and field (`rules[2].if.device`).
#[derive(Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Rule)]
pub(crate) struct RuleSpec {
    #[serde(rename = "if", default, deserialize_with = "optional_object")]
    when: Option<Conditions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<TargetUrl>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "optional_objects"
    )]
    #[schema(min_items = 1, max_items = 16)]
    split: Option<Vec<SplitTarget>>,
}

impl TryFrom<Object<RuleSpec>> for Rule {
    type Error = String;

    fn try_from(Object(spec): Object<RuleSpec>) -> Result<Self, String> {
        if let Some(when) = &spec.when
            && let (Some(after), Some(before)) = (when.after.iter().min(), when.before.iter().max())
            && after >= before
        {
            return Err(format!(
                "'if.after' ({after}) is not before 'if.before' ({before}): the rule can never hold"
            ));
        }
        let then = match (spec.url, spec.split) {
            (Some(url), None) => Then::Url(url),
            (None, Some(split)) => {
                if split.is_empty() || split.len() > MAX_SPLIT {
                    return Err(format!("'split' lists 1 to {MAX_SPLIT} targets"));
                }
                Then::Split(split.into_iter().map(|t| (t.url, t.weight)).collect())
            }
            (Some(_), Some(_)) => return Err("has both 'url' and 'split'; give one".into()),
            (None, None) => return Err("'url' is required (or 'split')".into()),
        };
        Ok(Rule {
            when: spec.when.unwrap_or_default(),
            then,
        })
    }
}

impl From<Rule> for RuleSpec {
    fn from(rule: Rule) -> Self {
        let (url, split) = match rule.then {
            Then::Url(u) => (Some(u), None),
            Then::Split(targets) => (
                None,
                Some(
                    targets
                        .into_iter()
                        .map(|(url, weight)| SplitTarget { url, weight })
                        .collect(),
                ),
            ),
        };
        Self {
            when: Some(rule.when),
            url,
            split,
        }
    }
}

/// A link's rules: at most [`MAX_RULES`], tried in order; `null` or `[]`
/// is none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Rules(pub Vec<Rule>);

impl<'de> Deserialize<'de> for Rules {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct List;
        impl<'de> Visitor<'de> for List {
            type Value = Rules;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of rules, or null")
            }

            fn visit_unit<E: de::Error>(self) -> Result<Rules, E> {
                Ok(Rules::default())
            }

            fn visit_none<E: de::Error>(self) -> Result<Rules, E> {
                Ok(Rules::default())
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Rules, A::Error> {
                let mut rules = Vec::new();
                while let Some(rule) = seq.next_element::<Rule>()? {
                    if rules.len() == MAX_RULES {
                        return Err(de::Error::custom(format!(
                            "a link has at most {MAX_RULES} rules"
                        )));
                    }
                    rules.push(rule);
                }
                Ok(Rules(rules))
            }
        }
        d.deserialize_any(List)
    }
}

impl Rules {
    /// The rules as a store keeps them: their JSON, or `None` for none.
    pub(crate) fn column(rules: &[Rule]) -> Option<String> {
        (!rules.is_empty())
            .then(|| serde_json::to_string(rules).ok())
            .flatten()
    }

    /// Rules a store kept (as [`Rules::column`] wrote them).
    pub(crate) fn from_column(json: &str) -> Result<Vec<Rule>, String> {
        serde_json::from_str::<Rules>(json)
            .map(|r| r.0)
            .map_err(|e| e.to_string())
    }

    /// Every target with where it stands (`rules[1].split[0].url`), for
    /// the checks that depend on the server's state.
    pub(crate) fn targets(rules: &[Rule]) -> impl Iterator<Item = (String, &TargetUrl)> {
        rules.iter().enumerate().flat_map(|(i, r)| {
            let targets: Vec<(String, &TargetUrl)> = match &r.then {
                Then::Url(u) => vec![(format!("rules[{i}].url"), u)],
                Then::Split(s) => s
                    .iter()
                    .enumerate()
                    .map(|(j, (u, _))| (format!("rules[{i}].split[{j}].url"), u))
                    .collect(),
            };
            targets
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::AgentClass;

    use serde_json::{Value, json};

    fn check(s: &str) -> Result<TargetUrl, String> {
        TargetUrl::parse(s).map_err(|e| e.to_string())
    }

    #[derive(Debug, Deserialize)]
    struct Body {
        rules: Rules,
    }

    /// The rules of `raw`, or the message naming what is wrong.
    fn parse_rules(raw: &Value) -> Result<Vec<Rule>, String> {
        let body = json!({ "rules": raw }).to_string();
        super::super::wire::from_json::<Body>(body.as_bytes())
            .map(|b| b.rules.0)
            .map_err(|e| e.0)
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
            ("*, fr;q=0.5", None),
            ("fr;q=0.5, *;q=0.9", None),
            ("de;q=0.9, *;q=0.5", Some("de")),
            ("de;q=0, en;q=0.1", Some("en")),
            ("EN-gb", Some("EN")),
            ("", None),
            ("*", None),
            ("de;q=2", None),
            ("zh-Hant-TW;q=1.000", Some("zh")),
            ("de-DE", Some("de")),
            (" it , de;q=0.9", Some("it")),
            ("*;q=0.5, fr;q=0.4", None),
            ("*;q=0, fr;q=0.4", Some("fr")),
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
        let rules = parse_rules(&raw).expect("valid");
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].when.language[0].as_str(), "de");
        let column = Rules::column(&rules).expect("some rules");
        let again = Rules::from_column(&column).expect("its own JSON parses");
        assert_eq!(again, rules);
        assert_eq!(
            Rules::from_column(&Rules::column(&again).expect("some")).expect("parses"),
            rules
        );
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
            (json!([{"if": {}}]), "rules[0]: 'url' is required"),
            (
                json!([{"url": "https://a.example/", "split": []}]),
                "rules[0]",
            ),
            (
                json!([{"if": {"query": {}}, "url": "https://a.example/"}]),
                "rules[0].if.query",
            ),
            (json!("x"), "rules"),
            // Objects, never arrays read by position.
            (
                json!([{"if": [], "url": "https://a.example/"}]),
                "rules[0].if",
            ),
            (
                json!([{"split": [["https://a.example/", 1]]}]),
                "rules[0].split[0]",
            ),
            (json!([[null, "https://a.example/"]]), "rules[0]"),
            // Rules that can never hold.
            (
                json!([{"if": {"country": "XX"}, "url": "https://a.example/"}]),
                "rules[0].if.country",
            ),
            (
                json!([{"if": {"language": "x"}, "url": "https://a.example/"}]),
                "rules[0].if.language",
            ),
            (
                json!([{"if": {"after": "2030-01-01T00:00:00Z", "before": "2029-01-01T00:00:00Z"},
                        "url": "https://a.example/"}]),
                "rules[0]: 'if.after'",
            ),
        ];
        for (raw, at) in cases {
            let e = parse_rules(&raw).expect_err("invalid");
            assert!(e.starts_with(at), "{raw}: {e}");
        }
        let many = Value::Array(vec![json!({"url": "https://a.example/"}); MAX_RULES + 1]);
        let e = parse_rules(&many).expect_err("too many");
        assert!(e.contains("at most 16"), "{e}");
        // A key given twice inside a rule is refused as at the top level.
        for twice in [
            r#"{"rules": [{"if": {"device": "ios", "device": "android"}, "url": "https://a.example/"}]}"#,
            r#"{"rules": [{"url": "https://a.example/", "url": "https://b.example/"}]}"#,
            r#"{"rules": [{"if": {"query": {"a": "1", "a": "2"}}, "url": "https://a.example/"}]}"#,
        ] {
            let e = super::super::wire::from_json::<Body>(twice.as_bytes()).expect_err("twice");
            assert!(e.0.contains("given twice"), "{twice}: {e}");
        }
    }

    #[test]
    fn conditions_hold_only_together() {
        let rules = parse_rules(&json!([
                {"if": {"language": "de", "query": {"src": "mail"}}, "url": "https://a.example/de-mail"},
                {"if": {"country": "JP"}, "url": "https://a.example/jp"},
                {"if": {"before": "2026-01-01T00:00:00Z"}, "url": "https://a.example/old"},
                {"if": {"device": "desktop"}, "url": "https://a.example/desktop"}
        ]))
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
