//! Rate limits on creates: a token bucket per client address for creates
//! without a key, and optionally one per key. Loopback clients are not
//! limited unless asked, so that local benchmarks and tools keep working.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
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
    /// Which peers may name the client in `X-Forwarded-For` or `Forwarded`.
    pub trust_proxy: TrustProxy,
}

/// Which proxies may say who the client is (`--trust-proxy`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TrustProxy {
    /// None: the client is the connection's peer.
    #[default]
    Off,
    /// The direct peer, whoever it is (`on`): one proxy in front, and the
    /// client is the address it added.
    Peer,
    /// Proxies at these addresses or ranges: forwarded headers count only
    /// from one of them, and the client is the nearest forwarded address
    /// that is not one of them.
    List(Vec<ipnet::IpNet>),
}

impl std::str::FromStr for TrustProxy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "false" | "no" | "0" => return Ok(Self::Off),
            "on" | "true" | "yes" | "1" => return Ok(Self::Peer),
            _ => {}
        }
        s.split(',')
            .map(|item| {
                let item = item.trim();
                item.parse::<ipnet::IpNet>()
                    .or_else(|_| item.parse::<IpAddr>().map(ipnet::IpNet::from))
                    .map_err(|_| {
                        format!("'{item}' is not an address or a CIDR range (or use on or off)")
                    })
            })
            .collect::<Result<_, _>>()
            .map(Self::List)
    }
}

impl std::fmt::Display for TrustProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Off => f.write_str("off"),
            Self::Peer => f.write_str("on"),
            Self::List(nets) => {
                let nets: Vec<String> = nets.iter().map(ToString::to_string).collect();
                f.write_str(&nets.join(","))
            }
        }
    }
}

impl TrustProxy {
    /// The client's address, and whether a forwarded header named it (a
    /// forwarded address is never exempt from the limits, whatever it is).
    fn client(&self, peer: IpAddr, headers: &HeaderMap) -> (IpAddr, bool) {
        let trusted = |ip: IpAddr| match self {
            Self::Off => false,
            Self::Peer => ip == peer,
            Self::List(nets) => {
                let ip = unmapped(ip);
                nets.iter().any(|n| n.contains(&ip))
            }
        };
        if !trusted(peer) {
            return (peer, false);
        }
        // From the nearest hop outwards, past every trusted proxy; with
        // `on` only the peer is trusted, so the nearest address is it. An
        // address that does not parse ends the walk at the last one known.
        // The hops are read in place, nearest first: a redirect behind a
        // proxy walks them too (a visitor's country), so nothing is
        // collected.
        let mut client = peer;
        let mut forwarded = false;
        let mut step = |hop: Option<IpAddr>| {
            forwarded = true;
            let Some(ip) = hop else { return false };
            client = ip;
            !matches!(self, Self::Peer) && trusted(client)
        };
        let xff = headers.get_all(&X_FORWARDED_FOR);
        if xff.iter().next().is_some() {
            'walk: for v in xff.iter().rev() {
                for a in v.to_str().unwrap_or(",").rsplit(',') {
                    if !step(a.trim().parse().ok()) {
                        break 'walk;
                    }
                }
            }
        } else {
            'walk: for v in headers.get_all(header::FORWARDED).iter().rev() {
                let nodes = v
                    .to_str()
                    .unwrap_or("")
                    .rsplit([',', ';'])
                    .filter_map(|pair| {
                        let (k, v) = pair.trim().split_once('=')?;
                        k.trim().eq_ignore_ascii_case("for").then_some(v)
                    });
                for node in nodes {
                    if !step(forwarded_node(node)) {
                        break 'walk;
                    }
                }
            }
        }
        (client, forwarded)
    }
}

impl TrustProxy {
    /// A visitor's address, as for the rate limits, and the `country`
    /// header's value when the connection's peer is a proxy this server
    /// trusts (from anyone else it is ignored: a client could name any
    /// country).
    pub fn visitor<'a>(
        &self,
        peer: Option<SocketAddr>,
        headers: &'a HeaderMap,
        country: Option<&HeaderName>,
    ) -> (Option<IpAddr>, Option<&'a [u8]>) {
        let Some(peer) = peer.map(|p| unmapped(p.ip())) else {
            return (None, None);
        };
        if *self == Self::Off {
            return (Some(peer), None);
        }
        let (client, _) = self.client(peer, headers);
        let trusted = match self {
            Self::Off => false,
            Self::Peer => true,
            Self::List(nets) => nets.iter().any(|n| n.contains(&peer)),
        };
        let country = country
            .filter(|_| trusted)
            .and_then(|name| headers.get(name))
            .map(HeaderValue::as_bytes);
        (Some(client), country)
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            anonymous_per_minute: 60,
            anonymous_burst: 20,
            key_per_minute: 0,
            key_burst: 60,
            loopback: false,
            trust_proxy: TrustProxy::Off,
        }
    }
}

/// The buckets; shared by every request.
pub struct CreateLimiter {
    anonymous: Option<DefaultKeyedRateLimiter<IpAddr>>,
    keys: Option<DefaultKeyedRateLimiter<KeyId>>,
    loopback: bool,
    trust_proxy: TrustProxy,
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
            trust_proxy: s.trust_proxy.clone(),
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
                let (client, forwarded) = self.trust_proxy.client(unmapped(peer.ip()), headers);
                if client.is_loopback() && !forwarded && !self.loopback {
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
}

/// `X-Forwarded-For`: its addresses, the nearest proxy's last, are the
/// hops; without it, the `for=` values of `Forwarded` are.
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// A `for=` node: an address, quoted, bracketed, with a port or not.
fn forwarded_node(v: &str) -> Option<IpAddr> {
    let v = v.trim().trim_matches('"');
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

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(*name, value.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_nearest_proxy_names_the_client() {
        let on = TrustProxy::Peer;
        let peer = ip("127.0.0.1");
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 5.6.7.8")]);
        assert_eq!(on.client(peer, &h), (ip("5.6.7.8"), true));
        let h = headers(&[(
            "forwarded",
            "for=1.2.3.4;proto=https, for=\"[2001:db8::1]:4711\"",
        )]);
        assert_eq!(on.client(peer, &h), (ip("2001:db8::1"), true));
        assert_eq!(on.client(peer, &HeaderMap::new()), (peer, false));
        // A forwarded loopback address is a forwarded address.
        let h = headers(&[("x-forwarded-for", "203.0.113.5, 127.0.0.1")]);
        assert_eq!(on.client(peer, &h), (ip("127.0.0.1"), true));
        assert_eq!(TrustProxy::Off.client(peer, &h), (peer, false));
    }

    #[test]
    fn a_list_of_proxies_is_walked_past() {
        let list: TrustProxy = "127.0.0.1, 10.0.0.0/8,::1".parse().unwrap();
        assert_eq!(list.to_string(), "127.0.0.1/32,10.0.0.0/8,::1/128");
        let h = headers(&[("x-forwarded-for", "198.51.100.7, 203.0.113.5, 10.1.2.3")]);
        // From a listed proxy: past 10.1.2.3 to the first that is not one.
        assert_eq!(list.client(ip("127.0.0.1"), &h), (ip("203.0.113.5"), true));
        assert_eq!(
            list.client(ip("::ffff:127.0.0.1"), &h),
            (ip("203.0.113.5"), true)
        );
        // From anyone else the headers do not count.
        assert_eq!(list.client(ip("192.0.2.1"), &h), (ip("192.0.2.1"), false));
        // Every hop a proxy: the farthest; one that does not parse ends it.
        let h = headers(&[("x-forwarded-for", "10.0.0.9, 10.0.0.8")]);
        assert_eq!(list.client(ip("::1"), &h), (ip("10.0.0.9"), true));
        let h = headers(&[("x-forwarded-for", "198.51.100.7, junk, 10.0.0.8")]);
        assert_eq!(list.client(ip("::1"), &h), (ip("10.0.0.8"), true));
        let h = headers(&[("forwarded", "for=198.51.100.9, for=10.0.0.1")]);
        assert_eq!(list.client(ip("::1"), &h), (ip("198.51.100.9"), true));
        for bad in ["10.0.0.0/33", "proxy.lan", "1.2.3.4,"] {
            assert!(bad.parse::<TrustProxy>().is_err(), "{bad}");
        }
        assert_eq!("on".parse(), Ok(TrustProxy::Peer));
        assert_eq!("off".parse(), Ok(TrustProxy::Off));
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
