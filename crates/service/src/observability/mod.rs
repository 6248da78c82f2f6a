//! What the service tells its operators: log lines (`logging`: the
//! subscriber, request ids in every line, throttled repeats) and
//! Prometheus metrics (`recording`: per-request cells, the recorder, and
//! the gauges read at a scrape).

pub mod logging;
pub(crate) mod recording;
