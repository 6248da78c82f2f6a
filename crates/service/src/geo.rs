//! A visitor's country (and city, where a database has one), from its
//! address, which is dropped once the country is known: never stored, never
//! logged. The sources, first that answers wins:
//!
//! 1. a header a trusted proxy or CDN sets (`--country-header`, such as
//!    `CF-IPCountry`), read only from the proxies `--trust-proxy` trusts;
//! 2. a MaxMind-format database (`--geoip-db`: GeoLite2, DB-IP Lite and
//!    the like), read again when the file changes and on SIGHUP;
//! 3. the table compiled into the binary (the `iptocc` crate: the five
//!    Regional Internet Registries' delegation files, public data, about
//!    1.3 MB), which names the country a block was assigned to;
//! 4. else `unknown`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use compact_str::CompactString;

use crate::domain::Country;

/// Where countries come from; both optional.
#[derive(Debug, Clone, Default)]
pub struct GeoSettings {
    /// A header with the visitor's ISO country code, set by a trusted
    /// proxy.
    pub country_header: Option<String>,
    /// A MaxMind-format database file.
    pub db: Option<PathBuf>,
}

/// A visitor's place: the country, and the city where the database
/// names one (an English name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    pub country: Country,
    pub city: Option<CompactString>,
}

impl Place {
    pub(crate) const UNKNOWN: Self = Self {
        country: Country::UNKNOWN,
        city: None,
    };
}

struct Loaded {
    reader: maxminddb::Reader<Vec<u8>>,
    modified: Option<SystemTime>,
}

pub(crate) struct Geo {
    header: Option<axum::http::HeaderName>,
    path: Option<PathBuf>,
    db: ArcSwapOption<Loaded>,
    /// Held while a reload reads the file, so that two never race.
    reloading: Mutex<()>,
    /// Reads of a changed file that failed (the one in use stayed).
    failed_reads: std::sync::atomic::AtomicU64,
}

/// Why `--geoip-db` or `--country-header` cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GeoError {
    #[error("--country-header: '{0}' is not a header name")]
    Header(String),
    #[error("--geoip-db {path}: {source}")]
    Db {
        path: String,
        source: maxminddb::MaxMindDbError,
    },
    #[error("--geoip-db {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl Geo {
    /// Reads the database, if one is set: a file that cannot be read is an
    /// error at start, so that a typo is not a silent `unknown`.
    pub(crate) fn new(settings: &GeoSettings) -> Result<Self, GeoError> {
        let header = settings
            .country_header
            .as_deref()
            .map(|h| {
                axum::http::HeaderName::from_bytes(h.trim().as_bytes())
                    .map_err(|_| GeoError::Header(h.to_owned()))
            })
            .transpose()?;
        let geo = Self {
            header,
            path: settings.db.clone(),
            db: ArcSwapOption::empty(),
            reloading: Mutex::new(()),
            failed_reads: Default::default(),
        };
        if let Some(path) = &geo.path {
            geo.db.store(Some(Arc::new(load(path)?)));
        }
        Ok(geo)
    }

    /// The header to read a country from, if any.
    pub(crate) fn header(&self) -> Option<&axum::http::HeaderName> {
        self.header.as_ref()
    }

    /// The place of a visitor at `client`, with the value of the country
    /// header when a trusted proxy sent one.
    pub(crate) fn place(&self, client: Option<IpAddr>, header: Option<&[u8]>) -> Place {
        if let Some(v) = header {
            let country = Country::parse(v.trim_ascii());
            // `XX` (Cloudflare) and `T1` (Tor) name no country.
            if country.is_known() && country.as_str() != "XX" {
                return Place {
                    country,
                    city: None,
                };
            }
        }
        let Some(ip) = client.map(unmapped) else {
            return Place::UNKNOWN;
        };
        // Without a file, not even the swap's load (a thread-local's
        // lookup on every visit).
        if self.path.is_some()
            && let Some(db) = self.db.load().as_deref()
            && let Some(place) = from_db(&db.reader, ip)
        {
            return place;
        }
        Place {
            country: iptocc::country_code(ip)
                .map_or(Country::UNKNOWN, |c| Country::parse(c.as_bytes())),
            city: None,
        }
    }

    /// Reads the database file again if it changed since it was read
    /// (`force`: whatever its time says, as on SIGHUP). A file that
    /// cannot be read keeps the one in use, and says why.
    pub(crate) fn reload(&self, force: bool) {
        let Some(path) = &self.path else { return };
        let _one = self.reloading.lock().unwrap_or_else(|e| e.into_inner());
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let current = self.db.load();
        if !force
            && current
                .as_ref()
                .is_some_and(|d| d.modified == modified && modified.is_some())
        {
            return;
        }
        match load(path) {
            Ok(db) => {
                self.db.store(Some(Arc::new(db)));
                tracing::info!(path = %path.display(), "read the GeoIP database");
            }
            Err(e) => {
                self.failed_reads
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(error = %e, "kept the GeoIP database in use");
            }
        }
    }

    /// How many reads of a changed file failed since start.
    pub(crate) fn failed_reads(&self) -> u64 {
        self.failed_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a database file is set (and so worth watching).
    pub(crate) fn watches_a_file(&self) -> bool {
        self.path.is_some()
    }
}

fn load(path: &std::path::Path) -> Result<Loaded, GeoError> {
    let shown = || path.display().to_string();
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let bytes = std::fs::read(path).map_err(|source| GeoError::Io {
        path: shown(),
        source,
    })?;
    let reader = maxminddb::Reader::from_source(bytes).map_err(|source| GeoError::Db {
        path: shown(),
        source,
    })?;
    Ok(Loaded { reader, modified })
}

/// The country and city a database has for `ip`; `None` when it has no
/// country for it.
fn from_db(reader: &maxminddb::Reader<Vec<u8>>, ip: IpAddr) -> Option<Place> {
    let found = reader.lookup(ip).ok()?;
    let city: maxminddb::geoip2::City<'_> = found.decode().ok()??;
    let code = city.country.iso_code.or(city.registered_country.iso_code)?;
    let country = Country::parse(code.as_bytes());
    if !country.is_known() {
        return None;
    }
    let city = city
        .city
        .names
        .english
        .filter(|n| !n.is_empty() && n.len() <= 100)
        .map(CompactString::from);
    Some(Place { country, city })
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiled_in_table_knows_well_known_addresses() {
        let geo = Geo::new(&GeoSettings::default()).expect("geo");
        let country = |ip: &str| geo.place(Some(ip.parse().expect("ip")), None).country;
        // Google's, Deutsche Telekom's and NTT's resolvers or blocks.
        assert_eq!(country("8.8.8.8").as_str(), "US");
        assert_eq!(country("194.25.0.60").as_str(), "DE");
        assert_eq!(country("::ffff:194.25.0.60").as_str(), "DE");
        assert_eq!(country("2001:4860:4860::8888").as_str(), "US");
        assert_eq!(country("127.0.0.1"), Country::UNKNOWN);
        assert_eq!(country("10.1.2.3"), Country::UNKNOWN);
        assert_eq!(geo.place(None, None), Place::UNKNOWN);
    }

    #[test]
    fn a_header_names_the_country_unless_it_names_none() {
        let geo = Geo::new(&GeoSettings {
            country_header: Some("CF-IPCountry".into()),
            db: None,
        })
        .expect("geo");
        let ip = Some("8.8.8.8".parse().expect("ip"));
        assert_eq!(geo.place(ip, Some(b"de")).country.as_str(), "DE");
        assert_eq!(geo.place(ip, Some(b"XX")).country.as_str(), "US");
        assert_eq!(geo.place(ip, Some(b"T1")).country.as_str(), "US");
        assert_eq!(geo.place(None, Some(b"garbage")), Place::UNKNOWN);
    }

    #[test]
    fn a_file_that_is_no_database_is_refused_at_start() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("x.mmdb");
        std::fs::write(&path, b"not a database").expect("write");
        let err = Geo::new(&GeoSettings {
            country_header: None,
            db: Some(path),
        });
        assert!(matches!(err, Err(GeoError::Db { .. })));
    }
}
