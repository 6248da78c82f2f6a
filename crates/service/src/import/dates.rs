//! The time forms other shorteners write, as RFC 3339 (what the checker
//! parses): MySQL's and SQLite's `Y-m-d H:i:s` (UTC), and Bitly's
//! `2020-03-01T00:00:00+0000`, whose offset lacks its colon.

use crate::domain::Timestamp;

/// `raw` as an RFC 3339 time, or why not.
pub(super) fn rfc3339(raw: &str) -> Result<String, String> {
    let s = raw.trim();
    // Bitly's form is told by its last five bytes, without a failed parse.
    if numeric_offset(s).is_none() && Timestamp::parse(s).is_ok() {
        return Ok(s.to_owned());
    }
    let bad = || format!("'{raw}' is not a time");
    // `Y-m-d H:i:s` or `Y-m-dTH:i:s`, with fractions, without a zone: UTC.
    let (date, rest) = (s.get(..10).ok_or_else(bad)?, s.get(10..).ok_or_else(bad)?);
    let rest = rest.strip_prefix([' ', 'T']).ok_or_else(bad)?;
    let candidate = if let Some(offset) = numeric_offset(rest) {
        // Bitly: `+0000` becomes `+00:00`.
        let (time, zone) = rest.split_at(rest.len() - offset.len());
        format!("{date}T{time}{}:{}", &zone[..3], &zone[3..])
    } else {
        format!("{date}T{rest}Z")
    };
    Timestamp::parse(&candidate).map_err(|_| bad())?;
    Ok(candidate)
}

/// A trailing `+hhmm` or `-hhmm` after the seconds.
fn numeric_offset(time: &str) -> Option<&str> {
    let tail = time.get(time.len().checked_sub(5)?..)?;
    let bytes = tail.as_bytes();
    (time.len() > 8 && matches!(bytes[0], b'+' | b'-') && bytes[1..].iter().all(u8::is_ascii_digit))
        .then_some(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sources_form_reads_as_rfc3339() {
        for (raw, want) in [
            ("2020-03-01T00:00:00+0000", "2020-03-01T00:00:00+00:00"),
            ("2020-03-01T10:00:00-0530", "2020-03-01T10:00:00-05:30"),
            ("2024-05-06 07:08:09", "2024-05-06T07:08:09Z"),
            ("2024-05-06T07:08:09", "2024-05-06T07:08:09Z"),
            ("2024-05-06 07:08:09.123", "2024-05-06T07:08:09.123Z"),
            ("2016-08-21T20:34:16+02:00", "2016-08-21T20:34:16+02:00"),
        ] {
            assert_eq!(rfc3339(raw).as_deref(), Ok(want), "{raw}");
        }
        for raw in [
            "0000-00-00 00:00:00",
            "yesterday",
            "2024-13-01 00:00:00",
            "",
        ] {
            assert!(rfc3339(raw).is_err(), "{raw}");
        }
    }
}
