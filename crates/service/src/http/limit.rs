//! Rate limits on creates: a token bucket per client address for creates
//! without a key, and optionally one per key. Loopback clients are not
//! limited unless asked, so that local benchmarks and tools keep working.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::ApiError;
use crate::domain::KeyId;
use crate::keys::Principal;

/// `--create-rate` and its kin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitSettings {
    /// Creates without a key per minute and client address (0: no limit).
    pub anonymous_per_minute: u32,
    /// How many of them may come at once.
    pub anonymous_burst: u32,
    /// Creates per minute and key (0: no limit).
    pub key_per_minute: u32,
    pub key_burst: u32,
    /// Limit loopback clients too.
    pub loopback: bool,
    /// Take the client's address from `X-Forwarded-For` or `Forwarded`.
    pub trust_proxy: bool,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            anonymous_per_minute: 60,
            anonymous_burst: 20,
            key_per_minute: 0,
            key_burst: 60,
            loopback: false,
            trust_proxy: false,
        }
    }
}

/// The buckets; shared by every request.
pub struct CreateLimiter {
    anonymous: Option<DefaultKeyedRateLimiter<IpAddr>>,
    keys: Option<DefaultKeyedRateLimiter<KeyId>>,
    loopback: bool,
    trust_proxy: bool,
}

fn quota(per_minute: u32, burst: u32) -> Option<Quota> {
    let per_minute = NonZeroU32::new(per_minute)?;
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Some(Quota::per_minute(per_minute).allow_burst(burst))
}

impl CreateLimiter {
    pub fn new(s: &RateLimitSettings) -> Arc<Self> {
        let limiter = Arc::new(Self {
            anonymous: quota(s.anonymous_per_minute, s.anonymous_burst)
                .map(DefaultKeyedRateLimiter::keyed),
            keys: quota(s.key_per_minute, s.key_burst).map(DefaultKeyedRateLimiter::keyed),
            loopback: s.loopback,
            trust_proxy: s.trust_proxy,
        });
        if limiter.anonymous.is_some() || limiter.keys.is_some() {
            tokio::spawn(forget_full_buckets(Arc::downgrade(&limiter)));
        }
        limiter
    }

    /// Takes a token for one create, or says when to come back (429).
    pub fn check(
        &self,
        peer: Option<SocketAddr>,
        headers: &HeaderMap,
        caller: Option<&Principal>,
    ) -> Result<(), ApiError> {
        let outcome = match caller {
            Some(p) => match &self.keys {
                Some(limiter) => limiter.check_key(&p.id),
                None => return Ok(()),
            },
            None => {
                let Some(limiter) = &self.anonymous else {
                    return Ok(());
                };
                let Some(peer) = peer else { return Ok(()) };
                let client = self.client(peer.ip(), headers);
                if client.is_loopback() && !self.loopback {
                    return Ok(());
                }
                limiter.check_key(&bucket(client))
            }
        };
        outcome.map_err(|not_until| {
            metrics::counter!("litelink_rate_limited_total").increment(1);
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            ApiError::TooManyRequests {
                message: match caller {
                    Some(_) => "this key is creating links too fast; retry later".into(),
                    None => "too many links created from this address; retry later, \
                             or use an API key"
                        .into(),
                },
                retry_after: wait.as_secs_f64().ceil().max(1.0) as u32,
            }
        })
    }

    /// The client's address: the connection's peer, or with `--trust-proxy`
    /// what the proxy in front of litelink says (the last address it added).
    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trust_proxy {
            return peer;
        }
        forwarded_for(headers).unwrap_or(peer)
    }
}

/// The rightmost address of `X-Forwarded-For`, else the last `for=` of
/// `Forwarded`: the one the nearest proxy added, which a client cannot
/// forge (anything a client sends itself is further left).
fn forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    if let Some(last) = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .next_back()
    {
        return last.trim().parse().ok();
    }
    let last = headers
        .get_all("forwarded")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .filter_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            k.eq_ignore_ascii_case("for").then_some(v)
        })
        .next_back()?;
    let v = last.trim_matches('"');
    let v = v
        .strip_prefix('[')
        .map_or(v, |v| v.split(']').next().unwrap_or(v));
    v.parse()
        .ok()
        .or_else(|| v.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// IPv6 clients share one bucket per /64, the block one subscriber gets;
/// otherwise one machine could draw a new bucket for every request.
fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

/// Drops buckets that have refilled (they hold nothing a new one would
/// not), so that memory follows the clients of the last minute, not all
/// clients ever seen.
async fn forget_full_buckets(limiter: std::sync::Weak<CreateLimiter>) {
    let mut tick = tokio::time::interval(Duration::from_secs(60));
    loop {
        tick.tick().await;
        let Some(limiter) = limiter.upgrade() else {
            return;
        };
        if let Some(l) = &limiter.anonymous {
            l.retain_recent();
            l.shrink_to_fit();
        }
        if let Some(l) = &limiter.keys {
            l.retain_recent();
            l.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_proxy_names_the_client() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "1.2.3.4, 5.6.7.8".parse().unwrap());
        assert_eq!(forwarded_for(&h), "5.6.7.8".parse().ok());
        let mut h = HeaderMap::new();
        h.append(
            "forwarded",
            "for=1.2.3.4;proto=https, for=\"[2001:db8::1]:4711\""
                .parse()
                .unwrap(),
        );
        assert_eq!(forwarded_for(&h), "2001:db8::1".parse().ok());
        assert_eq!(forwarded_for(&HeaderMap::new()), None);
    }

    #[test]
    fn ipv6_clients_share_a_bucket_per_64() {
        assert_eq!(
            bucket("2001:db8:1:2:aaaa::1".parse().unwrap()),
            bucket("2001:db8:1:2:bbbb::9".parse().unwrap())
        );
        assert_ne!(
            bucket("2001:db8:1:2::1".parse().unwrap()),
            bucket("2001:db8:1:3::1".parse().unwrap())
        );
    }
}
