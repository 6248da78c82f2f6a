//! Users as the admin API and `litelink users` see them: the bodies that
//! create and change one (serde types that are also the OpenAPI schemas),
//! the user object, and one-time passwords. What may be done to whom, the
//! links service decides (`Links::create_user` and its kin).

use rand::distr::{Alphanumeric, SampleString};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::domain::user::check_user_name;
use crate::domain::wire::{Patch, StringSchema, string_schema};
use crate::domain::{Role, user::is_hidden_formatting};

/// Shortest local password a user may choose.
pub const MIN_PASSWORD_CHARS: usize = 12;

/// A user's name, checked ([`check_user_name`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct UserName(String);

string_schema!(
    UserName,
    "UserName",
    StringSchema {
        format: None,
        min_length: Some(1),
        max_length: Some(64),
        pattern: None,
        description: "1 to 64 characters, no control or formatting characters; unique regardless of case",
    }
);

impl TryFrom<String> for UserName {
    type Error = String;
    fn try_from(name: String) -> Result<Self, String> {
        check_user_name(&name)?;
        Ok(Self(name))
    }
}

impl UserName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Longest email address (RFC 5321's path limit).
const MAX_EMAIL_BYTES: usize = 254;

/// An email address: one `@` between a local part and a domain, no white
/// space or control characters, at most 254 bytes. Never used to match a
/// person to a user; it is only shown.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct Email(String);

string_schema!(
    Email,
    "Email",
    StringSchema {
        format: Some("email"),
        min_length: Some(3),
        max_length: Some(MAX_EMAIL_BYTES),
        pattern: None,
        description: "An email address, only shown",
    }
);

impl TryFrom<String> for Email {
    type Error = String;
    fn try_from(email: String) -> Result<Self, String> {
        let ok = email.len() <= MAX_EMAIL_BYTES
            && !email
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || is_hidden_formatting(c))
            && matches!(email.split_once('@'), Some((local, domain))
                if !local.is_empty() && !domain.is_empty() && !domain.contains('@'));
        if ok {
            Ok(Self(email))
        } else {
            Err(format!(
                "an email address is local@domain, at most {MAX_EMAIL_BYTES} bytes, without spaces"
            ))
        }
    }
}

impl Email {
    pub fn into_string(self) -> String {
        self.0
    }
}

/// The body of `POST /api/v1/users`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewUser)]
pub(crate) struct NewUserBody {
    /// Unique regardless of case.
    pub name: UserName,
    #[serde(default)]
    pub email: Option<Email>,
    pub role: Role,
    /// The one domain the user works on (a host added to this server, or
    /// `default`); absent: every domain.
    #[serde(default)]
    #[schema(max_length = 253)]
    pub domain: Option<String>,
}

/// The body of `PATCH /api/v1/users/{name}`: any of its fields; `null`
/// clears the email or the domain limit.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = UserPatch)]
pub(crate) struct UserPatchBody {
    #[serde(default)]
    #[schema(value_type = Option<Email>)]
    pub email: Patch<Email>,
    #[serde(default, deserialize_with = "crate::domain::wire::not_null")]
    pub role: Option<Role>,
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 253)]
    pub domain: Patch<String>,
    /// `true` disables the user: their keys and sessions stop at once.
    #[serde(default, deserialize_with = "crate::domain::wire::not_null")]
    pub disabled: Option<bool>,
    /// `false` lifts a suspension (a sign-in with no role at the identity
    /// provider suspends a user; only such a sign-in does).
    #[serde(default, deserialize_with = "crate::domain::wire::not_null")]
    pub suspended: Option<bool>,
}

/// A user as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = User)]
pub struct UserView {
    pub name: String,
    pub email: Option<String>,
    pub role: Role,
    /// The host of the one domain the user works on (`default` for the
    /// default domain); null: every domain.
    pub domain: Option<String>,
    pub disabled: bool,
    /// Their last sign-in through the identity provider gave them no role
    /// here: their sessions ended, their keys act for no one and no
    /// sign-in passes, until a sign-in with a role or an admin lifts it.
    pub suspended: bool,
}

/// The answer to a create: the user, and their one-time password (shown
/// this once; it must be changed at first sign-in). Absent where local
/// passwords are off.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedUser {
    #[serde(flatten)]
    pub user: UserView,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// The body of `POST /api/v1/keys`: a key for the caller's own user.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = NewKey)]
pub(crate) struct NewKeyBody {
    /// 1 to 100 bytes, unique among every key; no control or formatting
    /// characters, no look-alike mix of scripts.
    #[schema(min_length = 1, max_length = 100)]
    pub name: String,
    /// Limit the key to one domain (a host, or `default`); a user limited
    /// to a domain has keys on that domain only.
    #[serde(default)]
    #[schema(max_length = 253)]
    pub domain: Option<String>,
}

/// An API key as the API shows it: never its secret, but once.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Key)]
pub struct KeyView {
    pub name: String,
    /// The user it acts as, with that user's role.
    pub user: String,
    pub role: Role,
    /// The one domain it works on; null: every domain.
    pub domain: Option<String>,
    pub created_at: crate::domain::Timestamp,
    pub last_used_at: Option<crate::domain::Timestamp>,
    pub revoked_at: Option<crate::domain::Timestamp>,
}

/// The answer to a key's creation: the key, and its secret, shown this
/// once (only its hash is stored).
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub key: KeyView,
    pub secret: String,
    /// The key's signature token for the YOURLS API, shown this once too;
    /// absent where signatures are off (no `--yourls-secret-file`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[0-9a-f]{32}$")]
    pub signature_token: Option<String>,
}

/// Most keys a user may have that are not revoked: the server keeps every
/// key's hash in memory.
pub const MAX_KEYS_PER_USER: usize = 100;

/// Who the caller is (`GET /api/v1/account`).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Account)]
pub struct AccountView {
    pub name: String,
    pub role: Role,
    /// The one domain the caller works on; null: every domain.
    pub domain: Option<String>,
    /// How the caller proved who they are: `key` or `session`.
    pub via: &'static str,
}

/// A one-time password: 20 random base62 characters (about 119 bits).
pub fn one_time_password() -> String {
    Alphanumeric.sample_string(&mut rand::rng(), 20)
}

/// The Argon2id hash (PHC form) of a local password, made as the server
/// makes them (for `litelink users`).
pub async fn hash_password(password: String) -> Result<String, String> {
    let passwords = std::sync::Arc::new(crate::passwords::Passwords::new());
    passwords
        .hash(password)
        .await
        .map(|h| h.as_str().to_owned())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::wire::from_json;

    #[test]
    fn bodies_read_each_field_once_and_name_what_is_wrong() {
        let body: NewUserBody =
            from_json(br#"{"name": "Ann", "role": "viewer", "email": "ann@example.com"}"#)
                .expect("valid");
        assert_eq!(body.name.as_str(), "Ann");
        assert_eq!(body.role, Role::Viewer);
        for (raw, want) in [
            (
                &br#"{"name": "", "role": "member"}"#[..],
                "name: a user name",
            ),
            (br#"{"name": "a", "role": "root"}"#, "role: unknown variant"),
            (
                br#"{"name": "a", "role": "member", "email": "x"}"#,
                "email: an email",
            ),
            (
                br#"{"name": "a\u202e", "role": "member"}"#,
                "name: a user name may not",
            ),
            (
                br#"{"name": "a", "role": "member", "admin": true}"#,
                "unknown field 'admin'",
            ),
            (br#"{"role": "member"}"#, "field 'name' is required"),
        ] {
            let e = from_json::<NewUserBody>(raw).expect_err("refused");
            assert!(e.0.starts_with(want), "{e} / {want}");
        }
        let patch: UserPatchBody = from_json(br#"{"email": null, "role": "admin"}"#).unwrap();
        assert_eq!(patch.email, Patch::Clear);
        assert_eq!(patch.role, Some(Role::Admin));
        assert!(from_json::<UserPatchBody>(br#"{"role": null}"#).is_err());
    }

    #[test]
    fn one_time_passwords_are_long_and_random() {
        let (a, b) = (one_time_password(), one_time_password());
        assert!(a.len() == 20 && a.chars().all(|c| c.is_ascii_alphanumeric()));
        assert!(a.len() >= MIN_PASSWORD_CHARS);
        assert_ne!(a, b);
    }
}
