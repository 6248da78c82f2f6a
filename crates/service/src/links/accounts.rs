//! The rules for signing in with a local password: the guessing bounds
//! first, then the hash (on the blocking pool, under permits of its own);
//! one answer, in the same time, for an unknown name and a wrong password;
//! a new session id at every sign-in; and a one-time password that must be
//! changed before anything else.

use std::net::IpAddr;

use super::{Links, LinksError};
use crate::domain::user::fold_name;
use crate::keys::{Principal, Via};
use crate::oidc::{Begun, Oidc, OidcError};
use crate::sessions::{SessionId, Sessions};
use crate::store::{SessionWrite, StoreError, User, UserChange, UserWrite};
use crate::users::MIN_PASSWORD_CHARS;

/// What a person the provider gives no role here is told.
const NO_ROLE: &str =
    "your identity provider gives you no role on this server: ask an administrator for access";

/// Longest password, in bytes (as for links).
const MAX_PASSWORD_BYTES: usize = 1024;

impl Links {
    pub(crate) fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// Who the session `id` signs in, and the session's hash.
    pub(crate) async fn session(
        &self,
        id: &str,
    ) -> Result<Option<(Principal, [u8; 32])>, LinksError> {
        Ok(self.inner.sessions.principal(id).await?)
    }

    fn local_login(&self) -> Result<(), LinksError> {
        if !self.inner.sessions.enabled() {
            return Err(LinksError::AccountsOff(
                "signing in needs --public-url on this server",
            ));
        }
        if !self.inner.sessions.local_login() {
            return Err(LinksError::AccountsOff(
                "local passwords are off on this server (--local-login off)",
            ));
        }
        Ok(())
    }

    /// Signs `name` in with `password`, from `client`: the user and a new
    /// session.
    pub(crate) async fn login(
        &self,
        name: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<(User, SessionId), LinksError> {
        self.local_login()?;
        let user = self
            .checked_user(name, password, client)
            .await?
            .ok_or(LinksError::WrongCredentials)?;
        let session = self.inner.sessions.start(&user).await?;
        Ok((user, session))
    }

    /// The enabled user `name` names, if `password` is theirs: checked
    /// through the sign-in bounds, and as long for an unknown name.
    pub(super) async fn checked_user(
        &self,
        name: &str,
        password: &str,
        client: Option<IpAddr>,
    ) -> Result<Option<User>, LinksError> {
        let account = fold_name(name);
        let user = self
            .inner
            .store
            .users()
            .await?
            .into_iter()
            .find(|u| fold_name(&u.name) == account && !u.disabled && !u.suspended);
        let hash = user.as_ref().and_then(|u| u.password.as_deref());
        let right = password.len() <= MAX_PASSWORD_BYTES
            && self
                .inner
                .passwords
                .check_login(&account, client, hash, password.as_bytes())
                .await?;
        Ok(user.filter(|_| right))
    }

    /// Changes the signed-in caller's password, after checking the current
    /// one (as a sign-in is checked); ends their other sessions.
    pub(crate) async fn change_password(
        &self,
        caller: &Principal,
        session: [u8; 32],
        current: &str,
        new: &str,
        client: Option<IpAddr>,
    ) -> Result<(), LinksError> {
        self.local_login()?;
        if !matches!(caller.via, Via::Session { .. }) {
            return Err(LinksError::Forbidden(
                "a password is changed when signed in",
            ));
        }
        let chars = new.chars().count();
        if chars < MIN_PASSWORD_CHARS || new.len() > MAX_PASSWORD_BYTES {
            return Err(LinksError::Invalid(format!(
                "new_password: a password is {MIN_PASSWORD_CHARS} characters to \
                 {MAX_PASSWORD_BYTES} bytes"
            )));
        }
        if new == current {
            return Err(LinksError::Invalid(
                "new_password: it must differ from the current one".into(),
            ));
        }
        let user = self
            .inner
            .store
            .users()
            .await?
            .into_iter()
            .find(|u| u.id == caller.user)
            .ok_or(LinksError::WrongCredentials)?;
        let right = current.len() <= MAX_PASSWORD_BYTES
            && self
                .inner
                .passwords
                .check_login(
                    &fold_name(&user.name),
                    client,
                    user.password.as_deref(),
                    current.as_bytes(),
                )
                .await?;
        if !right {
            return Err(LinksError::WrongCredentials);
        }
        let hash = self.inner.passwords.hash(new.to_owned()).await?;
        self.inner
            .store
            .write_user(UserWrite::Update {
                name: user.name,
                change: UserChange {
                    password: Some((Some(hash.as_str().to_owned()), false)),
                    ..UserChange::default()
                },
            })
            .await?;
        self.inner
            .store
            .write_session(SessionWrite::EndOthers {
                user: caller.user,
                keep: Some(session),
            })
            .await?;
        Ok(())
    }

    /// The identity provider people may sign in through, if any.
    pub(crate) fn oidc(&self) -> Option<&Oidc> {
        self.inner.oidc.as_deref()
    }

    /// Begins a sign-in through the identity provider, from `client`.
    pub(crate) async fn oidc_begin(&self, client: Option<IpAddr>) -> Result<Begun, LinksError> {
        let oidc = self.oidc().ok_or(OidcError::Off)?;
        Ok(oidc.begin(&*self.inner.store, client).await?)
    }

    /// A callback from the identity provider that says why it did not sign
    /// the person in: [`Oidc::declined`].
    pub(crate) async fn oidc_declined(
        &self,
        why: String,
        state: Option<&str>,
        browser: Option<&str>,
        client: Option<IpAddr>,
    ) -> LinksError {
        match self.oidc() {
            Some(oidc) => oidc
                .declined(&*self.inner.store, why, state, browser, client)
                .await
                .into(),
            None => OidcError::Off.into(),
        }
    }

    /// Ends a sign-in through the identity provider: the person it names,
    /// made a user at their first sign-in and given this one's role, and a
    /// new session. A disabled user is refused.
    pub(crate) async fn oidc_finish(
        &self,
        code: &str,
        state: &str,
        browser: Option<&str>,
        client: Option<IpAddr>,
    ) -> Result<(User, SessionId), LinksError> {
        let oidc = self.oidc().ok_or(OidcError::Off)?;
        let person = oidc
            .finish(&*self.inner.store, code, state, browser, client)
            .await?;
        // Two first sign-ins at once may race for a name: the loser tries
        // again, and finds the name taken or its own user made.
        let mut tries = 0;
        let user = loop {
            match self
                .inner
                .store
                .write_user(UserWrite::SignIn(person.clone()))
                .await
            {
                Ok(Some(user)) => break user,
                Ok(None) => return Err(OidcError::Refused(NO_ROLE.into()).into()),
                Err(StoreError::UserTaken(_)) if tries < 3 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        };
        if user.disabled {
            return Err(OidcError::Refused(
                "your account on this server is disabled: ask an administrator".into(),
            )
            .into());
        }
        if person.role.is_none() {
            tracing::warn!(
                user = %user.name,
                issuer = %person.issuer,
                "a sign-in through the identity provider gave no role: the user is suspended \
                 (sessions ended, keys and sign-ins refused) until a sign-in with a role or an \
                 admin lifts it"
            );
            self.reload_keys().await;
            return Err(OidcError::Refused(NO_ROLE.into()).into());
        }
        let session = self.inner.sessions.start(&user).await?;
        Ok((user, session))
    }

    /// Ends the session `hash` names.
    pub(crate) async fn logout(&self, hash: [u8; 32]) -> Result<(), LinksError> {
        Ok(self.inner.sessions.end(hash).await?)
    }
}
