//! litelink: a URL shortener on SQLite (or PostgreSQL), as a library. The
//! `litelink` binary parses the command line into [`Settings`] and calls
//! [`Application::build`]; tests do the same on port 0, and the lab
//! (`crates/lab`) with its own switches.
//!
//! # Layout
//!
//! ```text
//! settings     the Settings tree (http, codes, store, cache, visits, invalidations);
//!              defaults beside each type, derived values in Settings::derive
//! startup      Application::build -> addr(), run_until(shutdown)
//! domain/      ShortCode, TargetUrl (parsed once, canonical), TargetPolicy, CodeGenerator,
//!              Codebook, Host, DomainId, LinkKey (a code on a domain); visit counts, and
//!              classify: a Referer's host, a User-Agent's class, device, OS and browser;
//!              rules: a link's password hash, targeted redirects and expired target;
//!              wire: how each value reads itself from JSON (FromText) and describes
//!              itself in the OpenAPI document; from_json and its messages, Patch
//! users        users as the API shows them (UserView, NewUserBody, UserPatchBody), one-time
//!              passwords; domain::user: UserId, Role (admin, member, viewer), name rules
//! domains      short domains in use: the domain a Host names, each domain's redirects
//!              (reloaded every second); the domain bodies (NewDomainBody, DomainView)
//! geo          a visitor's country from its address (header, MaxMind file, built-in table)
//! http/        fn app() -> Service: the Router (routes(): the one route table) with the hot
//!              path in front of it (hot); redirect: the one answer to a request for a code,
//!              which the hot path and the router's handlers call; finish: what every answer
//!              carries, written once; server: connections (accept loop, cap, timeouts,
//!              drain) for any hyper service; extract (Json<T>, keys, codes, domains),
//!              handlers, openapi (the document, generated from the bodies the handlers
//!              read and checked against the table), error (ApiError), request_id, limit
//!              (who the client is behind proxies), locked (a link's password form and its
//!              401), prometheus (/metrics)
//! links/       the application service and every rule of the game: who may create and
//!              manage what, which targets a link may have, cache then store, a link's rules
//!              and password on the way (LinksError); bodies (NewLinkBody, LinkPatchBody,
//!              LinkView: what a client sends and is shown); limit (rate limits on creates);
//!              users (only admins manage users; roles decide the rest, in mod.rs)
//! passwords    link and sign-in passwords: Argon2id on the blocking pool, guesses bounded
//! oidc/        signing in through OpenID Connect: discovery, the code flow with PKCE (its
//!              state kept in the store), ID token checks, the role from a claim; http: the
//!              client that speaks to the provider
//! sessions     signed-in sessions: the cookie, the session it names (hashed in the store),
//!              idle and absolute expiry, the one origin that may write with it
//! keys         API keys: making them, and recognising them as their user, with that
//!              user's role (reloaded every second)
//! cache/       the LinkCache trait; none, memory, valkey (one server or a cluster), tiered;
//!              invalidations: changes told to the other instances on one store
//! store/       the LinkStore trait and store::backend, the one place that names the
//!              backends; queue: the group-commit queue both writers share (StoreError);
//!              sqlite/ (backend, readers, writer, ops, find, slots, walsync, checkpointer,
//!              doctor, ...); postgres/ (backend, ops, writer, migrations, replica, doctor,
//!              tls: libpq's sslmode, sslrootcert, sslcert and sslkey)
//! visits/      tally (counting a redirect), limits (max_visits), flush (to the store),
//!              report (a link's visit report)
//! webhooks/    webhook bodies and settings; sign (Standard Webhooks); deliver: claims
//!              due events from the store's outbox, posts them signed, records each try;
//!              streams: RabbitMQ and NATS JetStream as destinations of the same outbox
//! tls          rustls client configurations for litelink's own connections (PostgreSQL,
//!              Valkey): CA files, client certificates, how much of a certificate is checked
//! transfer     export and import records (JSON lines, CSV)
//! observability/ logging (subscriber, request ids, throttled repeats) and recording
//!              (Prometheus: per-request cells, the recorder, gauges read at a scrape)
//! ```
//!
//! A read: `http::server` hands each request to `http::hot::Service`, which
//! answers `GET|HEAD /{code}`, `/link/{code}` and `/heart-beat` itself and
//! everything else through the router (whose handlers `redirect`, `unlock`
//! and `get_link` call the same `http::redirect::answer`) -> the domain its
//! `Host` names (`domains`) -> `Links::resolve_now` ->
//! `LinkCache::get_now` (an in-process tier answers at once, inside hyper's
//! service call: no future, no timer) -> or else, boxed and under the
//! request timeout, `Links::resolve_later` -> `LinkCache::get_rest` -> (on a
//! miss) `LinkStore::get` -> `sqlite::readers`; the visit is counted in
//! memory (`visits::tally`), and a flush every second hands the tallies to
//! the writer. Both paths end in `http::finish::finish`.
//! A create: `handlers::create_link` (the body read as a
//! `links::bodies::NewLinkBody` by `extract::Json`, each value parsing
//! itself) -> `Links::create` (who may create, the rate limit, the targets
//! against the server's policy, the domain, the password's hash) ->
//! `LinkStore::create` -> the
//! writer's queue (`store::queue`) -> a batch committed (and, at full
//! durability, synced by `walsync`) -> the 201, then the cache is written
//! through. An edit or delete goes `Links` (may this key manage it?) -> the
//! writer, in its own transaction -> `LinkCache::invalidate` in every tier
//! -> the answer.

pub mod cache;
pub mod domain;
pub mod domains;
pub mod geo;
pub mod http;
pub mod import;
pub mod keys;
pub mod links;
pub mod observability;
pub mod oidc;
pub mod outbound;
pub mod passwords;
pub mod sessions;
pub mod settings;
pub mod startup;
pub mod store;
pub mod tls;
pub mod transfer;
pub mod users;
pub mod visits;
pub mod webhooks;

pub use settings::Settings;
pub use startup::Application;
