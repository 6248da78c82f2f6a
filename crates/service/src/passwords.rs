//! Passwords: hashing one (Argon2id, on the blocking pool) and checking a
//! guess, with guessing bounded, for links and for signing in. A guess is refused before it
//! is hashed once its client (an IPv6 client by its /64) has failed
//! [`PER_CLIENT`] times on the link within [`WINDOW`]. Once anyone has
//! failed [`PER_LINK`] times, only clients with fewer than
//! [`LOCKED_ALLOWANCE`] failures of their own still get through, so that
//! strangers cannot lock the owner out. At most [`HASHING`] guesses are
//! hashed at once, and a guess beyond them is refused, not queued; an
//! owner's writes hash under [`HASHING`] permits of their own, which no
//! flood of guesses can take. Signing in is bounded the same way, per
//! account ([`LOGIN_PER_CLIENT`], [`LOGIN_PER_ACCOUNT`]), with permits of
//! its own.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argon2::password_hash::phc::PasswordHash as Phc;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};
use argon2::{Algorithm, Argon2, Params, Version};
use tokio::sync::Semaphore;

use crate::domain::{LinkKey, PasswordHash, client_block};

/// Failed guesses one client may make on one link within [`WINDOW`].
pub(crate) const PER_CLIENT: u32 = 5;
/// Failed guesses everyone together may make on one link within [`WINDOW`].
pub(crate) const PER_LINK: u32 = 100;
pub(crate) const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failed guesses a client may have made and still guess on a link that
/// everyone together has failed [`PER_LINK`] times on: the owner, who may
/// mistype once, is let through; a guesser, who has failed more, is not.
pub(crate) const LOCKED_ALLOWANCE: u32 = 2;
/// Failed sign-ins one client may make on one account within [`WINDOW`].
pub(crate) const LOGIN_PER_CLIENT: u32 = 10;
/// Failed sign-ins everyone together may make on one account within
/// [`WINDOW`].
pub(crate) const LOGIN_PER_ACCOUNT: u32 = 100;
/// Hashes computed at once.
pub(crate) const HASHING: usize = 2;
/// Links and clients whose failures are remembered; past it, expired
/// windows are dropped, and a new client is bounded by its link's limit
/// alone.
const REMEMBERED: usize = 65_536;
/// What a client told "busy" waits before it tries again.
const BUSY_RETRY_SECS: u32 = 1;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum PasswordError {
    #[error("too many wrong passwords; try again later")]
    TooManyGuesses { retry_after: u32 },
    #[error("too many passwords are being checked; try again shortly")]
    Busy { retry_after: u32 },
    #[error("hashing failed: {0}")]
    Failed(String),
}

/// Failures in one window. Written here rather than with `governor`,
/// which the create limits use: its buckets take a cell on every check
/// and cannot be read without taking one, while only a wrong guess may
/// count, and a guess must be refused before it is hashed; its refill
/// would also end a lockout in a fifth of the window.
#[derive(Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Window {
    fn current(&self, now: Instant) -> bool {
        now.duration_since(self.started) < WINDOW
    }

    /// Seconds until the window ends, at least one.
    fn retry_after(&self, now: Instant) -> u32 {
        let left = WINDOW.saturating_sub(now.duration_since(self.started));
        u32::try_from(left.as_secs().max(1)).unwrap_or(u32::MAX)
    }
}

/// The failures on one kind of subject (a link, an account), by subject
/// and by subject and client, with the limits on each.
struct Guesses<K> {
    failures: Mutex<Failures<K>>,
    per_client: u32,
    per_subject: u32,
}

struct Failures<K> {
    by_subject: HashMap<K, Window>,
    by_client: HashMap<(K, Option<IpAddr>), Window>,
}

impl<K: std::hash::Hash + Eq + Clone> Guesses<K> {
    fn new(per_client: u32, per_subject: u32) -> Self {
        Self {
            failures: Mutex::new(Failures {
                by_subject: HashMap::new(),
                by_client: HashMap::new(),
            }),
            per_client,
            per_subject,
        }
    }

    /// Whether `client` may guess on `subject` now; else how long to wait.
    /// The subject's bound holds only for clients that have failed
    /// already; an unknown client (no address) is one of them.
    fn admit(&self, subject: &K, client: Option<IpAddr>, now: Instant) -> Result<(), u32> {
        let failures = lock(&self.failures);
        let limited = |w: Option<&Window>, limit: u32| {
            w.filter(|w| w.current(now) && w.failures >= limit)
                .map(|w| w.retry_after(now))
        };
        let own = failures.by_client.get(&(subject.clone(), client));
        let client_limit = limited(own, self.per_client);
        let subject_limit = limited(failures.by_subject.get(subject), self.per_subject)
            .filter(|_| client.is_none() || limited(own, LOCKED_ALLOWANCE).is_some());
        match client_limit.max(subject_limit) {
            Some(retry_after) => Err(retry_after),
            None => Ok(()),
        }
    }

    fn failed(&self, subject: &K, client: Option<IpAddr>, now: Instant) {
        let mut failures = lock(&self.failures);
        if failures.by_client.len() >= REMEMBERED || failures.by_subject.len() >= REMEMBERED {
            failures.by_subject.retain(|_, w| w.current(now));
            failures.by_client.retain(|_, w| w.current(now));
        }
        let bump = |w: &mut Window| {
            if w.current(now) {
                w.failures += 1;
            } else {
                *w = Window {
                    started: now,
                    failures: 1,
                };
            }
        };
        let first = Window {
            started: now,
            failures: 1,
        };
        if let Some(w) = failures.by_subject.get_mut(subject) {
            bump(w);
        } else if failures.by_subject.len() < REMEMBERED {
            failures.by_subject.insert(subject.clone(), first);
        }
        let at = (subject.clone(), client);
        if let Some(w) = failures.by_client.get_mut(&at) {
            bump(w);
        } else if failures.by_client.len() < REMEMBERED {
            failures.by_client.insert(at, first);
        }
    }
}

pub(crate) struct Passwords {
    /// For checking guesses.
    hashing: Arc<Semaphore>,
    /// For hashing the passwords that owners set: apart from the guesses'.
    setting: Arc<Semaphore>,
    /// For checking sign-ins: apart from link guesses'.
    signing_in: Arc<Semaphore>,
    links: Guesses<LinkKey>,
    /// By folded user name.
    accounts: Guesses<String>,
    argon2: Argon2<'static>,
    /// A hash that an unknown account's sign-in is checked against, so
    /// that it takes as long as a known one's.
    decoy: String,
}

impl Default for Passwords {
    fn default() -> Self {
        Self::new()
    }
}

impl Passwords {
    pub(crate) fn new() -> Self {
        Self::with_params(Params::default())
    }

    /// With other Argon2id costs than OWASP's (19 MiB, two passes), which
    /// hashing uses; a check always uses the hash's own.
    pub(crate) fn with_params(params: Params) -> Self {
        let argon2 = Argon2::new(Algorithm::Argon2id, Version::V0x13, params);
        let decoy = argon2
            .hash_password(&rand::random::<[u8; 16]>())
            .map(|h| h.to_string())
            .unwrap_or_default();
        Self {
            hashing: Arc::new(Semaphore::new(HASHING)),
            setting: Arc::new(Semaphore::new(HASHING)),
            signing_in: Arc::new(Semaphore::new(HASHING)),
            links: Guesses::new(PER_CLIENT, PER_LINK),
            accounts: Guesses::new(LOGIN_PER_CLIENT, LOGIN_PER_ACCOUNT),
            argon2,
            decoy,
        }
    }

    /// Runs `work` with this instance's Argon2 on the blocking pool, as one
    /// of the [`HASHING`] hashes allowed at once, or refuses it as busy.
    async fn hashing<T: Send + 'static>(
        self: &Arc<Self>,
        permits: &Arc<Semaphore>,
        work: impl FnOnce(&Argon2<'static>) -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let permit = permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| PasswordError::Busy {
                retry_after: BUSY_RETRY_SECS,
            })?;
        let this = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            work(&this.argon2)
        })
        .await
        .map_err(|e| PasswordError::Failed(e.to_string()))
    }

    /// Hashes a new password, with a fresh salt.
    pub(crate) async fn hash(
        self: &Arc<Self>,
        password: String,
    ) -> Result<PasswordHash, PasswordError> {
        let phc = self
            .hashing(&self.setting, move |argon2| {
                argon2
                    .hash_password(password.as_bytes())
                    .map(|h| h.to_string())
            })
            .await?
            .map_err(|e| PasswordError::Failed(e.to_string()))?;
        PasswordHash::from_stored(&phc)
            .ok_or_else(|| PasswordError::Failed("not an Argon2id hash".into()))
    }

    /// Whether `guess` is the password of the link `key`, whose hash is
    /// `hash`, for `client`. A refused guess is not hashed; a wrong one
    /// counts against the client and the link.
    pub(crate) async fn check(
        self: &Arc<Self>,
        key: &LinkKey,
        client: Option<IpAddr>,
        hash: &PasswordHash,
        guess: &[u8],
    ) -> Result<bool, PasswordError> {
        let now = Instant::now();
        let client = client.map(client_block);
        self.links
            .admit(key, client, now)
            .map_err(|retry_after| PasswordError::TooManyGuesses { retry_after })?;
        let phc = hash.as_str().to_owned();
        let guess = guess.to_vec();
        let right = self
            .hashing(&self.hashing, move |argon2| {
                // A stored hash that does not parse matches nothing: the
                // link stays locked rather than open.
                Phc::new(&phc).is_ok_and(|parsed| argon2.verify_password(&guess, &parsed).is_ok())
            })
            .await?;
        if !right {
            self.links.failed(key, client, Instant::now());
        }
        Ok(right)
    }

    /// Whether `guess` is the password of the account `account` (a folded
    /// user name), whose hash is `hash` (`None`: no such account, or no
    /// password, checked against a decoy so that it takes as long), for
    /// `client`. Bounded per account as link guesses are per link, and
    /// hashed under permits of its own.
    pub(crate) async fn check_login(
        self: &Arc<Self>,
        account: &str,
        client: Option<IpAddr>,
        hash: Option<&str>,
        guess: &[u8],
    ) -> Result<bool, PasswordError> {
        let now = Instant::now();
        let client = client.map(client_block);
        let account = account.to_owned();
        self.accounts
            .admit(&account, client, now)
            .map_err(|retry_after| PasswordError::TooManyGuesses { retry_after })?;
        let known = hash.is_some();
        let phc = hash.unwrap_or(&self.decoy).to_owned();
        let guess = guess.to_vec();
        let right = self
            .hashing(&self.signing_in, move |argon2| {
                Phc::new(&phc).is_ok_and(|parsed| argon2.verify_password(&guess, &parsed).is_ok())
            })
            .await?
            && known;
        if !right {
            self.accounts.failed(&account, client, Instant::now());
        }
        Ok(right)
    }
}

/// What wrong YOURLS signatures count under, among the accounts' guesses:
/// the timed form names no key, so each try is one against every key. No
/// account's folded name holds a NUL.
const SIGNATURES: &str = "\0yourls signature";

impl Passwords {
    /// Whether `client` may try a YOURLS signature now, under the bounds
    /// of sign-ins.
    pub(crate) fn admit_signature(&self, client: Option<IpAddr>) -> Result<(), PasswordError> {
        self.accounts
            .admit(
                &SIGNATURES.to_owned(),
                client.map(client_block),
                Instant::now(),
            )
            .map_err(|retry_after| PasswordError::TooManyGuesses { retry_after })
    }

    /// A wrong signature from `client`.
    pub(crate) fn failed_signature(&self, client: Option<IpAddr>) {
        self.accounts.failed(
            &SIGNATURES.to_owned(),
            client.map(client_block),
            Instant::now(),
        );
    }
}

/// Whether `phc` is a hash this server could have made: Argon2id, version
/// 19, its own costs and output length, with a salt. An imported hash
/// with other costs could take gigabytes and minutes to check (and hold a
/// hashing permit all that time), or be cheap to guess.
pub(crate) fn is_servers_own(phc: &str) -> Result<(), String> {
    let parsed = Phc::new(phc).map_err(|_| "not an Argon2id hash in PHC form".to_owned())?;
    if parsed.algorithm.as_str() != "argon2id" {
        return Err(format!("'{}' is not argon2id", parsed.algorithm.as_str()));
    }
    if parsed.version != Some(u32::from(Version::V0x13)) {
        return Err("an Argon2id hash must be of version 19".into());
    }
    let params = Params::try_from(&parsed).map_err(|e| format!("its parameters: {e}"))?;
    let own = Params::default();
    let same = params.m_cost() == own.m_cost()
        && params.t_cost() == own.t_cost()
        && params.p_cost() == own.p_cost()
        && params.output_len().unwrap_or(Params::DEFAULT_OUTPUT_LEN) == Params::DEFAULT_OUTPUT_LEN;
    if !same || parsed.salt.is_none() || parsed.hash.is_none() {
        return Err(format!(
            "m={},t={},p={} with a salt and a {}-byte hash is what this server makes and \
             accepts (this one: m={},t={},p={})",
            own.m_cost(),
            own.t_cost(),
            own.p_cost(),
            Params::DEFAULT_OUTPUT_LEN,
            params.m_cost(),
            params.t_cost(),
            params.p_cost()
        ));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{DomainId, ShortCode};

    fn cheap() -> Arc<Passwords> {
        Arc::new(Passwords::with_params(
            Params::new(1024, 1, 1, None).expect("params"),
        ))
    }

    fn key(code: &str) -> LinkKey {
        LinkKey::new(DomainId::DEFAULT, ShortCode::parse(code).expect("code"))
    }

    #[tokio::test]
    async fn a_hash_checks_its_password_only() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        assert!(hash.as_str().starts_with("$argon2id$v=19$"));
        let k = key("abc");
        assert!(p.check(&k, None, &hash, b"sesame").await.expect("checked"));
        assert!(!p.check(&k, None, &hash, b"Sesame").await.expect("checked"));
    }

    #[tokio::test]
    async fn only_a_hash_this_server_could_have_made_is_taken() {
        let own = Arc::new(Passwords::new())
            .hash("sesame".into())
            .await
            .expect("hashed");
        assert_eq!(is_servers_own(own.as_str()), Ok(()));
        let cheap = cheap().hash("sesame".into()).await.expect("hashed");
        assert!(is_servers_own(cheap.as_str()).is_err(), "m=1024,t=1");
        let salt_and_hash = own.as_str().rsplitn(3, '$').collect::<Vec<_>>();
        for params in [
            "m=4194304,t=4294967295,p=1",
            "m=8,t=1,p=1",
            "m=19456,t=2,p=4",
        ] {
            let forged = format!(
                "$argon2id$v=19${params}${}${}",
                salt_and_hash[1], salt_and_hash[0]
            );
            assert!(is_servers_own(&forged).is_err(), "{forged}");
        }
        let argon2i = own.as_str().replacen("$argon2id$", "$argon2i$", 1);
        assert!(is_servers_own(&argon2i).is_err());
        let old = own.as_str().replacen("v=19", "v=16", 1);
        assert!(is_servers_own(&old).is_err());
    }

    #[tokio::test]
    async fn a_client_gets_five_wrong_guesses_then_waits() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let k = key("abc");
        let me = Some(IpAddr::from([192, 0, 2, 1]));
        for _ in 0..PER_CLIENT {
            assert_eq!(p.check(&k, me, &hash, b"nope").await, Ok(false));
        }
        // Refused before hashing, even the right password.
        let refused = p.check(&k, me, &hash, b"sesame").await;
        assert!(
            matches!(refused, Err(PasswordError::TooManyGuesses { retry_after }) if retry_after > 800)
        );
        // Another client, and the same client on another link, go on.
        let other = Some(IpAddr::from([192, 0, 2, 2]));
        assert_eq!(p.check(&k, other, &hash, b"sesame").await, Ok(true));
        assert_eq!(p.check(&key("def"), me, &hash, b"sesame").await, Ok(true));
    }

    #[tokio::test]
    async fn a_link_takes_a_hundred_wrong_guesses_then_only_clean_clients() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let k = key("abc");
        let guesser = |i: u32| Some(IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]));
        for i in 0..PER_LINK / LOCKED_ALLOWANCE {
            for _ in 0..LOCKED_ALLOWANCE {
                assert_eq!(p.check(&k, guesser(i), &hash, b"nope").await, Ok(false));
            }
        }
        // Every guesser is refused now, even with the right password.
        assert!(matches!(
            p.check(&k, guesser(0), &hash, b"sesame").await,
            Err(PasswordError::TooManyGuesses { .. })
        ));
        // The owner, with no failures, is let through; and after one
        // mistyping, still.
        let owner = Some(IpAddr::from([192, 0, 2, 7]));
        assert_eq!(p.check(&k, owner, &hash, b"sesam").await, Ok(false));
        assert_eq!(p.check(&k, owner, &hash, b"sesame").await, Ok(true));
        // A client without a known address counts as a guesser.
        assert!(p.check(&k, None, &hash, b"sesame").await.is_err());
    }

    #[tokio::test]
    async fn an_ipv6_client_is_limited_by_its_64() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let k = key("abc");
        for i in 0..PER_CLIENT {
            let address: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().expect("v6");
            assert_eq!(p.check(&k, Some(address), &hash, b"nope").await, Ok(false));
        }
        let same_64: IpAddr = "2001:db8:1:2:ffff::1".parse().expect("v6");
        assert!(matches!(
            p.check(&k, Some(same_64), &hash, b"sesame").await,
            Err(PasswordError::TooManyGuesses { .. })
        ));
        let next_64: IpAddr = "2001:db8:1:3::1".parse().expect("v6");
        assert_eq!(p.check(&k, Some(next_64), &hash, b"sesame").await, Ok(true));
    }

    /// Guesses that hold every checking permit leave an owner's hashing
    /// free.
    #[tokio::test]
    async fn an_owners_hash_never_waits_for_guesses() {
        let p = cheap();
        let held: Vec<_> = (0..HASHING)
            .map(|_| p.hashing.clone().try_acquire_owned().expect("permit"))
            .collect();
        let hash = p
            .hash("sesame".into())
            .await
            .expect("hashed while guesses hash");
        assert!(matches!(
            p.check(&key("abc"), None, &hash, b"x").await,
            Err(PasswordError::Busy { .. })
        ));
        drop(held);
    }
}
