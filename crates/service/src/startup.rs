//! Putting the service together from its [`Settings`]: store, cache, the
//! links service and the router; then serving until shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::cache;
use crate::cache::CacheMode;
use crate::cache::invalidations::Invalidations;
use crate::domain::{CodeGenerator, TargetPolicy};
use crate::domains::{DomainRegistry, UnknownHost};
use crate::geo::Geo;
use crate::http;
use crate::keys::KeyRegistry;
use crate::links::{self, Links};
use crate::settings::Settings;
use crate::store::{self, LinkStore, Purpose, StoreSettings};
use crate::visits::{Flusher, Visits};

/// A built service: its listener is bound and its store open; nothing is
/// served until [`Application::run_until`].
pub struct Application {
    listener: TcpListener,
    links: Links,
    service: http::Service,
    http: http::HttpSettings,
    /// `--metrics-listen`: `/metrics` alone, on its own address.
    metrics: Option<(TcpListener, http::Service)>,
    refresher: tokio::task::JoinHandle<()>,
    /// Reloads the domains every second.
    domain_refresher: tokio::task::JoinHandle<()>,
    /// Reads `--deny-hosts` again on SIGHUP.
    reloader: Option<tokio::task::JoinHandle<()>>,
    flusher: Flusher,
    /// Sends webhook events from the outbox.
    deliverer: tokio::task::JoinHandle<()>,
}

impl Application {
    /// Binds `settings.listen`, opens the store and builds the cache.
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let listener = TcpListener::bind(settings.listen)
            .await
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        Self::build_on(listener, settings).await
    }

    /// As [`build`](Self::build), on a listener that is already bound.
    pub(crate) async fn build_on(
        listener: TcpListener,
        mut settings: Settings,
    ) -> anyhow::Result<Self> {
        settings.derive();
        // Checked before the store opens: a wrong setting stops the start
        // with nothing to undo.
        let oidc =
            crate::oidc::Oidc::new(&settings.accounts.oidc, settings.http.public_url.as_deref())?
                .map(Arc::new);
        let yourls = match &settings.accounts.yourls_secret_file {
            Some(path) => Some(crate::keys::YourlsSigning {
                secret: crate::keys::YourlsSecret::read(path).map_err(anyhow::Error::msg)?,
                window: settings.accounts.yourls_signature_window,
            }),
            None => None,
        };
        let codes = CodeGenerator::new(settings.codes)?;
        let store = store::open(&settings.store, codes, Purpose::Serve).await?;
        let cache = cache::build(&settings.cache)?;
        tracing::info!(mode = %settings.cache.mode, "cache ready");
        if settings.domains.unknown_host == UnknownHost::Reject
            && settings.domains.default_host.is_none()
        {
            anyhow::bail!(
                "--unknown-host reject needs the default domain's host: \
                 --default-domain or --public-url"
            );
        }
        let keys = Arc::new(KeyRegistry::load(Arc::clone(&store), yourls).await?);
        let refresher = keys.spawn_refresher();
        let domains =
            Arc::new(DomainRegistry::load(Arc::clone(&store), settings.domains.clone()).await?);
        let domain_refresher = domains.spawn_refresher();
        let geo = Arc::new(Geo::new(&settings.visits.geo)?);
        let visits = Arc::new(Visits::new(
            settings.visits.clone(),
            Arc::clone(&store),
            Arc::clone(&geo),
        ));
        let flusher = visits.spawn_flusher();
        if store.shared()
            && settings.invalidations.url.is_none()
            && matches!(settings.cache.mode, CacheMode::Memory | CacheMode::Tiered)
        {
            // Other instances may change links here unheard: the in-process
            // tier serves an entry only as long as it does while the
            // channel is down, never an old link for longer.
            cache.set_local(false);
            tracing::info!(
                ttl_ms = settings.cache.unheard_ttl.as_millis() as u64,
                "a shared database without --invalidations-url: in-process cache entries \
                 live at most --invalidations-down-ttl-ms"
            );
        }
        let invalidations = match &settings.invalidations.url {
            Some(url) => Some(Arc::new(
                Invalidations::start(
                    &settings.invalidations,
                    url,
                    Arc::clone(&cache),
                    Arc::clone(&store),
                )
                .await
                .context("cannot connect to the invalidation channel")?,
            )),
            None => None,
        };
        let targets = Arc::new(
            TargetPolicy::new(
                settings.http.refuse_private_targets,
                settings.http.deny_hosts.clone(),
            )?
            .with_own_hosts(
                settings.http.public_url.as_deref(),
                Some(listener.local_addr()?),
            ),
        );
        let sessions = Arc::new(crate::sessions::Sessions::new(
            Arc::clone(&store),
            settings.accounts.clone(),
            settings.http.public_url.as_deref(),
        ));
        if let Some(oidc) = &oidc {
            let oidc = Arc::clone(oidc);
            tokio::spawn(async move { oidc.discover().await });
        }
        let outbox = Arc::clone(&store);
        let links = Links::new(links::Parts {
            webhooks: settings.webhooks.clone(),
            sessions,
            oidc,
            cache,
            store,
            keys,
            domains,
            visits,
            invalidations,
            create_auth: settings.http.create_auth,
            targets: Arc::clone(&targets),
            passwords: Arc::new(crate::passwords::Passwords::new()),
            limiter: links::limit::CreateLimiter::new(&settings.http.rate_limits.quotas()),
        });
        let reloader = (targets.has_deny_list() || geo.watches_a_file())
            .then(|| spawn_reloader(Arc::clone(&targets), Arc::clone(&geo)))
            .transpose()?;
        let metrics = match settings
            .http
            .metrics_listen
            .filter(|_| settings.http.metrics)
        {
            Some(addr) => Some((
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} for metrics"))?,
                http::metrics_app(links.clone()).into(),
            )),
            None => None,
        };
        crate::webhooks::streams::ensure(&outbox, &settings.webhooks.streams).await?;
        let deliverer = crate::webhooks::deliver::Deliverer::new(
            outbox,
            links.clone(),
            settings.webhooks.clone(),
            listener.local_addr()?,
            settings.http.public_url.clone(),
        )?;
        let deliverer = tokio::spawn(deliverer.run());
        let service = http::app(links.clone(), &settings.http, listener.local_addr()?);
        Ok(Self {
            deliverer,
            listener,
            links,
            service,
            http: settings.http.clone(),
            metrics,
            refresher,
            domain_refresher,
            reloader,
            flusher,
        })
    }

    /// The address actually bound (the port is real when 0 was asked for).
    pub fn addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, lets requests in flight finish,
    /// then writes the counted visits and closes the store (queued creates
    /// are committed).
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        tracing::info!(addr = %self.listener.local_addr()?, "serving");
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let metrics = self.metrics.map(|(listener, service)| {
            let http = self.http.clone();
            let mut stopped = stopped.clone();
            if let Ok(addr) = listener.local_addr() {
                tracing::info!(%addr, "serving metrics");
            }
            tokio::spawn(async move {
                let until = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                http::server::serve(listener, service, &http, until).await
            })
        });
        let served = http::server::serve(self.listener, self.service, &self.http, shutdown).await;
        let _ = stop.send(true);
        if let Some(m) = metrics {
            let _ = m.await;
        }
        self.refresher.abort();
        self.domain_refresher.abort();
        // An event being sent is claimed, not lost: it goes again once its
        // lease runs out.
        self.deliverer.abort();
        if let Some(r) = self.reloader {
            r.abort();
        }
        self.flusher.stop().await;
        self.links.close().await;
        tracing::info!("stopped");
        served.context("serving HTTP")
    }
}

/// How often the GeoIP database's file is looked at for a change.
const GEO_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// On every SIGHUP, reads the deny list and the GeoIP database again, and
/// the database also when its file changes; one that cannot be read
/// leaves the previous one in force.
fn spawn_reloader(
    targets: Arc<TargetPolicy>,
    geo: Arc<Geo>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    let mut tick = tokio::time::interval(GEO_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A reload reads a file: on the blocking pool, off the workers.
    let reload_geo = move |geo: &Arc<Geo>, force: bool| {
        let geo = Arc::clone(geo);
        tokio::task::spawn_blocking(move || geo.reload(force))
    };
    Ok(tokio::spawn(async move {
        loop {
            tokio::select! {
                got = hup.recv() => {
                    if got.is_none() {
                        return;
                    }
                    if targets.has_deny_list() {
                        match targets.reload() {
                            Ok(n) => tracing::info!(hosts = n, "deny list reloaded"),
                            Err(e) => tracing::error!(error = %e, "deny list not reloaded; the old one stays"),
                        }
                    }
                    if geo.watches_a_file() {
                        let _ = reload_geo(&geo, true).await;
                    }
                }
                _ = tick.tick(), if geo.watches_a_file() => {
                    let _ = reload_geo(&geo, false).await;
                }
            }
        }
    }))
}

/// Opens the store for a command that works on a database without serving
/// it: beside a running server (`keys`, `export`: [`Purpose::Tool`]), or
/// alone on it (`import`: [`Purpose::Import`]).
pub async fn open_tool_store(
    settings: &StoreSettings,
    purpose: Purpose,
) -> anyhow::Result<Arc<dyn LinkStore>> {
    store::open(settings, CodeGenerator::new(Default::default())?, purpose).await
}
