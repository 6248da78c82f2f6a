//! YOURLS: its `yourls_url` (`keyword, url, title, timestamp, ip,
//! clicks`) and `yourls_log` (`click_id, click_time, shorturl, referrer,
//! user_agent, ip_address, country_code`) tables, read from CSV files with
//! those columns, from the `INSERT`s of a `mysqldump` (parsed, never
//! run), or from the MySQL or MariaDB database itself. Times are UTC
//! `Y-m-d H:i:s`; a referrer of `direct` is none; the log's addresses are
//! never read.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

use super::replay::{Logged, LoggedVisit};
use super::{Found, Item, Items, Replay, SourceOptions, dates::rfc3339};

/// The largest `INSERT` of a dump read; a longer one is refused whole.
pub const MAX_STATEMENT_BYTES: usize = 64 << 20;
use crate::domain::Timestamp;

/// `yourls_url`'s columns, in the table's order.
const URL_COLUMNS: [&str; 6] = ["keyword", "url", "title", "timestamp", "ip", "clicks"];
/// `yourls_log`'s columns, in the table's order.
const LOG_COLUMNS: [&str; 7] = [
    "click_id",
    "click_time",
    "shorturl",
    "referrer",
    "user_agent",
    "ip_address",
    "country_code",
];

/// A row of `yourls_url`.
struct UrlRow {
    keyword: String,
    url: String,
    title: Option<String>,
    timestamp: String,
    clicks: String,
}

/// The visits of the log, replayed per keyword.
#[derive(Default)]
struct Logs {
    replay: Replay,
    by_keyword: HashMap<String, Logged>,
    /// Rows whose time could not be read: not counted, said once.
    unreadable: u64,
}

impl Logs {
    fn add(&mut self, shorturl: &str, click_time: &str, referrer: &str, ua: &str, cc: &str) {
        let Ok(at) =
            rfc3339(click_time).and_then(|s| Timestamp::parse(&s).map_err(|e| e.to_string()))
        else {
            self.unreadable += 1;
            return;
        };
        let logged = match self.by_keyword.get_mut(shorturl) {
            Some(l) => l,
            None => self.by_keyword.entry(shorturl.to_owned()).or_default(),
        };
        self.replay.add(
            logged,
            LoggedVisit {
                at,
                referrer: Some(referrer).filter(|r| !r.eq_ignore_ascii_case("direct")),
                user_agent: Some(ua),
                country: Some(cc),
            },
        );
    }

    fn item(&mut self, row: UrlRow) -> Item {
        let logged = self.by_keyword.remove(&row.keyword);
        let found = (|| -> Result<Found, String> {
            Ok(Found {
                domain: None,
                total: match row.clicks.trim() {
                    "" => 0,
                    n => n
                        .parse()
                        .map_err(|_| format!("clicks: '{n}' is not a count"))?,
                },
                created_at: rfc3339(&row.timestamp).map_err(|e| format!("timestamp: {e}"))?,
                code: row.keyword,
                url: row.url,
                title: row.title,
                logged,
                ..Found::default()
            })
        })();
        match found {
            Ok(f) => Item::Link(Box::new(f.record())),
            Err(why) => Item::Invalid(why),
        }
    }
}

/// What a file given to `--from yourls` is.
enum Kind {
    UrlCsv,
    LogCsv,
    Dump,
}

fn kind_of(path: &PathBuf) -> anyhow::Result<Kind> {
    let mut head = String::new();
    std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?
        .take(4096)
        .read_to_string(&mut head)
        .ok();
    let first = head.lines().next().unwrap_or("").to_ascii_lowercase();
    let names: Vec<&str> = first
        .split(',')
        .map(|c| c.trim().trim_matches('"'))
        .collect();
    Ok(if names.contains(&"keyword") && names.contains(&"url") {
        Kind::UrlCsv
    } else if names.contains(&"click_time") && names.contains(&"shorturl") {
        Kind::LogCsv
    } else {
        Kind::Dump
    })
}

fn open(path: &PathBuf) -> anyhow::Result<BufReader<std::fs::File>> {
    Ok(BufReader::with_capacity(
        1 << 20,
        std::fs::File::open(path)
            .map_err(|e| anyhow::anyhow!("opening {}: {e}", path.display()))?,
    ))
}

pub(super) fn read_files(files: &[PathBuf], options: &SourceOptions) -> anyhow::Result<Items> {
    check_prefix(&options.table_prefix)?;
    let (mut urls, mut logs, mut dumps) = (None, Vec::new(), Vec::new());
    for f in files {
        match kind_of(f)? {
            Kind::UrlCsv if urls.is_none() => urls = Some(f.clone()),
            Kind::UrlCsv => anyhow::bail!("two files of yourls_url: {}", f.display()),
            Kind::LogCsv => logs.push(f.clone()),
            Kind::Dump => dumps.push(f.clone()),
        }
    }
    let mut replayed = Logs::default();
    for f in &logs {
        read_log_csv(open(f)?, &mut replayed)
            .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
    }
    let url_table = format!("{}url", options.table_prefix);
    let log_table = format!("{}log", options.table_prefix);
    match (urls, dumps.as_slice()) {
        (Some(urls), []) => Ok(url_csv(open(&urls)?, replayed)),
        (None, [dump]) => {
            // The log first (a dump lists it before the urls anyway), so
            // that each link comes out with its visits.
            for statement in Statements::new(open(dump)?) {
                let (_, sql) = statement.map_err(|e| anyhow::anyhow!("{}: {e}", dump.display()))?;
                let Some((table, rows)) = inserts(&sql) else {
                    continue;
                };
                if table != log_table {
                    continue;
                }
                let rows = rows.map_err(|e| anyhow::anyhow!("{}: {e}", dump.display()))?;
                for r in rows {
                    let get = |c: &str| r.get(c).map_or("", |v| v.as_deref().unwrap_or(""));
                    replayed.add(
                        get("shorturl"),
                        get("click_time"),
                        get("referrer"),
                        get("user_agent"),
                        get("country_code"),
                    );
                }
            }
            Ok(Box::new(DumpRows {
                statements: Statements::new(open(dump)?),
                table: url_table,
                pending: Vec::new().into_iter(),
                n: 0,
                logs: replayed,
            }))
        }
        (None, []) => anyhow::bail!(
            "--from yourls reads a mysqldump, or a CSV of yourls_url (with one of yourls_log beside it)"
        ),
        _ => anyhow::bail!("--from yourls reads one dump, or one CSV of yourls_url"),
    }
}

/// A table prefix as YOURLS allows it: letters, digits and `_` (it is put
/// into SQL as a name).
fn check_prefix(prefix: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        prefix.len() <= 48
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "--table-prefix '{prefix}': only letters, digits and _"
    );
    Ok(())
}

/// The cells of a CSV row by column name.
fn columns(headers: &csv::StringRecord, wanted: &[&str]) -> Result<Vec<Option<usize>>, String> {
    let at: Vec<Option<usize>> = wanted
        .iter()
        .map(|c| {
            headers
                .iter()
                .position(|h| h.trim().eq_ignore_ascii_case(c))
        })
        .collect();
    Ok(at)
}

fn read_log_csv<R: Read>(input: R, logs: &mut Logs) -> Result<(), String> {
    let mut reader = csv::ReaderBuilder::new().from_reader(input);
    let headers = reader.headers().map_err(|e| e.to_string())?.clone();
    let at = columns(&headers, &LOG_COLUMNS)?;
    if at[1].is_none() || at[2].is_none() {
        return Err("a CSV of yourls_log needs click_time and shorturl".into());
    }
    for row in reader.into_records() {
        let row = row.map_err(|e| e.to_string())?;
        let get = |i: usize| at[i].and_then(|c| row.get(c)).unwrap_or("");
        logs.add(get(2), get(1), get(3), get(4), get(6));
    }
    Ok(())
}

fn url_csv<R: Read + Send + 'static>(input: R, mut logs: Logs) -> Items {
    let mut reader = csv::ReaderBuilder::new().from_reader(input);
    let at = match reader.headers() {
        Ok(h) => columns(&h.clone(), &URL_COLUMNS).unwrap_or_default(),
        Err(e) => return Box::new(std::iter::once((1, Item::Invalid(e.to_string())))),
    };
    Box::new(reader.into_records().map(move |row| {
        let line = crate::transfer::csv_line(&row);
        let item = match row {
            Err(e) => Item::Invalid(e.to_string()),
            Ok(r) => {
                let get = |i: usize| at[i].and_then(|c| r.get(c)).unwrap_or("").to_owned();
                logs.item(UrlRow {
                    keyword: get(0),
                    url: get(1),
                    title: Some(get(2)),
                    timestamp: get(3),
                    clicks: get(5),
                })
            }
        };
        (line, item)
    }))
}

/// The url rows of a dump, one `INSERT` at a time.
struct DumpRows<R: BufRead> {
    statements: Statements<R>,
    table: String,
    pending: std::vec::IntoIter<Result<UrlRow, String>>,
    n: u64,
    logs: Logs,
}

impl<R: BufRead> Iterator for DumpRows<R> {
    type Item = (u64, Item);

    fn next(&mut self) -> Option<(u64, Item)> {
        loop {
            if let Some(row) = self.pending.next() {
                self.n += 1;
                let item = match row {
                    Ok(row) => self.logs.item(row),
                    Err(why) => Item::Invalid(why),
                };
                return Some((self.n, item));
            }
            let (line, sql) = match self.statements.next()? {
                Ok(s) => s,
                Err(why) => {
                    self.n += 1;
                    return Some((self.n, Item::Invalid(why)));
                }
            };
            let Some((table, rows)) = inserts(&sql) else {
                continue;
            };
            if table != self.table {
                continue;
            }
            let rows: Vec<Result<UrlRow, String>> = match rows {
                Err(why) => vec![Err(format!("the INSERT on line {line}: {why}"))],
                Ok(rows) => rows
                    .into_iter()
                    .map(|r| {
                        let get = |c: &str| r.get(c).cloned().flatten();
                        Ok(UrlRow {
                            keyword: get("keyword").ok_or("no keyword")?,
                            url: get("url").unwrap_or_default(),
                            title: get("title"),
                            timestamp: get("timestamp").unwrap_or_default(),
                            clicks: get("clicks").unwrap_or_default(),
                        })
                    })
                    .collect(),
            };
            self.pending = rows.into_iter();
        }
    }
}

/// The statements of a SQL dump, split at `;` outside quotes and
/// comments. Only those that start with `INSERT` or `REPLACE` are kept
/// (at most [`MAX_STATEMENT_BYTES`] each); the rest are read past.
struct Statements<R: BufRead> {
    input: R,
    line: u64,
    done: bool,
}

impl<R: BufRead> Statements<R> {
    fn new(input: R) -> Self {
        Self {
            input,
            line: 1,
            done: false,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Lex {
    Code,
    Quoted(u8),
    Escaped(u8),
    LineComment,
    BlockComment,
    BlockStar,
}

impl<R: BufRead> Iterator for Statements<R> {
    /// The statement's first line, and its text.
    type Item = Result<(u64, Vec<u8>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let mut buf: Vec<u8> = Vec::new();
        let mut started = false;
        let mut keep = true;
        let mut too_long = false;
        let mut first_line = self.line;
        let mut lex = Lex::Code;
        // The last byte seen in code, to find `--` and `/*`.
        let mut prev = 0u8;
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(c) => c,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.to_string()));
                }
            };
            if chunk.is_empty() {
                self.done = true;
                return (started && keep && !too_long).then_some(Ok((first_line, buf)));
            }
            let mut used = 0;
            let mut ended = false;
            while used < chunk.len() {
                // Inside a statement kept (its head read), only quotes,
                // escapes, `;` and line ends change anything: the bytes up
                // to the next of them are copied at once.
                if started && keep && !too_long && buf.len() >= 16 {
                    let rest = &chunk[used..];
                    let plain = match lex {
                        Lex::Quoted(q) => memchr::memchr3(b'\\', q, b'\n', rest),
                        Lex::Code => rest
                            .iter()
                            .position(|b| matches!(b, b'\'' | b'"' | b'`' | b';' | b'\n')),
                        _ => Some(0),
                    }
                    .unwrap_or(rest.len());
                    if plain > 0 {
                        buf.extend_from_slice(&rest[..plain]);
                        prev = rest[plain - 1];
                        used += plain;
                        if buf.len() > MAX_STATEMENT_BYTES {
                            too_long = true;
                            buf = Vec::new();
                        }
                        continue;
                    }
                }
                let b = chunk[used];
                used += 1;
                if b == b'\n' {
                    self.line += 1;
                }
                match lex {
                    Lex::LineComment => {
                        if b == b'\n' {
                            lex = Lex::Code;
                        }
                        continue;
                    }
                    Lex::BlockComment => {
                        if b == b'*' {
                            lex = Lex::BlockStar;
                        }
                        continue;
                    }
                    Lex::BlockStar => {
                        lex = match b {
                            b'/' => Lex::Code,
                            b'*' => Lex::BlockStar,
                            _ => Lex::BlockComment,
                        };
                        prev = 0;
                        continue;
                    }
                    Lex::Escaped(q) => lex = Lex::Quoted(q),
                    Lex::Quoted(q) => {
                        if b == b'\\' {
                            lex = Lex::Escaped(q);
                        } else if b == q {
                            lex = Lex::Code;
                        }
                    }
                    Lex::Code => {
                        if !started {
                            if b.is_ascii_whitespace() || b == b';' {
                                continue;
                            }
                            if b == b'#' {
                                lex = Lex::LineComment;
                                continue;
                            }
                            if b == b'-' || b == b'/' {
                                // Maybe a comment: decided by the next byte.
                                if prev == b'-' && b == b'-' {
                                    lex = Lex::LineComment;
                                    prev = 0;
                                    continue;
                                }
                                if prev == 0 {
                                    prev = b;
                                    continue;
                                }
                            }
                            if prev == b'/' && b == b'*' {
                                lex = Lex::BlockComment;
                                prev = 0;
                                continue;
                            }
                            started = true;
                            first_line = self.line;
                            if prev != 0 {
                                buf.push(prev);
                            }
                        }
                        match b {
                            b'\'' | b'"' | b'`' => lex = Lex::Quoted(b),
                            b';' => {
                                ended = true;
                                break;
                            }
                            _ => {}
                        }
                    }
                }
                prev = b;
                if keep && !too_long {
                    buf.push(b);
                    if buf.len() == 16 {
                        let head = String::from_utf8_lossy(&buf).to_ascii_uppercase();
                        keep = head.starts_with("INSERT") || head.starts_with("REPLACE");
                        if !keep {
                            buf = Vec::new();
                        }
                    }
                    if buf.len() > MAX_STATEMENT_BYTES {
                        too_long = true;
                        buf = Vec::new();
                    }
                }
            }
            self.input.consume(used);
            if ended {
                if too_long {
                    return Some(Err(format!(
                        "the statement on line {first_line} is over {} MiB; not read",
                        MAX_STATEMENT_BYTES >> 20
                    )));
                }
                if keep && started {
                    return Some(Ok((first_line, buf)));
                }
                // Read past: the next statement.
                buf.clear();
                started = false;
                keep = true;
                prev = 0;
            }
        }
    }
}

/// A row of an `INSERT`, by column name.
/// Its values in the statement's column order, found by name (a table
/// has a handful of columns: a scan beats a map made for every row).
struct Row {
    names: std::sync::Arc<[String]>,
    values: Vec<Option<String>>,
}

impl Row {
    fn get(&self, name: &str) -> Option<&Option<String>> {
        let at = self.names.iter().position(|n| n == name)?;
        self.values.get(at)
    }
}

impl std::ops::Index<&str> for Row {
    type Output = Option<String>;

    fn index(&self, name: &str) -> &Option<String> {
        self.get(name).unwrap_or(&None)
    }
}

/// The table an `INSERT` (or `REPLACE`) fills, and its rows; `None` for
/// any other statement.
fn inserts(sql: &[u8]) -> Option<(String, Result<Vec<Row>, String>)> {
    let mut p = Parser { s: sql, i: 0 };
    let verb = p.word()?.to_ascii_uppercase();
    if verb != "INSERT" && verb != "REPLACE" {
        return None;
    }
    let mut w = p.word()?.to_ascii_uppercase();
    while matches!(
        w.as_str(),
        "IGNORE" | "LOW_PRIORITY" | "DELAYED" | "HIGH_PRIORITY"
    ) {
        w = p.word()?.to_ascii_uppercase();
    }
    if w != "INTO" {
        return None;
    }
    let mut table = p.name()?;
    // `db`.`table`: the table.
    if p.peek() == Some(b'.') {
        p.i += 1;
        table = p.name()?;
    }
    Some((table.clone(), p.rows(&table)))
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.i).copied()
    }

    fn word(&mut self) -> Option<String> {
        self.skip_ws();
        let start = self.i;
        while self.i < self.s.len()
            && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_')
        {
            self.i += 1;
        }
        (self.i > start).then(|| String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// A name, bare or in backticks.
    fn name(&mut self) -> Option<String> {
        if self.peek()? == b'`' {
            let start = self.i + 1;
            let end = start + self.s[start..].iter().position(|b| *b == b'`')?;
            self.i = end + 1;
            return Some(String::from_utf8_lossy(&self.s[start..end]).into_owned());
        }
        self.word()
    }

    fn rows(&mut self, table: &str) -> Result<Vec<Row>, String> {
        let mut names: Vec<String> = Vec::new();
        if self.peek() == Some(b'(') {
            self.i += 1;
            loop {
                names.push(self.name().ok_or("a column list without names")?);
                match self.peek() {
                    Some(b',') => self.i += 1,
                    Some(b')') => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err("an unclosed column list".into()),
                }
            }
        }
        if names.is_empty() {
            let order: &[&str] = if table.ends_with("log") {
                &LOG_COLUMNS
            } else {
                &URL_COLUMNS
            };
            names = order.iter().map(|c| (*c).to_owned()).collect();
        }
        let shared: std::sync::Arc<[String]> = names.into();
        let values = self.word().map(|w| w.to_ascii_uppercase());
        if !matches!(values.as_deref(), Some("VALUES" | "VALUE")) {
            return Err("not an INSERT ... VALUES".into());
        }
        let mut rows = Vec::new();
        loop {
            if self.peek() != Some(b'(') {
                return Err("a row does not start with '('".into());
            }
            self.i += 1;
            let mut row = Row {
                names: std::sync::Arc::clone(&shared),
                values: Vec::with_capacity(shared.len()),
            };
            loop {
                let v = self.value()?;
                row.values.push(v);
                match self.peek() {
                    Some(b',') => self.i += 1,
                    Some(b')') => {
                        self.i += 1;
                        break;
                    }
                    _ => return Err("a row is not closed".into()),
                }
            }
            rows.push(row);
            match self.peek() {
                Some(b',') => self.i += 1,
                None | Some(b';') => return Ok(rows),
                // `ON DUPLICATE KEY UPDATE ...`: the rows are all read.
                Some(_) => return Ok(rows),
            }
        }
    }

    /// A literal: a quoted string (with MySQL's backslash escapes), NULL,
    /// or a number; `_charset'...'` is the string.
    fn value(&mut self) -> Result<Option<String>, String> {
        let c = self.peek().ok_or("a row ends early")?;
        if c == b'\'' || c == b'"' {
            return self.string(c).map(Some);
        }
        if c == b'_' {
            // `_binary 'x'`, `_utf8mb4'x'`.
            self.word();
            let q = self.peek().ok_or("a row ends early")?;
            return self.string(q).map(Some);
        }
        let start = self.i;
        while self.i < self.s.len()
            && !matches!(self.s[self.i], b',' | b')')
            && !self.s[self.i].is_ascii_whitespace()
        {
            self.i += 1;
        }
        let raw = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
        if raw.eq_ignore_ascii_case("NULL") {
            return Ok(None);
        }
        if let Some(hex) = raw.strip_prefix("0x").or_else(|| raw.strip_prefix("0X")) {
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| {
                    hex.get(i..i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                })
                .collect();
            let bytes = bytes.ok_or_else(|| format!("'{raw}' is not hex"))?;
            return Ok(Some(String::from_utf8_lossy(&bytes).into_owned()));
        }
        if raw.is_empty() {
            return Err("an empty value".into());
        }
        Ok(Some(raw))
    }

    fn string(&mut self, quote: u8) -> Result<String, String> {
        if self.s.get(self.i) != Some(&quote) {
            return Err("a string does not start with a quote".into());
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let b = *self.s.get(self.i).ok_or("a string is not closed")?;
            self.i += 1;
            if b == b'\\' {
                let e = *self.s.get(self.i).ok_or("a string is not closed")?;
                self.i += 1;
                out.push(match e {
                    b'0' => 0,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 8,
                    b'Z' => 26,
                    other => other,
                });
            } else if b == quote {
                // A doubled quote is one quote.
                if self.s.get(self.i) == Some(&quote) {
                    self.i += 1;
                    out.push(quote);
                } else {
                    break;
                }
            } else {
                out.push(b);
            }
        }
        String::from_utf8(out).map_err(|_| "a string is not UTF-8".into())
    }
}

/// How long connecting to the YOURLS database may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads YOURLS's tables from its database (`mysql://user:pass@host/db`):
/// the log first, replayed per keyword, then the links, oldest first.
pub async fn read_database(url: &str, options: &SourceOptions) -> anyhow::Result<Items> {
    use mysql_async::prelude::Queryable;
    check_prefix(&options.table_prefix)?;
    let opts =
        mysql_async::Opts::from_url(url).map_err(|e| anyhow::anyhow!("the database URL: {e}"))?;
    let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, mysql_async::Conn::new(opts))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "the database did not answer within {}s",
                CONNECT_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| anyhow::anyhow!("connecting to the database: {e}"))?;
    // `timestamp` columns are read in the session's zone: UTC, as stored.
    conn.query_drop("SET time_zone = '+00:00'").await?;
    let prefix = &options.table_prefix;
    let text = |v: Option<mysql_async::Value>| -> String {
        match v {
            Some(mysql_async::Value::Bytes(b)) => String::from_utf8_lossy(&b).into_owned(),
            Some(mysql_async::Value::Int(n)) => n.to_string(),
            Some(mysql_async::Value::UInt(n)) => n.to_string(),
            _ => String::new(),
        }
    };
    let mut logs = Logs::default();
    let log_rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SELECT shorturl, DATE_FORMAT(click_time, '%Y-%m-%d %H:%i:%s'), referrer, user_agent, \
             country_code FROM `{prefix}log` ORDER BY click_id"
        ))
        .await
        .map_err(|e| anyhow::anyhow!("reading {prefix}log: {e}"))?;
    for mut r in log_rows {
        let mut take = |i: usize| text(r.take(i));
        let (s, t, re, ua, cc) = (take(0), take(1), take(2), take(3), take(4));
        logs.add(&s, &t, &re, &ua, &cc);
    }
    let url_rows: Vec<mysql_async::Row> = conn
        .query(format!(
            "SELECT keyword, url, title, DATE_FORMAT(`timestamp`, '%Y-%m-%d %H:%i:%s'), clicks \
             FROM `{prefix}url` ORDER BY `timestamp`, keyword"
        ))
        .await
        .map_err(|e| anyhow::anyhow!("reading {prefix}url: {e}"))?;
    let _ = conn.disconnect().await;
    let items: Vec<(u64, Item)> = url_rows
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            let title = match r.take::<mysql_async::Value, _>(2) {
                Some(mysql_async::Value::NULL) | None => None,
                v => Some(text(v)),
            };
            let row = UrlRow {
                keyword: text(r.take(0)),
                url: text(r.take(1)),
                title,
                timestamp: text(r.take(3)),
                clicks: text(r.take(4)),
            };
            (i as u64 + 1, logs.item(row))
        })
        .collect();
    Ok(Box::new(items.into_iter()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_is_split_into_statements_past_comments_and_quotes() {
        let dump = b"-- MySQL dump\n/*!40101 SET NAMES utf8mb4 */;\nDROP TABLE IF EXISTS `yourls_url`;\n\
            CREATE TABLE `yourls_url` (`keyword` varchar(100));\n\
            INSERT INTO `yourls_url` VALUES ('a-1','https://e.com/?q=1;2','It''s \\'quoted\\'; really','2020-01-02 03:04:05','127.0.0.1',3),\
            ('b_2','https://e.com/b',NULL,'2020-01-02 03:04:05','::1',0);\n\
            # a comment; with a semicolon\n\
            INSERT INTO yourls_log (click_time, shorturl, referrer, user_agent, ip_address, country_code) VALUES ('2020-01-03 00:00:00','a-1','direct','curl/8','10.0.0.1','DE');\n";
        let whole: Vec<_> = Statements::new(&dump[..])
            .map(|s| s.expect("statement"))
            .collect();
        // Read a few bytes at a time, statements span the reads: the same
        // statements, from the same lines.
        let in_bits: Vec<_> = Statements::new(std::io::BufReader::with_capacity(7, &dump[..]))
            .map(|s| s.expect("statement"))
            .collect();
        assert_eq!(whole, in_bits);
        assert_eq!(whole.iter().map(|s| s.0).collect::<Vec<_>>(), [5, 7]);
        let statements: Vec<_> = whole.into_iter().map(|s| s.1).collect();
        assert_eq!(
            statements.len(),
            2,
            "{:?}",
            statements
                .iter()
                .map(|s| String::from_utf8_lossy(s))
                .collect::<Vec<_>>()
        );
        let (table, rows) = inserts(&statements[0]).expect("an insert");
        assert_eq!(table, "yourls_url");
        let rows = rows.expect("rows");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["url"].as_deref(), Some("https://e.com/?q=1;2"));
        assert_eq!(rows[0]["title"].as_deref(), Some("It's 'quoted'; really"));
        assert_eq!(rows[1]["title"], None);
        let (table, rows) = inserts(&statements[1]).expect("an insert");
        assert_eq!(table, "yourls_log");
        assert_eq!(rows.expect("rows")[0]["shorturl"].as_deref(), Some("a-1"));
    }

    #[test]
    fn an_insert_over_the_limit_is_refused_and_the_next_read() {
        let mut dump = b"INSERT INTO `yourls_url` VALUES ('".to_vec();
        dump.extend(std::iter::repeat_n(b'x', MAX_STATEMENT_BYTES + 10));
        dump.extend(b"');\nINSERT INTO `yourls_url` VALUES ('k','https://e.com','t','2020-01-02 03:04:05','',1);\n");
        let out: Vec<_> = Statements::new(&dump[..]).collect();
        assert_eq!(out.len(), 2);
        assert!(out[0].as_ref().is_err_and(|e| e.contains("over 64 MiB")));
        assert!(out[1].is_ok());
    }
}
