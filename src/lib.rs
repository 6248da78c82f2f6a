//! litelink: a URL shortener on SQLite.
//!
//! The binary in `main.rs` only parses the command line and dispatches here.
//! A request flows `http` -> `links` (cache, then store) and back.

pub mod bench;
pub mod cache;
pub mod cli;
pub mod doctor;
pub mod domain;
pub mod http;
pub mod links;
pub mod server;
pub mod store;
pub mod stress;
pub mod telemetry;
