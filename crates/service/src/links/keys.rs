//! The rules for API keys through the API: everyone signed in makes and
//! revokes their own (acting with their own role, on their own domain),
//! and an admin sees and revokes every key.

use super::{Links, LinksError, on_domain};
use crate::domain::DomainId;
use crate::keys::{Principal, check_name, new_secret};
use crate::store::ApiKey;
use crate::users::{CreatedKey, KeyView, MAX_KEYS_PER_USER, NewKeyBody};

impl Links {
    fn key_view(&self, key: ApiKey) -> KeyView {
        KeyView {
            domain: key.domain.map(|id| self.domain_label(id)),
            name: key.name,
            user: key.user_name,
            role: key.role,
            created_at: key.created_at,
            last_used_at: key.last_used_at,
            revoked_at: key.revoked_at,
        }
    }

    /// The caller's own keys (every key, for an admin), oldest first.
    pub(crate) async fn keys_for(&self, caller: &Principal) -> Result<Vec<KeyView>, LinksError> {
        let keys = self.inner.store.keys().await?;
        Ok(keys
            .into_iter()
            .filter(|k| caller.is_admin() || k.user == caller.user)
            .map(|k| self.key_view(k))
            .collect())
    }

    /// A new key for the caller's own user, on the caller's domain (or one
    /// named, if the caller may work there).
    pub(crate) async fn create_key(
        &self,
        caller: &Principal,
        body: NewKeyBody,
    ) -> Result<CreatedKey, LinksError> {
        check_name(&body.name).map_err(|e| LinksError::Invalid(format!("name: {e}")))?;
        let domain: Option<DomainId> = match &body.domain {
            Some(name) => {
                let id = self.domain_named(name)?;
                if !on_domain(caller, id) {
                    return Err(LinksError::Forbidden(super::OTHER_DOMAIN));
                }
                Some(id)
            }
            None => caller.domain,
        };
        let keys = self.inner.store.keys().await?;
        let active = keys
            .iter()
            .filter(|k| k.user == caller.user && k.revoked_at.is_none())
            .count();
        if active >= MAX_KEYS_PER_USER {
            return Err(LinksError::Conflict(format!(
                "a user has at most {MAX_KEYS_PER_USER} keys; revoke one first"
            )));
        }
        let (secret, hash) = new_secret();
        let key = self
            .inner
            .store
            .create_key(&body.name, caller.user, hash, domain)
            .await?;
        self.reload_keys().await;
        Ok(CreatedKey {
            signature_token: self.inner.keys.token_of(&key),
            key: self.key_view(key),
            secret,
        })
    }

    /// Revokes the key `name` names: the caller's own, or any for an
    /// admin. `false` when there is no such key the caller may revoke (or
    /// it is revoked already).
    pub(crate) async fn revoke_key(
        &self,
        caller: &Principal,
        name: &str,
    ) -> Result<bool, LinksError> {
        let keys = self.inner.store.keys().await?;
        let Some(key) = keys
            .iter()
            .find(|k| k.name == name && k.revoked_at.is_none())
        else {
            return Ok(false);
        };
        if !(caller.is_admin() || key.user == caller.user) {
            return Ok(false);
        }
        let revoked = self.inner.store.revoke_key(name).await?;
        self.reload_keys().await;
        Ok(revoked)
    }
}
