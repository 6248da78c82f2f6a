//! litelink: a URL shortener on SQLite, as a library. The `litelink`
//! binary parses the command line into [`Settings`] and calls
//! [`Application::build`]; tests do the same on port 0.
//!
//! # Layout
//!
//! ```text
//! settings    the Settings tree (http, codes, store, cache); defaults beside each type
//! startup     Application::build -> addr(), run_until(shutdown)
//! domain/     ShortCode, TargetUrl (parsed once, canonical), TargetPolicy, CodeGenerator
//! http/       fn app() -> Service: the Router (routes(): the one route table) and hot (the
//!             hot path in front of it); extractors, handlers, ApiError, openapi (the
//!             document, checked against the table), request_id, server (the accept loop,
//!             the watchdog of timeouts, connection cap, drain, its own recv/send),
//!             limit (rate limits)
//! links       the application service: cache, then store; who may manage what
//! keys        API keys: making them, and recognising them (reloaded every second)
//! invalidations  changes told to the other instances on one store (Valkey pub/sub),
//!             with their WAL positions
//! cache/      the LinkCache trait; none, memory, valkey (one server or a cluster), tiered
//! store/      the LinkStore trait; sqlite/ (readers, writer, find, walsync, checkpointer, ...);
//!             postgres/ (ops, grouped-create writer, migrations under an advisory lock,
//!             replica: reads from a streaming replica, held back by WAL positions)
//! visits      counting redirects in memory, flushed to the store; max_visits
//! transfer    export and import records (JSON lines, CSV)
//! observe     Prometheus metrics: the recorder, per-request cells, gauges read at a scrape
//! doctor      `litelink doctor`; telemetry: logging set-up (text or JSON), Throttle for
//!             repeated errors
//! ```
//!
//! A read: `http::server` hands `GET|HEAD /{code}`, `/link/{code}` and
//! `/heart-beat` to `http::hot` (everything else to the router, and its
//! handlers such as `handlers::redirect` take the same steps) ->
//! `Links::resolve_now` -> `LinkCache::get_now` (an in-process tier answers
//! at once, inside hyper's service call: no future, no timer) -> or else,
//! boxed and under the request timeout, `Links::resolve_later` -> `LinkCache::get_rest` -> (on a miss)
//! `LinkStore::get` -> `sqlite::readers` on the worker thread; the visit is
//! counted in memory (`visits`), and a flush every second hands the
//! tallies to the writer as an `Op`.
//! A create: `handlers::create_link` (body checked by `extract::NewLinkBody`) ->
//! `Links::create` -> `LinkStore::create` -> the writer's queue -> a batch
//! committed (and, at full durability, synced by `walsync`) -> `replies`
//! -> the 201, then the cache is written through. An edit or delete goes
//! `Links` (may this key manage it?) -> the writer, as an `Op` in its own
//! transaction -> `LinkCache::invalidate` in every tier -> the answer.

pub mod cache;
pub mod domain;
pub mod http;
pub mod keys;
pub mod links;
pub mod observability;
pub mod settings;
pub mod startup;
pub mod store;
pub mod transfer;
pub mod visits;

pub use settings::Settings;
pub use startup::Application;
