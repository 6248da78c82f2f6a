//! Rate limits on creates: a token bucket per client address for creates
//! without a key, and optionally one per key. Loopback clients are not
//! limited unless asked, so that local benchmarks and tools keep working.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use super::LinksError;
use crate::domain::{KeyId, UserId, client_block};
use crate::keys::{Principal, Via};

/// Who a create's rate limit counts against: a key, or a signed-in user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Actor {
    Key(KeyId),
    User(UserId),
}

/// A create's client as the limits count it: its address, and whether a
/// trusted proxy named it (a forwarded address is never exempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Client {
    pub ip: IpAddr,
    pub forwarded: bool,
}

/// The buckets' sizes (`--create-rate` and its kin).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quotas {
    /// Creates without a key per minute and client address (0: no limit).
    pub anonymous_per_minute: u32,
    pub anonymous_burst: u32,
    /// Creates per minute and key (0: no limit).
    pub key_per_minute: u32,
    pub key_burst: u32,
    /// Limit loopback clients too.
    pub loopback: bool,
}

/// The buckets; shared by every request.
pub(crate) struct CreateLimiter {
    anonymous: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// By key, or by user for a signed-in session.
    keys: Option<DefaultKeyedRateLimiter<Actor>>,
    loopback: bool,
}

fn quota(per_minute: u32, burst: u32) -> Option<Quota> {
    let per_minute = NonZeroU32::new(per_minute)?;
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Some(Quota::per_minute(per_minute).allow_burst(burst))
}

impl CreateLimiter {
    pub(crate) fn new(s: &Quotas) -> Arc<Self> {
        let limiter = Arc::new(Self {
            anonymous: quota(s.anonymous_per_minute, s.anonymous_burst)
                .map(DefaultKeyedRateLimiter::keyed),
            keys: quota(s.key_per_minute, s.key_burst).map(DefaultKeyedRateLimiter::keyed),
            loopback: s.loopback,
        });
        if limiter.anonymous.is_some() || limiter.keys.is_some() {
            tokio::spawn(forget_full_buckets(Arc::downgrade(&limiter)));
        }
        limiter
    }

    /// Takes a token for one create, or says when to come back (429).
    pub(crate) fn check(
        &self,
        client: Option<Client>,
        caller: Option<&Principal>,
    ) -> Result<(), LinksError> {
        let outcome = match caller {
            Some(p) => match &self.keys {
                Some(limiter) => limiter.check_key(&match p.via {
                    Via::Key(key) => Actor::Key(key),
                    Via::Session { .. } | Via::Password => Actor::User(p.user),
                }),
                None => return Ok(()),
            },
            None => {
                let Some(limiter) = &self.anonymous else {
                    return Ok(());
                };
                let Some(Client { ip, forwarded }) = client else {
                    return Ok(());
                };
                if ip.is_loopback() && !forwarded && !self.loopback {
                    return Ok(());
                }
                limiter.check_key(&client_block(ip))
            }
        };
        outcome.map_err(|not_until| {
            metrics::counter!("litelink_rate_limited_total").increment(1);
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            LinksError::RateLimited {
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
    fn ipv6_clients_share_a_bucket_per_64() {
        assert_eq!(
            client_block("2001:db8:1:2:aaaa::1".parse().unwrap()),
            client_block("2001:db8:1:2:bbbb::9".parse().unwrap())
        );
        assert_ne!(
            client_block("2001:db8:1:2::1".parse().unwrap()),
            client_block("2001:db8:1:3::1".parse().unwrap())
        );
    }
}
