//! The `litelink` binary's own code: the command line. It is a library so
//! that the integration tests parse arguments exactly as the binary does.
//! The service is `litelink-service`, the load generator `litelink-stress`,
//! the benchmark lab `litelink-bench` (crates/).

pub mod cli;
pub mod manage;
