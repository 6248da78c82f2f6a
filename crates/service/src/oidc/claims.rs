//! What litelink reads of a person's claims: a name, an email, and the
//! role that `--oidc-role-claim` and the `--oidc-*-values` lists give.

use openidconnect::core::CoreGenderClaim;
use openidconnect::{AdditionalClaims, IdTokenClaims, UserInfoClaims};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::domain::Role;

/// The claims beyond the standard ones (`groups`, `roles`,
/// `realm_access`...), as they came.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Extra {
    #[serde(flatten)]
    claims: Map<String, Value>,
}

impl AdditionalClaims for Extra {}

/// How a person's claims give their role (`--oidc-role-claim`,
/// `--oidc-admin-values` and their kin, `--oidc-default-role`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoleMapping {
    /// The claim whose values are compared: a name (`groups`), else a
    /// dotted path into objects (`realm_access.roles`).
    pub claim: Option<String>,
    pub admin: Vec<String>,
    pub member: Vec<String>,
    pub viewer: Vec<String>,
    /// The role of a person whose claim names none of the values.
    pub default: Option<Role>,
}

impl RoleMapping {
    /// Refuses a mapping that could never give a role, or whose values
    /// name no claim.
    pub(crate) fn check(&self) -> anyhow::Result<()> {
        let values = !(self.admin.is_empty() && self.member.is_empty() && self.viewer.is_empty());
        match (&self.claim, values) {
            (Some(claim), false) => anyhow::bail!(
                "--oidc-role-claim {claim}: give the values that make each role \
                 (--oidc-admin-values, --oidc-member-values, --oidc-viewer-values)"
            ),
            (None, true) => anyhow::bail!(
                "--oidc-admin-values and its kin need --oidc-role-claim: the claim they are read from"
            ),
            (None, false) if self.default.is_none() => anyhow::bail!(
                "--oidc-issuer: no one could sign in; set --oidc-role-claim with its values, \
                 or --oidc-default-role"
            ),
            _ => Ok(()),
        }
    }

    /// Whether the ID token lacks the role claim, so that the userinfo
    /// endpoint should be asked too.
    pub(crate) fn wants_more(&self, person: &Claims) -> bool {
        self.claim
            .as_deref()
            .is_some_and(|claim| person.values(claim).is_none())
    }

    /// The role the claims give: the highest whose values the claim
    /// names, else the default; `None`: refused.
    pub(crate) fn role(&self, person: &Claims) -> Option<Role> {
        let named = self
            .claim
            .as_deref()
            .and_then(|claim| person.values(claim))
            .unwrap_or_default();
        let names = |values: &[String]| values.iter().any(|v| named.contains(v));
        if names(&self.admin) {
            Some(Role::Admin)
        } else if names(&self.member) {
            Some(Role::Member)
        } else if names(&self.viewer) {
            Some(Role::Viewer)
        } else {
            self.default
        }
    }
}

/// A person's claims, from the ID token and, where it lacked the role
/// claim, the userinfo endpoint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Claims {
    subject: String,
    preferred_username: Option<String>,
    email: Option<String>,
    email_verified: Option<bool>,
    extra: Map<String, Value>,
}

impl Claims {
    pub(crate) fn of_id_token(claims: &IdTokenClaims<Extra, CoreGenderClaim>) -> Self {
        Self {
            subject: claims.subject().as_str().to_owned(),
            preferred_username: claims.preferred_username().map(|u| u.as_str().to_owned()),
            email: claims.email().map(|e| e.as_str().to_owned()),
            email_verified: claims.email_verified(),
            extra: claims.additional_claims().claims.clone(),
        }
    }

    /// Adds what the userinfo endpoint said and the ID token did not.
    pub(crate) fn add(&mut self, more: UserInfoClaims<Extra, CoreGenderClaim>) {
        if self.preferred_username.is_none() {
            self.preferred_username = more.preferred_username().map(|u| u.as_str().to_owned());
        }
        if self.email.is_none() {
            self.email = more.email().map(|e| e.as_str().to_owned());
            self.email_verified = more.email_verified();
        }
        for (name, value) in &more.additional_claims().claims {
            self.extra
                .entry(name.clone())
                .or_insert_with(|| value.clone());
        }
    }

    /// The name a new user gets: `preferred_username`, else `email`,
    /// else `sub`.
    pub(crate) fn name(&self) -> String {
        [&self.preferred_username, &self.email]
            .into_iter()
            .flatten()
            .find(|n| !n.trim().is_empty())
            .unwrap_or(&self.subject)
            .clone()
    }

    /// The email a user keeps, unless the provider says it is unverified.
    pub(crate) fn email(&self) -> Option<String> {
        self.email
            .clone()
            .filter(|_| self.email_verified != Some(false))
    }

    /// The string values of the claim `name` (one string, or an array of
    /// them); `None` when the claim is absent. An email counts only when
    /// the provider says it is verified.
    pub(crate) fn values(&self, name: &str) -> Option<Vec<String>> {
        match name {
            "email" => {
                let email = self.email.clone()?;
                Some(if self.email_verified == Some(true) {
                    vec![email]
                } else {
                    Vec::new()
                })
            }
            "preferred_username" => self.preferred_username.clone().map(|u| vec![u]),
            "sub" => Some(vec![self.subject.clone()]),
            _ => {
                let value = self.extra.get(name).or_else(|| {
                    let mut parts = name.split('.');
                    let first = self.extra.get(parts.next()?)?;
                    parts.try_fold(first, |v, part| v.get(part))
                })?;
                Some(strings(value))
            }
        }
    }
}

fn strings(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(extra: Value, email: Option<(&str, Option<bool>)>) -> Claims {
        Claims {
            subject: "s-1".into(),
            preferred_username: None,
            email: email.map(|(e, _)| e.to_owned()),
            email_verified: email.and_then(|(_, v)| v),
            extra: extra.as_object().cloned().unwrap_or_default(),
        }
    }

    fn mapping(claim: &str) -> RoleMapping {
        RoleMapping {
            claim: Some(claim.into()),
            admin: vec!["ops".into()],
            member: vec!["staff".into(), "alice@example.com".into()],
            viewer: vec!["audit".into()],
            default: None,
        }
    }

    #[test]
    fn the_highest_role_named_wins_and_none_is_refused() {
        let m = mapping("groups");
        let p = |groups: Value| person(serde_json::json!({ "groups": groups }), None);
        assert_eq!(
            m.role(&p(serde_json::json!(["audit", "ops"]))),
            Some(Role::Admin)
        );
        assert_eq!(m.role(&p(serde_json::json!("staff"))), Some(Role::Member));
        assert_eq!(m.role(&p(serde_json::json!(["audit"]))), Some(Role::Viewer));
        assert_eq!(m.role(&p(serde_json::json!(["other"]))), None);
        assert_eq!(m.role(&p(serde_json::json!(42))), None);
        let with_default = RoleMapping {
            default: Some(Role::Viewer),
            ..m.clone()
        };
        assert_eq!(
            with_default.role(&p(serde_json::json!([]))),
            Some(Role::Viewer)
        );
        assert!(m.wants_more(&person(serde_json::json!({}), None)));
        assert!(!m.wants_more(&p(serde_json::json!([]))));
    }

    #[test]
    fn a_dotted_claim_reads_into_objects_and_a_dotted_name_comes_first() {
        let m = mapping("realm_access.roles");
        let nested = person(
            serde_json::json!({ "realm_access": { "roles": ["ops"] } }),
            None,
        );
        assert_eq!(m.role(&nested), Some(Role::Admin));
        let flat = person(
            serde_json::json!({ "realm_access.roles": "audit", "realm_access": { "roles": ["ops"] } }),
            None,
        );
        assert_eq!(m.role(&flat), Some(Role::Viewer));
    }

    #[test]
    fn an_email_gives_a_role_only_when_verified() {
        let m = mapping("email");
        let verified = person(
            serde_json::json!({}),
            Some(("alice@example.com", Some(true))),
        );
        assert_eq!(m.role(&verified), Some(Role::Member));
        for unverified in [Some(false), None] {
            let p = person(
                serde_json::json!({}),
                Some(("alice@example.com", unverified)),
            );
            assert_eq!(m.role(&p), None);
        }
    }

    #[test]
    fn mappings_that_could_never_give_a_role_are_refused() {
        assert!(RoleMapping::default().check().is_err());
        let no_values = RoleMapping {
            claim: Some("groups".into()),
            ..RoleMapping::default()
        };
        assert!(no_values.check().is_err());
        let no_claim = RoleMapping {
            admin: vec!["ops".into()],
            ..RoleMapping::default()
        };
        assert!(no_claim.check().is_err());
        let default_only = RoleMapping {
            default: Some(Role::Member),
            ..RoleMapping::default()
        };
        assert!(default_only.check().is_ok());
        assert!(mapping("groups").check().is_ok());
    }

    #[test]
    fn the_name_is_the_preferred_username_then_the_email_then_the_subject() {
        let mut p = person(serde_json::json!({}), None);
        assert_eq!(p.name(), "s-1");
        p.email = Some("a@example.com".into());
        assert_eq!(p.name(), "a@example.com");
        p.preferred_username = Some("alice".into());
        assert_eq!(p.name(), "alice");
    }
}
