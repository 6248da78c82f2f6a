//! API keys: making them, and recognising them on requests as the user
//! they belong to, with that user's role.
//!
//! A key is `ll_` and 32 random base62 characters (about 190 bits); only
//! its SHA-256 is stored. The running server keeps every key's hash in
//! memory and reloads them from the store every second, so that a key
//! created or revoked by `litelink keys` beside it counts within a second.
//! When a key was last used is written at most once a minute per key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use rand::distr::{Alphanumeric, SampleString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::domain::{DomainId, KeyId, Owner, Role, Timestamp, UserId};
use crate::store::{ApiKey, LinkStore, StoreError};

/// How often keys are reloaded from the store.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Least time between two writes of one key's last use.
pub(crate) const TOUCH_EVERY: Duration = Duration::from_secs(60);

const PREFIX: &str = "ll_";
const SECRET_LEN: usize = 32;

/// A caller that presented a valid key: the user it acts as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Principal {
    pub user: UserId,
    /// The user's name.
    pub name: String,
    pub role: Role,
    /// The one domain this caller works on; `None`: every domain.
    pub domain: Option<DomainId>,
    /// How the caller proved who they are.
    pub via: Via,
}

/// How a caller proved who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Via {
    /// An API key.
    Key(KeyId),
    /// A signed-in session's cookie; `must_change`: the user has only a
    /// one-time password, and may do nothing but change it.
    Session { must_change: bool },
    /// A local account's name and password, sent with the request (the
    /// YOURLS API's `username` and `password`).
    Password,
}

impl Principal {
    /// The owner of links this caller creates.
    pub(crate) fn owner(&self) -> Owner {
        Owner {
            id: self.user,
            name: self.name.clone(),
        }
    }

    pub(crate) fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Whether this caller reads every link (an admin or a viewer), not
    /// only their own.
    pub(crate) fn reads_all(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Viewer)
    }
}

/// Why a key was refused. Unknown and revoked keys get the same answer:
/// a different one would confirm that a leaked string was once a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum AuthError {
    #[error("invalid API key")]
    Unknown,
    #[error("invalid API key")]
    Revoked,
}

/// An unknown key has the keys read again (so that a key made by
/// `litelink keys create` beside the server works as soon as it is
/// printed), at most once in this long.
const RELOAD_AT_MOST_EVERY: Duration = Duration::from_millis(100);

/// Longest key name, in bytes.
pub(crate) const MAX_NAME_BYTES: usize = 100;

/// Whether `name` may name a key: 1 to [`MAX_NAME_BYTES`] bytes, not only
/// white space, and no control or invisible formatting character (a
/// right-to-left override would show another name in `keys list`).
pub fn check_name(name: &str) -> Result<(), String> {
    let formatting = crate::domain::user::is_hidden_formatting;
    if name.trim().is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!("a key name is 1 to {MAX_NAME_BYTES} bytes"));
    }
    if let Some(c) = name.chars().find(|&c| c.is_control() || formatting(c)) {
        return Err(format!(
            "a key name may not hold control or formatting characters (U+{:04X})",
            u32::from(c)
        ));
    }
    // Mixed scripts (UTS #39): the letters must be of one script, or Latin
    // with the scripts written beside it in Chinese, Japanese or Korean,
    // as its "highly restrictive" level allows. `аdmin` with a Cyrillic а
    // would pass for `admin` in `keys list`. Spaces, digits and
    // punctuation belong to every script and are not judged.
    use unicode_security::mixed_script::AugmentedScriptSet;
    let letters: String = name.chars().filter(|c| c.is_alphabetic()).collect();
    if AugmentedScriptSet::for_str(&letters).is_empty() {
        let latin = AugmentedScriptSet::for_str("a");
        let rest: String = letters
            .chars()
            .filter(|c| {
                let mut set = AugmentedScriptSet::for_str(c.encode_utf8(&mut [0; 4]));
                set.intersect_with(latin);
                set.is_empty()
            })
            .collect();
        let east_asian = AugmentedScriptSet::for_str(&rest);
        if !(east_asian.hanb || east_asian.jpan || east_asian.kore) {
            return Err(
                "a key name may not mix scripts, such as Latin and Cyrillic letters that look alike"
                    .into(),
            );
        }
    }
    Ok(())
}

/// A new key: the secret to show once, and the hash to store.
pub fn new_secret() -> (String, [u8; 32]) {
    let secret = format!(
        "{PREFIX}{}",
        Alphanumeric.sample_string(&mut rand::rng(), SECRET_LEN)
    );
    let hash = hash(&secret);
    (secret, hash)
}

pub(crate) fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// The secret of the YOURLS API's signature tokens
/// (`--yourls-secret-file`). A key's token is an HMAC of its id and hash
/// under it, as YOURLS derives its token from its cookie key and the user
/// name: a secret of its own, apart from the key, and kept out of the
/// store, so that a leaked database or backup signs nothing.
#[derive(Clone)]
pub struct YourlsSecret(Arc<[u8]>);

/// Fewest bytes a YOURLS secret has.
pub const MIN_YOURLS_SECRET_BYTES: usize = 16;

impl std::fmt::Debug for YourlsSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("YourlsSecret(..)")
    }
}

impl YourlsSecret {
    /// The secret in `path`, without the white space around it.
    pub fn read(path: &std::path::Path) -> Result<Self, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read the YOURLS secret {}: {e}", path.display()))?;
        let secret = text.trim_ascii();
        if secret.len() < MIN_YOURLS_SECRET_BYTES {
            return Err(format!(
                "the YOURLS secret {} is shorter than {MIN_YOURLS_SECRET_BYTES} bytes",
                path.display()
            ));
        }
        Ok(Self(secret.into()))
    }

    /// The signature token of the key `id`, whose secret hashes to `hash`:
    /// 32 hex characters, as YOURLS's own. The hash is in it so that a
    /// key made later under a reused id (a store rebuilt) gets a token of
    /// its own.
    pub fn token(&self, id: KeyId, hash: &[u8; 32]) -> String {
        use hmac::{KeyInit, Mac};
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(b"litelink yourls signature\0");
        mac.update(&id.0.to_be_bytes());
        mac.update(hash);
        let tag = mac.finalize().into_bytes();
        tag[..16].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// The YOURLS API's signatures, when they are on.
#[derive(Debug, Clone)]
pub struct YourlsSigning {
    pub secret: YourlsSecret,
    /// How far from now a timed signature's timestamp may be.
    pub window: Duration,
}

/// The digests the YOURLS API's timed signature may name (`hash=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum SignatureHash {
    Md5,
    Sha1,
    Sha256,
    Sha384,
    Sha512,
}

impl SignatureHash {
    /// The digest of `a` then `b`, in lower-case hex (PHP's `hash()`).
    fn hex(self, a: &[u8], b: &[u8]) -> String {
        fn run<D: Digest>(a: &[u8], b: &[u8]) -> String {
            let mut d = D::new();
            d.update(a);
            d.update(b);
            d.finalize().iter().map(|b| format!("{b:02x}")).collect()
        }
        match self {
            Self::Md5 => run::<md5::Md5>(a, b),
            Self::Sha1 => run::<sha1::Sha1>(a, b),
            Self::Sha256 => run::<Sha256>(a, b),
            Self::Sha384 => run::<sha2::Sha384>(a, b),
            Self::Sha512 => run::<sha2::Sha512>(a, b),
        }
    }
}

/// The integer PHP's `(int)` reads at the start of `text` (0 for none).
pub(crate) fn php_int(text: &str) -> i64 {
    let text = text.trim_start();
    let (sign, digits) = match text.as_bytes().first() {
        Some(b'-') => (-1, &text[1..]),
        Some(b'+') => (1, &text[1..]),
        _ => (1, text),
    };
    let end = digits
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(digits.len());
    // PHP stops at the largest integer too.
    digits[..end]
        .parse::<i64>()
        .map(|n| sign * n)
        .unwrap_or(if end == 0 { 0 } else { sign * i64::MAX })
}

pub(crate) struct KeyRegistry {
    store: Arc<dyn LinkStore>,
    /// Signature tokens are on when this is set.
    yourls: Option<YourlsSigning>,
    keys: RwLock<Arc<Vec<ApiKey>>>,
    /// Keys used since their last use was written, and when.
    used: Mutex<HashMap<KeyId, Timestamp>>,
    touched: Mutex<HashMap<KeyId, Instant>>,
    /// When the last reload for an unknown key began; one such reload at
    /// a time.
    reloaded: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl KeyRegistry {
    pub(crate) async fn load(
        store: Arc<dyn LinkStore>,
        yourls: Option<YourlsSigning>,
    ) -> Result<Self, StoreError> {
        let keys = store.keys().await?;
        Ok(Self {
            store,
            yourls,
            keys: RwLock::new(Arc::new(keys)),
            used: Mutex::default(),
            touched: Mutex::default(),
            reloaded: tokio::sync::Mutex::new(None),
        })
    }

    /// Whether any key exists (revoked or not).
    pub(crate) fn any(&self) -> bool {
        !self.snapshot().is_empty()
    }

    fn snapshot(&self) -> Arc<Vec<ApiKey>> {
        Arc::clone(&self.keys.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The key `secret` names. Every stored hash is compared in constant
    /// time, so the answer's timing says nothing about near misses.
    pub(crate) fn authenticate(&self, secret: &str) -> Result<Principal, AuthError> {
        let presented = hash(secret);
        let keys = self.snapshot();
        let mut found = None;
        for key in keys.iter() {
            if bool::from(key.hash.ct_eq(&presented)) {
                found = Some(key);
            }
        }
        self.principal_of(found.ok_or(AuthError::Unknown)?)
    }

    /// Whether signature tokens are on (`--yourls-secret-file`).
    pub(crate) fn signs(&self) -> bool {
        self.yourls.is_some()
    }

    /// The signature token of `key`, when tokens are on.
    pub(crate) fn token_of(&self, key: &ApiKey) -> Option<String> {
        self.yourls
            .as_ref()
            .map(|s| s.secret.token(key.id, &key.hash))
    }

    /// The key whose signature token is `signature` (the YOURLS API's
    /// `signature=`), or, with `timed` (a timestamp and a digest), whose
    /// token hashed after or before the timestamp is, for a timestamp
    /// within the window of now (read as PHP's `(int)` reads it). Every
    /// key is checked, in constant time, whatever matches.
    pub(crate) fn authenticate_signature(
        &self,
        signature: &str,
        timed: Option<(&str, SignatureHash)>,
    ) -> Result<Principal, AuthError> {
        let Some(signing) = &self.yourls else {
            return Err(AuthError::Unknown);
        };
        if let Some((at, _)) = timed {
            let now = Timestamp::now().millis() / 1000;
            let window = i64::try_from(signing.window.as_secs()).unwrap_or(i64::MAX);
            if php_int(at).abs_diff(now) >= window.unsigned_abs() {
                return Err(AuthError::Unknown);
            }
        }
        let secret = &signing.secret;
        let presented = signature.to_ascii_lowercase();
        let presented = presented.as_bytes();
        let keys = self.snapshot();
        let mut found = None;
        for key in keys.iter() {
            let token = secret.token(key.id, &key.hash);
            let matches = match timed {
                None => token.as_bytes().ct_eq(presented),
                Some((at, hash)) => {
                    let after = hash.hex(at.as_bytes(), token.as_bytes());
                    let before = hash.hex(token.as_bytes(), at.as_bytes());
                    after.as_bytes().ct_eq(presented) | before.as_bytes().ct_eq(presented)
                }
            };
            if bool::from(matches) {
                found = Some(key);
            }
        }
        self.principal_of(found.ok_or(AuthError::Unknown)?)
    }

    /// What a found key acts as, if it still works.
    fn principal_of(&self, key: &ApiKey) -> Result<Principal, AuthError> {
        // A disabled user's keys stop with them.
        if key.revoked_at.is_some() || key.user_disabled {
            return Err(AuthError::Revoked);
        }
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.id, Timestamp::now());
        Ok(Principal {
            user: key.user,
            name: key.user_name.clone(),
            role: key.role,
            domain: key.domain,
            via: Via::Key(key.id),
        })
    }

    /// [`Self::authenticate`], and for a key not known, once more after
    /// the keys were read again: by a reload begun after this request came
    /// (reloads for unknown keys run one at a time, at most once in
    /// [`RELOAD_AT_MOST_EVERY`], so a request waits that long at most for
    /// its turn). A store that cannot be read leaves the keys loaded.
    pub(crate) async fn authenticate_fresh(&self, secret: &str) -> Result<Principal, AuthError> {
        match self.authenticate(secret) {
            Err(AuthError::Unknown) => {}
            known => return known,
        }
        let asked = tokio::time::Instant::now();
        {
            let mut reloaded = self.reloaded.lock().await;
            if reloaded.is_none_or(|began| began < asked) {
                if let Some(began) = *reloaded {
                    tokio::time::sleep_until(began + RELOAD_AT_MOST_EVERY).await;
                }
                *reloaded = Some(tokio::time::Instant::now());
                match self.store.keys().await {
                    Ok(keys) => {
                        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
                    }
                    Err(e) => tracing::debug!(error = %e, "cannot reload API keys"),
                }
            }
        }
        self.authenticate(secret)
    }

    /// Reloads the keys, and writes last uses that are due.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        let keys = self.store.keys().await?;
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
        self.flush(false).await
    }

    /// Writes the last uses not written for [`TOUCH_EVERY`] (all of them
    /// when `all`, at shutdown).
    pub(crate) async fn flush(&self, all: bool) -> Result<(), StoreError> {
        let due: Vec<(KeyId, Timestamp)> = {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            let mut touched = self.touched.lock().unwrap_or_else(|e| e.into_inner());
            let due: Vec<_> = used
                .iter()
                .filter(|(id, _)| all || touched.get(id).is_none_or(|t| t.elapsed() >= TOUCH_EVERY))
                .map(|(id, at)| (*id, *at))
                .collect();
            for (id, _) in &due {
                used.remove(id);
                touched.insert(*id, Instant::now());
            }
            due
        };
        if due.is_empty() {
            return Ok(());
        }
        self.store.touch_keys(due).await
    }

    /// Reloads every [`REFRESH_EVERY`] until the task is aborted; failures
    /// keep the keys already loaded and are logged at most once a minute.
    pub(crate) fn spawn_refresher(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        crate::store::spawn_reloader(REFRESH_EVERY, "API keys", move || {
            let me = Arc::clone(&me);
            async move { me.refresh().await }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_are_printable_and_shown_as_written() {
        for good in [
            "ops",
            "alice@example.com",
            "Zürich team",
            "名前",
            "Tokyo 東京チーム",
            "Иван Петров",
            "Ἀθῆναι",
            &"a".repeat(100),
        ] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "   ",
            "tab\there",
            "nul\0",
            "evil\u{202E}txt.exe",
            "lre\u{202A}x",
            "isolate\u{2067}x",
            "mark\u{200F}x",
            "zero\u{200B}width",
            "bom\u{FEFF}",
            "\u{0430}dmin",
            "p\u{0430}yp\u{0430}l team",
            "\u{03BF}ps",
            &"a".repeat(101),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn secrets_are_long_random_and_hashed() {
        let (a, ha) = new_secret();
        let (b, hb) = new_secret();
        assert!(a.starts_with("ll_") && a.len() == 35, "{a}");
        assert!(a[3..].bytes().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(a, b);
        assert_eq!(ha, hash(&a));
        assert_ne!(ha, hb);
    }
}
