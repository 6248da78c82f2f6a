//! Passwords: hashing one (Argon2id, on the blocking pool) and checking a
//! guess, with guessing bounded, for links and for signing in.
//!
//! A guess is refused before it is hashed when:
//! - its client (an IPv6 client by its /64) has failed [`PER_CLIENT_TOTAL`]
//!   times within [`WINDOW`], on any links (or any accounts and YOURLS
//!   signatures together);
//! - the client has failed [`PER_CLIENT`] times on this link
//!   ([`LOGIN_PER_CLIENT`] on this account); names of no account share one
//!   such count per client;
//! - everyone together has failed [`PER_LINK`] times on the link
//!   ([`LOGIN_PER_ACCOUNT`] on the account), and the client is not one
//!   that got it right within [`TRUSTED_FOR`]: then a client with
//!   [`LOCKED_ALLOWANCE`] failures of its own is refused, and the other
//!   clients together get [`STRANGERS`] more guesses in that window, so
//!   that strangers cannot lock the owner out, nor a block of addresses
//!   guess on.
//!
//! The counts of clients are bounded tables that drop their oldest windows
//! when full, so that a client is never admitted as clean because the
//! table had no room for it; the counts of links and accounts hold only
//! those that exist (never made-up names). At most one hash is computed
//! for a client at once; at most [`HASHING`] guesses are hashed at once,
//! and a guess beyond them is refused, not queued. A sign-in to a name of
//! no account is hashed against a decoy, as long as a real one, under
//! [`DECOYS`] permits of its own, which a known account's sign-in never
//! waits for; an owner's writes hash under [`HASHING`] permits of their
//! own, which no flood of guesses can take.

use std::collections::{HashMap, HashSet};
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
/// Failed guesses everyone together may make on one link within [`WINDOW`]
/// before it is locked to all but the clients that know it.
pub(crate) const PER_LINK: u32 = 100;
pub(crate) const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Failed guesses a client may have made and still guess on a locked link
/// or account: the owner, who may mistype once, is let through; a guesser,
/// who has failed more, is not.
pub(crate) const LOCKED_ALLOWANCE: u32 = 2;
/// Failed guesses that clients together may still make on a locked link
/// or account within its window, beyond those who know it.
pub(crate) const STRANGERS: u32 = 20;
/// Failed guesses one client may make within [`WINDOW`] across every link,
/// and across every account and YOURLS signature.
pub(crate) const PER_CLIENT_TOTAL: u32 = 30;
/// How long a client that got a link's or an account's password right
/// keeps an allowance of its own on it while it is locked.
pub(crate) const TRUSTED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Failed sign-ins one client may make on one account within [`WINDOW`].
pub(crate) const LOGIN_PER_CLIENT: u32 = 10;
/// Failed sign-ins everyone together may make on one account within
/// [`WINDOW`] before it is locked to all but the clients that know it.
pub(crate) const LOGIN_PER_ACCOUNT: u32 = 100;
/// Hashes computed at once, of each kind (guesses on links; sign-ins of
/// known accounts; owners' new passwords).
pub(crate) const HASHING: usize = 2;
/// Decoy hashes (sign-ins to names of no account) computed at once.
pub(crate) const DECOYS: usize = 1;
/// Entries of each table of clients; when full, the oldest windows go.
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
    fn first(now: Instant) -> Self {
        Self {
            started: now,
            failures: 1,
        }
    }

    fn current(&self, now: Instant) -> bool {
        now.duration_since(self.started) < WINDOW
    }

    /// Seconds until the window ends, at least one.
    fn retry_after(&self, now: Instant) -> u32 {
        let left = WINDOW.saturating_sub(now.duration_since(self.started));
        u32::try_from(left.as_secs().max(1)).unwrap_or(u32::MAX)
    }

    /// One more failure, in a new window if this one is over.
    fn bump(&mut self, now: Instant) {
        if self.current(now) {
            self.failures = self.failures.saturating_add(1);
        } else {
            *self = Self::first(now);
        }
    }

    /// The seconds to wait when this window has reached `limit`.
    fn limited(this: Option<&Self>, limit: u32, now: Instant) -> Option<u32> {
        this.filter(|w| w.current(now) && w.failures >= limit)
            .map(|w| w.retry_after(now))
    }
}

/// A table of at most [`REMEMBERED`] entries that, when full, drops its
/// oldest entries (by `age`) to take a new one: a flood of new clients
/// pushes out old windows, and is itself counted.
struct Bounded<K, V> {
    map: HashMap<K, V>,
}

impl<K: std::hash::Hash + Eq + Clone, V> Bounded<K, V> {
    fn new() -> Self {
        Self {
            map: HashMap::new(),
        }
    }

    /// The entry of `key`, made room for (and made by `new`) if missing.
    fn entry(&mut self, key: K, age: impl Fn(&V) -> Instant, new: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(&key) && self.map.len() >= REMEMBERED {
            // An eighth at a time, so that a flood sorts once per 8,192
            // newcomers, not once each.
            let mut ages: Vec<(Instant, K)> =
                self.map.iter().map(|(k, v)| (age(v), k.clone())).collect();
            let cut = REMEMBERED / 8;
            ages.select_nth_unstable_by_key(cut, |(at, _)| *at);
            for (_, old) in ages.into_iter().take(cut) {
                self.map.remove(&old);
            }
        }
        self.map.entry(key).or_insert_with(new)
    }
}

/// A link's or an account's failures in its window, and how many of them
/// came from clients that did not know it once it was locked.
struct Subject {
    window: Window,
    strangers: u32,
}

/// The failures on one kind of subject (links; accounts and signatures),
/// by subject, by subject and client, and by client, with the limits on
/// each, and the clients that got a subject right.
struct Guesses<K> {
    failures: Mutex<Failures<K>>,
    per_client: u32,
    per_subject: u32,
}

/// A client's block (its address, an IPv6 one's /64); `None`: no address
/// known, and all such clients count as one.
type Client = Option<IpAddr>;

struct Failures<K> {
    /// Only subjects that exist: links with a password, known accounts.
    subjects: HashMap<K, Subject>,
    /// When `subjects` is next rid of its ended windows.
    prune_at: usize,
    /// `None` as the subject: every name of no account, per client.
    pairs: Bounded<(Option<K>, Client), Window>,
    clients: Bounded<Client, Window>,
    trusted: Bounded<(K, Client), Instant>,
    /// Clients whose guess is being hashed now.
    hashing: HashSet<Client>,
}

impl<K: std::hash::Hash + Eq + Clone> Guesses<K> {
    fn new(per_client: u32, per_subject: u32) -> Self {
        Self {
            failures: Mutex::new(Failures {
                subjects: HashMap::new(),
                prune_at: REMEMBERED,
                pairs: Bounded::new(),
                clients: Bounded::new(),
                trusted: Bounded::new(),
                hashing: HashSet::new(),
            }),
            per_client,
            per_subject,
        }
    }

    /// Whether `client` may guess on `subject` (`None`: a name of no
    /// account) now; else how long to wait.
    fn admit(&self, subject: Option<&K>, client: Client, now: Instant) -> Result<(), u32> {
        let failures = lock(&self.failures);
        let own = failures.pairs.map.get(&(subject.cloned(), client));
        let mut wait = Window::limited(failures.clients.map.get(&client), PER_CLIENT_TOTAL, now)
            .max(Window::limited(own, self.per_client, now));
        if let Some(subject) = subject
            && let Some(locked) = failures
                .subjects
                .get(subject)
                .filter(|s| s.window.current(now) && s.window.failures >= self.per_subject)
            && !failures.trusts(subject, client, now)
        {
            let guesser = client.is_none()
                || Window::limited(own, LOCKED_ALLOWANCE, now).is_some()
                || locked.strangers >= STRANGERS;
            if guesser {
                wait = wait.max(Some(locked.window.retry_after(now)));
            }
        }
        match wait {
            Some(retry_after) => Err(retry_after),
            None => Ok(()),
        }
    }

    fn failed(&self, subject: Option<&K>, client: Client, now: Instant) {
        let mut failures = lock(&self.failures);
        let age = |w: &Window| w.started;
        failures
            .clients
            .entry(client, age, || Window {
                started: now,
                failures: 0,
            })
            .bump(now);
        failures
            .pairs
            .entry((subject.cloned(), client), age, || Window {
                started: now,
                failures: 0,
            })
            .bump(now);
        let Some(subject) = subject else {
            return;
        };
        let stranger = !failures.trusts(subject, client, now);
        if failures.subjects.len() >= failures.prune_at {
            failures.subjects.retain(|_, s| s.window.current(now));
            failures.prune_at = REMEMBERED.max(failures.subjects.len() * 2);
        }
        let per_subject = self.per_subject;
        match failures.subjects.get_mut(subject) {
            Some(s) if s.window.current(now) => {
                if stranger && s.window.failures >= per_subject {
                    s.strangers = s.strangers.saturating_add(1);
                }
                s.window.bump(now);
            }
            Some(s) => {
                *s = Subject {
                    window: Window::first(now),
                    strangers: 0,
                }
            }
            None => {
                failures.subjects.insert(
                    subject.clone(),
                    Subject {
                        window: Window::first(now),
                        strangers: 0,
                    },
                );
            }
        }
    }

    /// `client` got `subject` right: it keeps an allowance of its own there
    /// for [`TRUSTED_FOR`].
    fn succeeded(&self, subject: &K, client: Client, now: Instant) {
        if client.is_none() {
            return;
        }
        let mut failures = lock(&self.failures);
        *failures
            .trusted
            .entry((subject.clone(), client), |at| *at, || now) = now;
    }

    /// Marks `client` as hashing a guess now, unless it already is.
    fn start_hashing(self: &Arc<Self>, client: Client) -> Option<Hashing<K>> {
        lock(&self.failures)
            .hashing
            .insert(client)
            .then(|| Hashing {
                guesses: Arc::clone(self),
                client,
            })
    }
}

impl<K: std::hash::Hash + Eq + Clone> Failures<K> {
    fn trusts(&self, subject: &K, client: Client, now: Instant) -> bool {
        client.is_some()
            && self
                .trusted
                .map
                .get(&(subject.clone(), client))
                .is_some_and(|at| now.duration_since(*at) < TRUSTED_FOR)
    }
}

/// A client's one hash at a time; dropped when it is done.
struct Hashing<K: std::hash::Hash + Eq + Clone> {
    guesses: Arc<Guesses<K>>,
    client: Client,
}

impl<K: std::hash::Hash + Eq + Clone> Drop for Hashing<K> {
    fn drop(&mut self) {
        lock(&self.guesses.failures).hashing.remove(&self.client);
    }
}

pub(crate) struct Passwords {
    /// For checking guesses.
    hashing: Arc<Semaphore>,
    /// For hashing the passwords that owners set: apart from the guesses'.
    setting: Arc<Semaphore>,
    /// For checking sign-ins of known accounts: apart from link guesses'.
    signing_in: Arc<Semaphore>,
    /// For checking sign-ins of names of no account against the decoy.
    decoys: Arc<Semaphore>,
    links: Arc<Guesses<LinkKey>>,
    /// By folded user name, with YOURLS signatures under [`SIGNATURES`].
    accounts: Arc<Guesses<String>>,
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
            decoys: Arc::new(Semaphore::new(DECOYS)),
            links: Arc::new(Guesses::new(PER_CLIENT, PER_LINK)),
            accounts: Arc::new(Guesses::new(LOGIN_PER_CLIENT, LOGIN_PER_ACCOUNT)),
            argon2,
            decoy,
        }
    }

    /// Runs `work` with this instance's Argon2 on the blocking pool, under
    /// one of `permits`, or refuses it as busy.
    async fn hashing<T: Send + 'static>(
        self: &Arc<Self>,
        permits: &Arc<Semaphore>,
        work: impl FnOnce(&Argon2<'static>) -> T + Send + 'static,
    ) -> Result<T, PasswordError> {
        let permit = permits.clone().try_acquire_owned().map_err(|_| busy())?;
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
        let client = client.map(client_block);
        self.links
            .admit(Some(key), client, Instant::now())
            .map_err(|retry_after| PasswordError::TooManyGuesses { retry_after })?;
        let _one = self.links.start_hashing(client).ok_or_else(busy)?;
        let phc = hash.as_str().to_owned();
        let guess = guess.to_vec();
        let right = self
            .hashing(&self.hashing, move |argon2| {
                // A stored hash that does not parse matches nothing: the
                // link stays locked rather than open.
                Phc::new(&phc).is_ok_and(|parsed| argon2.verify_password(&guess, &parsed).is_ok())
            })
            .await?;
        if right {
            self.links.succeeded(key, client, Instant::now());
        } else {
            self.links.failed(Some(key), client, Instant::now());
        }
        Ok(right)
    }

    /// Whether `guess` is the password of the account `account` (a folded
    /// user name), whose hash is `hash` (`None`: no such account, or no
    /// password, checked against a decoy so that it takes as long), for
    /// `client`. Bounded per account as link guesses are per link, and
    /// hashed under permits of its own: a known account's apart from the
    /// decoys'.
    pub(crate) async fn check_login(
        self: &Arc<Self>,
        account: &str,
        client: Option<IpAddr>,
        hash: Option<&str>,
        guess: &[u8],
    ) -> Result<bool, PasswordError> {
        let client = client.map(client_block);
        let account = account.to_owned();
        let known = hash.is_some();
        let subject = known.then_some(&account);
        self.accounts
            .admit(subject, client, Instant::now())
            .map_err(|retry_after| PasswordError::TooManyGuesses { retry_after })?;
        let _one = self.accounts.start_hashing(client).ok_or_else(busy)?;
        let phc = hash.unwrap_or(&self.decoy).to_owned();
        let permits = if known {
            &self.signing_in
        } else {
            &self.decoys
        };
        let guess = guess.to_vec();
        let right = self
            .hashing(permits, move |argon2| {
                Phc::new(&phc).is_ok_and(|parsed| argon2.verify_password(&guess, &parsed).is_ok())
            })
            .await?
            && known;
        if right {
            self.accounts.succeeded(&account, client, Instant::now());
        } else {
            self.accounts.failed(subject, client, Instant::now());
        }
        Ok(right)
    }
}

fn busy() -> PasswordError {
    PasswordError::Busy {
        retry_after: BUSY_RETRY_SECS,
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
                Some(&SIGNATURES.to_owned()),
                client.map(client_block),
                Instant::now(),
            )
            .map_err(|retry_after| PasswordError::TooManyGuesses { retry_after })
    }

    /// A wrong signature from `client`.
    pub(crate) fn failed_signature(&self, client: Option<IpAddr>) {
        self.accounts.failed(
            Some(&SIGNATURES.to_owned()),
            client.map(client_block),
            Instant::now(),
        );
    }

    /// A right signature from `client`: it keeps signing while strangers'
    /// wrong ones lock the rest out.
    pub(crate) fn right_signature(&self, client: Option<IpAddr>) {
        self.accounts.succeeded(
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

    fn v4(i: u32) -> Option<IpAddr> {
        Some(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000_u32 + i)))
    }

    /// Fills the table of clients (and of clients by account) past its
    /// bound with one wrong signature from each of as many addresses.
    fn flood_signatures(p: &Passwords) {
        for i in 0..(REMEMBERED as u32 + 4_000) {
            p.failed_signature(v4(i));
        }
    }

    #[tokio::test]
    async fn a_full_table_admits_no_new_client_as_clean() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        flood_signatures(&p);
        let me = Some(IpAddr::from([192, 0, 2, 9]));
        let mut refused_at = None;
        for i in 0..60 {
            match p
                .check_login("admin", me, Some(hash.as_str()), b"nope")
                .await
            {
                Ok(false) => {}
                Err(PasswordError::TooManyGuesses { .. }) => {
                    refused_at = Some(i);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(refused_at, Some(LOGIN_PER_CLIENT));
        // The flood is bounded by the table: nothing past it is kept.
        let failures = lock(&p.accounts.failures);
        assert!(failures.clients.map.len() <= REMEMBERED);
        assert!(failures.pairs.map.len() <= REMEMBERED);
    }

    #[tokio::test]
    async fn made_up_names_share_one_count_per_client_and_fill_no_table_of_accounts() {
        let p = cheap();
        let me = Some(IpAddr::from([192, 0, 2, 9]));
        for i in 0..LOGIN_PER_CLIENT {
            let name = format!("nobody-{i}");
            assert_eq!(p.check_login(&name, me, None, b"x").await, Ok(false));
        }
        assert!(matches!(
            p.check_login("nobody-else", me, None, b"x").await,
            Err(PasswordError::TooManyGuesses { .. })
        ));
        for i in 0..1_000 {
            p.accounts.failed(None, v4(i), Instant::now());
        }
        assert!(lock(&p.accounts.failures).subjects.is_empty());
    }

    #[tokio::test]
    async fn a_client_gets_thirty_failures_across_accounts_and_signatures() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let me = Some(IpAddr::from([192, 0, 2, 9]));
        for i in 0..PER_CLIENT_TOTAL / 2 {
            let account = format!("user-{i}");
            assert_eq!(
                p.check_login(&account, me, Some(hash.as_str()), b"nope")
                    .await,
                Ok(false)
            );
            p.failed_signature(me);
        }
        assert!(p.admit_signature(me).is_err());
        assert!(matches!(
            p.check_login("user-99", me, Some(hash.as_str()), b"sesame")
                .await,
            Err(PasswordError::TooManyGuesses { .. })
        ));
        // Another /64 of the same /48 is another client.
        let v6 = |s: &str| Some(s.parse::<IpAddr>().expect("v6"));
        for i in 0..PER_CLIENT_TOTAL {
            p.failed_signature(v6(&format!("2001:db8:1:2::{:x}", i + 1)));
        }
        assert!(p.admit_signature(v6("2001:db8:1:2:ffff::1")).is_err());
        assert!(p.admit_signature(v6("2001:db8:1:3::1")).is_ok());
    }

    #[tokio::test]
    async fn a_locked_account_takes_twenty_more_from_strangers_and_keeps_its_owners_allowance() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let owner = Some(IpAddr::from([192, 0, 2, 7]));
        assert_eq!(
            p.check_login("admin", owner, Some(hash.as_str()), b"sesame")
                .await,
            Ok(true)
        );
        let mut i = 0;
        for _ in 0..LOGIN_PER_ACCOUNT / LOCKED_ALLOWANCE {
            for _ in 0..LOCKED_ALLOWANCE {
                assert_eq!(
                    p.check_login("admin", v4(i), Some(hash.as_str()), b"nope")
                        .await,
                    Ok(false)
                );
            }
            i += 1;
        }
        // Locked: each new client gets one guess until twenty are spent,
        // then none at all, however many addresses it has.
        for _ in 0..STRANGERS {
            assert_eq!(
                p.check_login("admin", v4(i), Some(hash.as_str()), b"nope")
                    .await,
                Ok(false)
            );
            i += 1;
        }
        for _ in 0..50 {
            assert!(matches!(
                p.check_login("admin", v4(i), Some(hash.as_str()), b"sesame")
                    .await,
                Err(PasswordError::TooManyGuesses { .. })
            ));
            i += 1;
        }
        // The client that signed in before still does, after a mistyping.
        assert_eq!(
            p.check_login("admin", owner, Some(hash.as_str()), b"sesam")
                .await,
            Ok(false)
        );
        assert_eq!(
            p.check_login("admin", owner, Some(hash.as_str()), b"sesame")
                .await,
            Ok(true)
        );
        // Another account is not locked.
        assert_eq!(
            p.check_login("ann", v4(i), Some(hash.as_str()), b"sesame")
                .await,
            Ok(true)
        );
    }

    #[tokio::test]
    async fn a_locked_link_takes_twenty_more_from_strangers() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let k = key("abc");
        let owner = Some(IpAddr::from([192, 0, 2, 7]));
        assert_eq!(p.check(&k, owner, &hash, b"sesame").await, Ok(true));
        let mut i = 0;
        for _ in 0..PER_LINK {
            assert_eq!(p.check(&k, v4(i), &hash, b"nope").await, Ok(false));
            i += 1;
        }
        for _ in 0..STRANGERS {
            assert_eq!(p.check(&k, v4(i), &hash, b"nope").await, Ok(false));
            i += 1;
        }
        assert!(p.check(&k, v4(i), &hash, b"sesame").await.is_err());
        assert_eq!(p.check(&k, owner, &hash, b"sesame").await, Ok(true));
    }

    /// Decoy hashes for made-up names never take a known account's
    /// permits, and a client hashes one guess at a time.
    #[tokio::test]
    async fn decoys_leave_known_accounts_their_permits_and_a_client_hashes_once_at_a_time() {
        let p = cheap();
        let hash = p.hash("sesame".into()).await.expect("hashed");
        let held: Vec<_> = (0..DECOYS)
            .map(|_| p.decoys.clone().try_acquire_owned().expect("permit"))
            .collect();
        let me = Some(IpAddr::from([192, 0, 2, 9]));
        assert!(matches!(
            p.check_login("nobody", me, None, b"x").await,
            Err(PasswordError::Busy { .. })
        ));
        for i in 0..10 {
            assert_eq!(
                p.check_login("admin", v4(i), Some(hash.as_str()), b"sesame")
                    .await,
                Ok(true)
            );
        }
        drop(held);
        let one = p
            .accounts
            .start_hashing(me.map(client_block))
            .expect("free");
        assert!(matches!(
            p.check_login("admin", me, Some(hash.as_str()), b"sesame")
                .await,
            Err(PasswordError::Busy { .. })
        ));
        assert_eq!(
            p.check_login("admin", v4(99), Some(hash.as_str()), b"sesame")
                .await,
            Ok(true)
        );
        drop(one);
        assert_eq!(
            p.check_login("admin", me, Some(hash.as_str()), b"sesame")
                .await,
            Ok(true)
        );
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
