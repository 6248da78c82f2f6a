//! People: a user's id, name and role. Keys and links belong to users.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

/// A user's row id: what a link's owner and a key's user refer to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UserId(pub i64);

/// What a user may do. A key acts with its user's role.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantNames,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// Everything: users, domains, keys and every link.
    Admin,
    /// Creates links and manages their own.
    Member,
    /// Reads every link and its visits, and changes nothing.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Longest user name, in characters.
pub const MAX_USER_NAME_CHARS: usize = 64;

/// Unicode's format characters (category Cf) that change how text is shown
/// or hide in it: bidi marks, embeddings, overrides and isolates,
/// zero-width characters, and the like.
pub(crate) fn is_hidden_formatting(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}' | '\u{0600}'..='\u{0605}' | '\u{06DD}' | '\u{070F}'
        | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// Whether `name` may name a user: 1 to [`MAX_USER_NAME_CHARS`]
/// characters, not only white space, and no control or formatting
/// character (a right-to-left override would show another name).
pub fn check_user_name(name: &str) -> Result<(), String> {
    if name.trim().is_empty() || name.chars().count() > MAX_USER_NAME_CHARS {
        return Err(format!(
            "a user name is 1 to {MAX_USER_NAME_CHARS} characters"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|&c| c.is_control() || is_hidden_formatting(c))
    {
        return Err(format!(
            "a user name may not hold control or formatting characters (U+{:04X})",
            u32::from(c)
        ));
    }
    Ok(())
}

/// The form two names are compared in: names are unique regardless of case.
pub fn fold_name(name: &str) -> String {
    name.to_lowercase()
}

/// `wanted` if it is a valid name not in `taken` (folded names), else the
/// first of `wanted-2`, `wanted-3`... that is, cut so that the whole stays
/// within [`MAX_USER_NAME_CHARS`]. A `wanted` that is no valid name at all
/// (control characters, only spaces) becomes `user`.
pub fn free_user_name(wanted: &str, taken: &HashSet<String>) -> String {
    let mut base: String = wanted
        .chars()
        .filter(|&c| !c.is_control() && !is_hidden_formatting(c))
        .collect();
    if base.trim().is_empty() {
        base = "user".into();
    }
    let fits = |s: &str| s.chars().count() <= MAX_USER_NAME_CHARS;
    if fits(&base) && !taken.contains(&fold_name(&base)) {
        return base;
    }
    for n in 2u64.. {
        let suffix = format!("-{n}");
        let room = MAX_USER_NAME_CHARS - suffix.chars().count();
        let stem: String = base.chars().take(room).collect();
        let candidate = format!("{stem}{suffix}");
        if !taken.contains(&fold_name(&candidate)) {
            return candidate;
        }
    }
    unreachable!("the suffixes never run out")
}

/// One user made for an API key of an older schema: the key's id (so that
/// the owners of its links stay valid), the name it gets, and its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserForKey {
    pub id: i64,
    pub key_name: String,
    pub name: String,
    pub role: Role,
}

/// The users that the keys `(id, name, admin)` of an older schema get, in
/// id order: one each, named as the key where that name is free, else with
/// a suffix (each of which is logged).
pub(crate) fn users_for_keys(keys: &[(i64, String, bool)]) -> Vec<UserForKey> {
    let mut taken = HashSet::new();
    let mut keys = keys.to_vec();
    keys.sort_by_key(|k| k.0);
    keys.into_iter()
        .map(|(id, key_name, admin)| {
            let name = free_user_name(&key_name, &taken);
            taken.insert(fold_name(&name));
            if name != key_name {
                tracing::warn!(
                    key = %key_name,
                    user = %name,
                    "the user made for this API key has another name: the key's name is too long or taken regardless of case"
                );
            }
            UserForKey {
                id,
                key_name,
                name,
                role: if admin { Role::Admin } else { Role::Member },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_are_short_printable_and_shown_as_written() {
        for good in ["ops", "Zürich team", "名前", &"é".repeat(64)] {
            assert_eq!(check_user_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "  ",
            "tab\tx",
            "evil\u{202E}x",
            "z\u{200B}w",
            &"a".repeat(65),
        ] {
            assert!(check_user_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn roles_are_written_in_lower_case() {
        assert_eq!("viewer".parse::<Role>(), Ok(Role::Viewer));
        assert!("Admin".parse::<Role>().is_err());
        assert_eq!(Role::Member.as_str(), "member");
        assert_eq!(serde_json::to_string(&Role::Admin).unwrap(), "\"admin\"");
    }

    #[test]
    fn keys_get_users_with_free_names() {
        let long = "k".repeat(100);
        let users = users_for_keys(&[
            (3, "Ops".into(), false),
            (1, "ops".into(), true),
            (2, long.clone(), false),
            (4, "ops-2".into(), false),
            (5, "OPS".into(), false),
        ]);
        let got: Vec<(i64, &str, Role)> = users
            .iter()
            .map(|u| (u.id, u.name.as_str(), u.role))
            .collect();
        let cut = format!("{}-2", "k".repeat(62));
        assert_eq!(
            got,
            [
                (1, "ops", Role::Admin),
                (2, cut.as_str(), Role::Member),
                (3, "Ops-2", Role::Member),
                (4, "ops-2-2", Role::Member),
                (5, "OPS-3", Role::Member),
            ]
        );
        for u in &users {
            assert_eq!(check_user_name(&u.name), Ok(()), "{}", u.name);
        }
    }
}
