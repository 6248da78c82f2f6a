//! Shlink: the web client's CSV export (`createdAt, domain, shortCode,
//! shortUrl, longUrl, title, tags, visits`, tags joined by `|`), and the
//! short URLs, visits and redirect rules of its REST API v3 (read in
//! [`super::api`], turned into records here).

use std::io::BufRead;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::replay::{Logged, LoggedVisit};
use super::{Found, Item, Items, Replay, dates::rfc3339};
use crate::domain::Timestamp;

const CSV_COLUMNS: [&str; 8] = [
    "createdAt",
    "domain",
    "shortCode",
    "shortUrl",
    "longUrl",
    "title",
    "tags",
    "visits",
];

pub(super) fn read_csv<R: BufRead + Send + 'static>(input: R) -> Items {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(input);
    let at: Result<Vec<usize>, String> = match reader.headers() {
        Ok(h) => CSV_COLUMNS
            .iter()
            .map(|c| {
                h.iter()
                    .position(|x| x.trim() == *c)
                    .ok_or_else(|| format!("no '{c}' column: not Shlink's CSV export"))
            })
            .collect(),
        Err(e) => Err(e.to_string()),
    };
    let at = match at {
        Ok(at) => at,
        Err(why) => return Box::new(std::iter::once((1, Item::Invalid(why)))),
    };
    Box::new(reader.into_records().map(move |row| {
        let line = crate::transfer::csv_line(&row);
        let item = row.map_err(|e| e.to_string()).and_then(|r| {
            let cell = |i: usize| r.get(at[i]).unwrap_or("").trim();
            let visits = match cell(7) {
                "" => 0,
                n => n
                    .parse::<u64>()
                    .map_err(|_| format!("visits: '{n}' is not a count"))?,
            };
            Ok(Found {
                domain: Some(cell(1).to_owned()).filter(|d| !d.is_empty()),
                code: cell(2).to_owned(),
                url: cell(4).to_owned(),
                created_at: rfc3339(cell(0)).map_err(|e| format!("createdAt: {e}"))?,
                title: Some(cell(5).to_owned()),
                tags: cell(6).split('|').map(|t| t.trim().to_owned()).collect(),
                total: visits,
                ..Found::default()
            })
        });
        let item = match item {
            Ok(f) => Item::Link(Box::new(f.record())),
            Err(why) => Item::Invalid(why),
        };
        (line, item)
    }))
}

/// A short URL of `GET /rest/v3/short-urls`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShortUrl {
    pub short_code: String,
    pub long_url: String,
    pub date_created: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub meta: Meta,
    #[serde(default)]
    pub visits_summary: Option<VisitsSummary>,
    /// Before Shlink 3.
    #[serde(default)]
    pub visits_count: Option<u64>,
    #[serde(default)]
    pub has_redirect_rules: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Meta {
    pub valid_since: Option<String>,
    pub valid_until: Option<String>,
    pub max_visits: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct VisitsSummary {
    pub total: u64,
}

/// A visit of `GET /rest/v3/short-urls/{shortCode}/visits`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Visit {
    #[serde(default)]
    pub referer: Option<String>,
    pub date: String,
    #[serde(default)]
    pub user_agent: Option<String>,
    #[serde(default)]
    pub visit_location: Option<Location>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Location {
    #[serde(default)]
    pub country_code: Option<String>,
}

impl ShortUrl {
    pub(super) fn total(&self) -> u64 {
        self.visits_summary
            .as_ref()
            .map(|s| s.total)
            .or(self.visits_count)
            .unwrap_or(0)
    }

    /// The link as a record, with its visits replayed and its rules (the
    /// answer of its redirect-rules endpoint) turned into litelink's; a
    /// skip when it cannot be carried whole.
    pub(super) fn item(
        self,
        visits: &[Visit],
        rules: Option<&Value>,
        drop_unsupported: bool,
        replay: &mut Replay,
    ) -> Item {
        let name = self.short_code.clone();
        if let Some(since) = &self.meta.valid_since {
            match rfc3339(since).and_then(|s| Timestamp::parse(&s).map_err(|e| e.to_string())) {
                Ok(t) if t.millis() > Timestamp::now().millis() => {
                    return Item::Skip(format!(
                        "'{name}' is valid only from {since}, which litelink cannot say"
                    ));
                }
                Ok(_) => {}
                Err(e) => return Item::Invalid(format!("meta.validSince: {e}")),
            }
        }
        let rules = match rules.map(|r| convert_rules(r, drop_unsupported)) {
            None => None,
            Some(Ok((rules, dropped))) => {
                for why in dropped {
                    tracing::warn!("'{name}': {why}; imported without that rule");
                }
                rules
            }
            Some(Err(why)) => {
                return Item::Skip(format!(
                    "'{name}': {why} (import with --drop-unsupported-rules to leave such rules out)"
                ));
            }
        };
        let mut logged = Logged::default();
        for v in visits {
            let Ok(at) =
                rfc3339(&v.date).and_then(|s| Timestamp::parse(&s).map_err(|e| e.to_string()))
            else {
                return Item::Invalid(format!(
                    "'{name}': a visit's date '{}' is not a time",
                    v.date
                ));
            };
            replay.add(
                &mut logged,
                LoggedVisit {
                    at,
                    referrer: v.referer.as_deref(),
                    user_agent: v.user_agent.as_deref(),
                    country: v
                        .visit_location
                        .as_ref()
                        .and_then(|l| l.country_code.as_deref()),
                },
            );
        }
        let total = self.total();
        let found = (|| -> Result<Found, String> {
            Ok(Found {
                domain: self.domain,
                code: self.short_code,
                url: self.long_url,
                created_at: rfc3339(&self.date_created).map_err(|e| format!("dateCreated: {e}"))?,
                expires_at: self
                    .meta
                    .valid_until
                    .as_deref()
                    .map(rfc3339)
                    .transpose()
                    .map_err(|e| format!("meta.validUntil: {e}"))?,
                max_visits: self.meta.max_visits.filter(|n| *n > 0),
                title: self.title,
                tags: self.tags,
                total,
                logged: Some(logged).filter(|l| l.visits > 0),
                rules,
            })
        })();
        match found {
            Ok(f) => Item::Link(Box::new(f.record())),
            Err(why) => Item::Invalid(why),
        }
    }
}

/// Shlink's redirect rules (`{"redirectRules": [{longUrl, priority,
/// conditions: [{type, matchKey, matchValue}]}]}`) as litelink's rules,
/// in priority order; with the rules left out (when `drop_unsupported`)
/// and why. `Err` names the first condition litelink cannot express.
pub(super) fn convert_rules(
    answer: &Value,
    drop_unsupported: bool,
) -> Result<(Option<Value>, Vec<String>), String> {
    let mut rules: Vec<&Value> = answer
        .get("redirectRules")
        .and_then(Value::as_array)
        .map(|r| r.iter().collect())
        .unwrap_or_default();
    rules.sort_by_key(|r| {
        r.get("priority")
            .and_then(Value::as_i64)
            .unwrap_or(i64::MAX)
    });
    let mut out = Vec::new();
    let mut dropped = Vec::new();
    for (i, rule) in rules.into_iter().enumerate() {
        match convert_rule(rule) {
            Ok(r) => out.push(r),
            Err(why) if drop_unsupported => dropped.push(format!("rule {}: {why}", i + 1)),
            Err(why) => return Err(format!("rule {}: {why}", i + 1)),
        }
    }
    Ok(((!out.is_empty()).then_some(Value::Array(out)), dropped))
}

fn convert_rule(rule: &Value) -> Result<Value, String> {
    let url = rule
        .get("longUrl")
        .and_then(Value::as_str)
        .ok_or("no longUrl")?;
    let mut when = Map::new();
    let mut query = Map::new();
    let conditions = rule
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    // Shlink's conditions of one rule must all hold; litelink's values of
    // one condition are alternatives, so a kind may appear once.
    let mut once = |key: &str, value: Value| -> Result<(), String> {
        if when.insert(key.to_owned(), value).is_some() {
            return Err(format!("two '{key}' conditions, which must both hold"));
        }
        Ok(())
    };
    for c in &conditions {
        let kind = c.get("type").and_then(Value::as_str).unwrap_or("");
        let value = c.get("matchValue").and_then(Value::as_str).unwrap_or("");
        match kind {
            "device" if matches!(value, "android" | "ios" | "mobile" | "desktop") => {
                once("device", json!(value))?;
            }
            "language" if !value.contains(['-', '_']) && !value.is_empty() => {
                once("language", json!(value.to_ascii_lowercase()))?;
            }
            "geolocation-country-code" => once("country", json!(value.to_ascii_uppercase()))?,
            "after-date" => once("after", json!(rfc3339(value)?))?,
            "before-date" => once("before", json!(rfc3339(value)?))?,
            "query-param" => {
                let key = c.get("matchKey").and_then(Value::as_str).unwrap_or("");
                if query.insert(key.to_owned(), json!(value)).is_some() {
                    return Err(format!("two conditions on the query parameter '{key}'"));
                }
            }
            other => {
                return Err(format!(
                    "litelink has no condition like Shlink's '{other}' = '{value}'"
                ));
            }
        }
    }
    if !query.is_empty() {
        when.insert("query".into(), Value::Object(query));
    }
    Ok(json!({ "if": when, "url": url }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_convert_in_priority_order_or_name_what_cannot() {
        let answer = json!({"defaultLongUrl": "https://example.com", "redirectRules": [
            {"longUrl": "https://example.com/fr", "priority": 2,
             "conditions": [{"type": "language", "matchValue": "fr", "matchKey": null}]},
            {"longUrl": "https://example.com/a", "priority": 1, "conditions": [
                {"type": "device", "matchValue": "android", "matchKey": null},
                {"type": "query-param", "matchKey": "foo", "matchValue": "bar"}]},
            {"longUrl": "https://example.com/us", "priority": 3, "conditions": [
                {"type": "language", "matchValue": "en-US", "matchKey": null}]}
        ]});
        let err = convert_rules(&answer, false).expect_err("en-US has a region");
        assert!(err.contains("rule 3") && err.contains("en-US"), "{err}");
        let (rules, dropped) = convert_rules(&answer, true).expect("dropped");
        assert_eq!(dropped.len(), 1);
        assert_eq!(
            rules,
            Some(json!([
                {"if": {"device": "android", "query": {"foo": "bar"}}, "url": "https://example.com/a"},
                {"if": {"language": "fr"}, "url": "https://example.com/fr"}
            ]))
        );
    }
}
