//! Standard Webhooks signatures (standardwebhooks.com): `whsec_` secrets,
//! and `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, so that the
//! specification's own verifiers check litelink's deliveries unchanged.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};

const PREFIX: &str = "whsec_";

/// A new secret: 24 random bytes, as the specification writes them.
pub fn new_secret() -> String {
    let key: [u8; 24] = rand::random();
    format!("{PREFIX}{}", STANDARD.encode(key))
}

/// The `v1,...` signature of one delivery, or `None` for a secret that is
/// not `whsec_<base64>` (never written by litelink).
pub fn signature(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(PREFIX)?).ok()?;
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&key).ok()?;
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    Some(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_the_specifications_example() {
        // The example of the Standard Webhooks specification.
        let sig = signature(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
        assert!(signature("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, b"").is_none());
        let secret = new_secret();
        assert!(secret.starts_with("whsec_") && signature(&secret, "m", 1, b"").is_some());
    }
}
