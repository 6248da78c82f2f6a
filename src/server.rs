//! Putting the service together from its configuration: store, cache,
//! router; and running it until shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use crate::cache::{LinkCache, MemoryCache, NoCache, TieredCache, ValkeyCache, ValkeyConfig};
use crate::cli::{CacheMode, ServeArgs};
use crate::domain::CodeGenerator;
use crate::http::{self, AppState, HttpLimits};
use crate::links::Links;
use crate::store::LinkStore;
use crate::store::sqlite::{Durability, SqliteConfig, SqliteStore, memstatus};

pub fn sqlite_config(args: &ServeArgs) -> SqliteConfig {
    SqliteConfig {
        connections: args.sqlite_connections,
        read_on: args.sqlite_read_on,
        page_cache: args.sqlite_page_cache.is_on(),
        durability: args.durability,
        busy_timeout: Duration::from_millis(args.sqlite_busy_timeout_ms),
        batch_max: if args.group_commit.is_on() {
            args.write_batch_max as usize
        } else {
            1
        },
        write_queue: args.write_queue as usize,
        wal_preallocate: u64::from(args.wal_preallocate_mib) << 20,
        ..SqliteConfig::default()
    }
}

/// Opens the store and builds the cache. MEMSTATUS must be configured first.
pub async fn build_links(args: &ServeArgs) -> anyhow::Result<Links> {
    let config = sqlite_config(args);
    let codes = CodeGenerator::new(args.code_length as usize, args.code_locality.is_on());
    let db = args.sqlite.db.clone();
    let store = tokio::task::spawn_blocking(move || SqliteStore::open(db, config, codes))
        .await
        .context("opening the store panicked")??;
    let memstatus_on = store.memstatus();
    tracing::info!(
        sqlite = memstatus::sqlite_version(),
        db = %store.path().display(),
        memstatus = memstatus_on,
        connections = ?store.config().connections,
        read_on = ?store.config().read_on,
        page_cache = store.config().page_cache,
        durability = ?store.config().durability,
        batch_max = store.config().batch_max,
        wal_preallocate_mib = args.wal_preallocate_mib,
        code_locality = args.code_locality.is_on(),
        "store opened"
    );
    if memstatus_on {
        tracing::warn!(
            "SQLite MEMSTATUS is on: every SQLite allocation takes one process-wide mutex, \
             which costs throughput when several threads use SQLite at once"
        );
    }
    if store.config().durability == Durability::Off {
        tracing::warn!(
            "durability is off: acknowledged links can be lost in a crash; use for benchmarks only"
        );
    }
    let store: Arc<dyn LinkStore> = Arc::new(store);
    let cache = build_cache(args)?;
    Ok(Links::new(cache, store))
}

fn build_cache(args: &ServeArgs) -> anyhow::Result<Arc<dyn LinkCache>> {
    let negative_ttl = Duration::from_millis(args.cache_negative_ttl_ms);
    let memory = || MemoryCache::new(args.cache_capacity, negative_ttl);
    let valkey = || {
        ValkeyCache::new(ValkeyConfig {
            url: args.valkey_url.clone(),
            prefix: args.valkey_prefix.clone(),
            ttl: (args.valkey_ttl > 0).then(|| Duration::from_secs(args.valkey_ttl)),
            negative_ttl,
            timeout: Duration::from_millis(args.valkey_timeout_ms.max(1)),
        })
    };
    let cache: Arc<dyn LinkCache> = match args.cache {
        CacheMode::None => Arc::new(NoCache),
        CacheMode::Memory => Arc::new(memory()),
        CacheMode::Valkey => Arc::new(valkey()?),
        CacheMode::Tiered => Arc::new(TieredCache::new(memory(), valkey()?)),
    };
    tracing::info!(mode = ?args.cache, "cache ready");
    Ok(cache)
}

/// Runs the service on `listener` until `shutdown` resolves, lets requests
/// in flight finish, then closes the store (queued creates are committed).
pub async fn run(
    args: ServeArgs,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let links = build_links(&args).await?;
    let state = AppState {
        links: links.clone(),
        redirect_status: args.redirect_status.status(),
        public_url: args.public_url.clone(),
    };
    let limits = HttpLimits {
        max_body_bytes: args.max_body_bytes,
        request_timeout: args.request_timeout(),
    };
    let router = http::app(state, limits);
    tracing::info!(addr = %listener.local_addr()?, "listening");
    let served = http::serve(listener, router, shutdown).await;
    links.store().close().await;
    tracing::info!("stopped");
    served.context("serving HTTP")
}
