//! Who a client is: the connection's peer, or the address a trusted proxy
//! forwarded (`--trust-proxy`), for the rate limits on creates
//! (`links::limit`) and a visitor's country; and the limits' settings.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::links::limit::{Client, Quotas};

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
    /// The client of a create, as its rate limit counts it: `None`
    /// without a peer (a test's in-process request).
    pub(crate) fn creator(&self, peer: Option<SocketAddr>, headers: &HeaderMap) -> Option<Client> {
        let peer = unmapped(peer?.ip());
        let (ip, forwarded) = self.client(peer, headers);
        Some(Client { ip, forwarded })
    }

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
    pub(crate) fn visitor<'a>(
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

impl RateLimitSettings {
    /// The buckets' sizes, for the links service's limiter.
    pub(crate) fn quotas(&self) -> Quotas {
        Quotas {
            anonymous_per_minute: self.anonymous_per_minute,
            anonymous_burst: self.anonymous_burst,
            key_per_minute: self.key_per_minute,
            key_burst: self.key_burst,
            loopback: self.loopback,
        }
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
}
