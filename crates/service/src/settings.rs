//! Every setting of `litelink serve`, as one tree. Each group's defaults
//! live beside its type, in exactly one `Default` impl; the command line in
//! the binary only overrides them.

use std::net::SocketAddr;

use crate::cache::CacheSettings;
use crate::cache::invalidations::InvalidationSettings;
use crate::domain::{CodeSettings, Host};
use crate::domains::DomainSettings;
use crate::http::HttpSettings;
use crate::sessions::AccountSettings;
use crate::store::{BackendChoice, StoreSettings};
use crate::visits::VisitSettings;

#[derive(Debug, Clone)]
pub struct Settings {
    /// Address to listen on; port 0 picks a free one.
    pub listen: SocketAddr,
    pub http: HttpSettings,
    pub codes: CodeSettings,
    pub store: StoreSettings,
    pub cache: CacheSettings,
    pub visits: VisitSettings,
    pub invalidations: InvalidationSettings,
    pub domains: DomainSettings,
    pub accounts: AccountSettings,
    pub webhooks: crate::webhooks::WebhookSettings,
}

impl Settings {
    /// Fills in what follows from other settings, once they are all set:
    /// the PostgreSQL writer batches and queues as SQLite's does and keeps
    /// positions for other instances' replica reads when it tells them of
    /// changes (and reads a replica only when it hears theirs), and the
    /// invalidation channel is named under the Valkey
    /// prefix. Calling it again changes nothing.
    pub fn derive(&mut self) {
        if let BackendChoice::Postgres(pg) = &mut self.store.backend {
            pg.batch_max = self.store.sqlite.batch_max;
            pg.write_queue = self.store.sqlite.write_queue;
            pg.track_positions |= self.invalidations.url.is_some();
            pg.hears_others = self.invalidations.url.is_some();
        }
        self.invalidations.channel = format!("{}invalidations", self.cache.valkey.prefix);
        self.invalidations.tls = self.cache.valkey.tls.clone();
        self.http.peer_on_gets = self.visits.counting;
        if self.domains.default_host.is_none() {
            self.domains.default_host = self
                .http
                .public_url
                .as_deref()
                .and_then(|u| url::Url::parse(u).ok())
                .and_then(|u| u.host_str().and_then(|h| Host::parse(h).ok()));
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            http: HttpSettings::default(),
            codes: CodeSettings::default(),
            store: StoreSettings::default(),
            cache: CacheSettings::default(),
            visits: VisitSettings::default(),
            invalidations: InvalidationSettings::default(),
            domains: DomainSettings::default(),
            accounts: AccountSettings::default(),
            webhooks: crate::webhooks::WebhookSettings::default(),
        }
    }
}
