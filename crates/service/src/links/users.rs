//! The rules for users: only an admin reads or changes them, and no admin
//! takes away their own admin role. A change counts at once here (the keys
//! are read again) and within a second on other instances.

use super::{Links, LinksError, admin};
use crate::domain::{DEFAULT_NAME, DomainId, Role};
use crate::keys::Principal;
use crate::store::{NewUser, User, UserChange, UserWrite};
use crate::users::{CreatedUser, NewUserBody, UserPatchBody, UserView, one_time_password};

impl Links {
    /// `user` as the API shows it.
    pub(crate) fn user_view(&self, user: User) -> UserView {
        UserView {
            domain: user.domain.map(|id| self.domain_label(id)),
            name: user.name,
            email: user.email,
            role: user.role,
            disabled: user.disabled,
            suspended: user.suspended,
        }
    }

    /// A domain as users name it: its host, or `default`.
    pub(crate) fn domain_label(&self, id: DomainId) -> String {
        match self.inner.domains.host_of(id) {
            Some(host) if !id.is_default() => host.to_string(),
            _ => DEFAULT_NAME.to_owned(),
        }
    }

    /// Every user: an admin's to read.
    pub(crate) async fn users(&self, caller: &Principal) -> Result<Vec<UserView>, LinksError> {
        admin(caller)?;
        let users = self.inner.store.users().await?;
        Ok(users.into_iter().map(|u| self.user_view(u)).collect())
    }

    /// The user `name` names, regardless of case: an admin's to read.
    pub(crate) async fn user(
        &self,
        caller: &Principal,
        name: &str,
    ) -> Result<Option<User>, LinksError> {
        admin(caller)?;
        let folded = crate::domain::user::fold_name(name);
        let users = self.inner.store.users().await?;
        Ok(users
            .into_iter()
            .find(|u| crate::domain::user::fold_name(&u.name) == folded))
    }

    /// Makes a user with a one-time password: an admin's to do.
    pub(crate) async fn create_user(
        &self,
        caller: &Principal,
        body: NewUserBody,
    ) -> Result<CreatedUser, LinksError> {
        admin(caller)?;
        let domain = body
            .domain
            .as_deref()
            .map(|d| self.domain_named(d))
            .transpose()?;
        // Where local passwords are off, a user signs in only through the
        // identity provider (or uses keys), and gets no password at all.
        let (password, hash) = if self.inner.sessions.local_login() {
            let (password, hash) = self.new_password().await?;
            (Some(password), Some(hash))
        } else {
            (None, None)
        };
        let new = NewUser {
            name: body.name.into_string(),
            email: body.email.map(|e| e.into_string()),
            role: body.role,
            domain,
            must_change: hash.is_some(),
            password: hash,
        };
        let user = self
            .inner
            .store
            .write_user(UserWrite::Create(new))
            .await?
            .ok_or_else(|| LinksError::Conflict("the user was not stored".into()))?;
        Ok(CreatedUser {
            user: self.user_view(user),
            password,
        })
    }

    /// A one-time password, and its hash.
    async fn new_password(&self) -> Result<(String, String), LinksError> {
        let password = one_time_password();
        let hash = self.inner.passwords.hash(password.clone()).await?;
        Ok((password, hash.as_str().to_owned()))
    }

    /// Changes a user: an admin's to do, but not to their own role or
    /// enabled state. `None` when there is no such user.
    pub(crate) async fn change_user(
        &self,
        caller: &Principal,
        name: &str,
        body: UserPatchBody,
    ) -> Result<Option<UserView>, LinksError> {
        let Some(user) = self.user(caller, name).await? else {
            return Ok(None);
        };
        if user.id == caller.user
            && (body.role.is_some_and(|r| r != Role::Admin) || body.disabled == Some(true))
        {
            return Err(LinksError::Conflict(
                "an admin cannot take away their own admin role or disable themselves".into(),
            ));
        }
        if body.suspended == Some(true) {
            return Err(LinksError::Invalid(
                "suspended: only a sign-in with no role suspends a user; an admin lifts it \
                 (false), or disables the user"
                    .into(),
            ));
        }
        let domain = body
            .domain
            .into_option()
            .map(|d| d.map(|name| self.domain_named(&name)).transpose())
            .transpose()?;
        let change = UserChange {
            email: body.email.into_option().map(|e| e.map(|e| e.into_string())),
            role: body.role,
            domain,
            password: None,
            disabled: body.disabled,
            suspended: body.suspended,
        };
        let changed = self
            .inner
            .store
            .write_user(UserWrite::Update {
                name: user.name,
                change,
            })
            .await?;
        self.reload_keys().await;
        Ok(changed.map(|u| self.user_view(u)))
    }

    /// Disables a user and revokes their keys; their links stay theirs, or
    /// go to the user `reassign` names. An admin's to do, never to
    /// themselves. `false` when there is no such user.
    pub(crate) async fn remove_user(
        &self,
        caller: &Principal,
        name: &str,
        reassign: Option<&str>,
    ) -> Result<bool, LinksError> {
        let Some(user) = self.user(caller, name).await? else {
            return Ok(false);
        };
        if user.id == caller.user {
            return Err(LinksError::Conflict(
                "an admin cannot remove themselves".into(),
            ));
        }
        let reassign = match reassign {
            None => None,
            Some(other) => {
                let to = self
                    .user(caller, other)
                    .await?
                    .filter(|u| !u.disabled && u.id != user.id)
                    .ok_or_else(|| {
                        LinksError::Invalid(format!(
                            "reassign: no other enabled user named '{other}'"
                        ))
                    })?;
                Some(to.id)
            }
        };
        let removed = self
            .inner
            .store
            .write_user(UserWrite::Remove {
                name: user.name,
                reassign,
            })
            .await?;
        self.reload_keys().await;
        Ok(removed.is_some())
    }

    /// Reads the keys again, so that a user's change counts at once here.
    pub(super) async fn reload_keys(&self) {
        if let Err(e) = self.inner.keys.refresh().await {
            tracing::warn!(error = %e, "cannot reload API keys after a change to a user");
        }
    }
}
