//! Picks the in-process cache crate by measurement: moka against
//! quick_cache, for the access pattern of `--cache memory`: 10-character
//! code -> shared URL, mostly reads of present keys (zipf-skewed), from as
//! many threads as there are CPUs. Alternating rounds, medians printed.
//!
//!     cargo run --release -p litelink-lab --example cache_pick

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::distr::{Alphanumeric, SampleString};
use rand_distr::{Distribution, Zipf};

const ENTRIES: usize = 100_000;
const CAPACITY: usize = 100_000;
const ROUNDS: usize = 5;
const RUN: Duration = Duration::from_millis(1500);

trait Cache: Send + Sync {
    fn get(&self, k: &str) -> Option<Arc<str>>;
    fn insert(&self, k: Box<str>, v: Arc<str>);
}

struct Moka(moka::sync::Cache<Box<str>, Arc<str>>);
struct Quick(quick_cache::sync::Cache<Box<str>, Arc<str>>);

impl Cache for Moka {
    fn get(&self, k: &str) -> Option<Arc<str>> {
        self.0.get(k)
    }
    fn insert(&self, k: Box<str>, v: Arc<str>) {
        self.0.insert(k, v);
    }
}

impl Cache for Quick {
    fn get(&self, k: &str) -> Option<Arc<str>> {
        self.0.get(k)
    }
    fn insert(&self, k: Box<str>, v: Arc<str>) {
        self.0.insert(k, v);
    }
}

/// Lookups per second over all threads, for a fixed time.
fn measure(cache: &dyn Cache, keys: &[Box<str>], threads: usize) -> f64 {
    let zipf = Zipf::new(keys.len() as f64, 1.0).expect("zipf");
    let start = Instant::now();
    let total: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut rng = rand::rng();
                    let mut n = 0u64;
                    let mut hits = 0u64;
                    while start.elapsed() < RUN {
                        for _ in 0..1000 {
                            let i = zipf.sample(&mut rng) as usize - 1;
                            hits += u64::from(cache.get(&keys[i]).is_some());
                        }
                        n += 1000;
                    }
                    assert!(hits > 0);
                    n
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    total as f64 / start.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut rng = rand::rng();
    let keys: Vec<Box<str>> = (0..ENTRIES)
        .map(|_| Alphanumeric.sample_string(&mut rng, 10).into_boxed_str())
        .collect();
    let url: Arc<str> = "https://example.com/some/long/path?with=query".into();
    let moka = Moka(moka::sync::Cache::new(CAPACITY as u64));
    let quick = Quick(quick_cache::sync::Cache::new(CAPACITY));
    for (name, cache) in [("moka", &moka as &dyn Cache), ("quick_cache", &quick)] {
        let t = Instant::now();
        for k in &keys {
            cache.insert(k.clone(), Arc::clone(&url));
        }
        println!(
            "{name:12} insert {ENTRIES} entries: {:.1} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
    }
    let (mut m, mut q) = (Vec::new(), Vec::new());
    for round in 1..=ROUNDS {
        let a = measure(&moka, &keys, threads);
        let b = measure(&quick, &keys, threads);
        println!(
            "round {round}: moka {a:>12.0} gets/s   quick_cache {b:>12.0} gets/s   ratio {:.2}",
            b / a
        );
        m.push(a);
        q.push(b);
    }
    let (m, q) = (median(m), median(q));
    println!(
        "median over {ROUNDS} rounds, {threads} threads: moka {m:.0}  quick_cache {q:.0}  quick_cache/moka {:.2}",
        q / m
    );
}
