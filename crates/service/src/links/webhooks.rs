//! The rules for webhooks: only an admin registers, sees and changes them,
//! and a webhook's URL is checked as a link's target is, and more: https
//! and a public address, unless the server allows private destinations.

use super::{Links, LinksError, admin};
use crate::domain::{DomainId, TargetUrl};
use crate::keys::Principal;
use crate::store::outbox::{EventKind, Webhook, WebhookWrite};
use crate::webhooks::{
    CreatedWebhook, DeliveryView, NewWebhookBody, WebhookPatchBody, WebhookView, sign, url_problem,
};

fn events_given(events: &[EventKind]) -> Result<(), LinksError> {
    if events.is_empty() {
        return Err(LinksError::Invalid(
            "events: name at least one event".into(),
        ));
    }
    Ok(())
}

impl Links {
    pub(crate) fn webhook_view(&self, webhook: Webhook) -> WebhookView {
        WebhookView {
            id: webhook.id,
            url: webhook.url,
            events: webhook.events,
            domain: webhook.domain.map(|d| self.domain_label(d)),
            enabled: webhook.enabled,
            created_at: webhook.created_at,
        }
    }

    fn check_webhook_url(&self, url: &TargetUrl) -> Result<(), LinksError> {
        match url_problem(url, &self.inner.targets, self.inner.webhooks.allow_private) {
            Some(problem) => Err(LinksError::Invalid(format!("url: {problem}"))),
            None => Ok(()),
        }
    }

    fn webhook_domain(&self, name: Option<&str>) -> Result<Option<DomainId>, LinksError> {
        name.map(|n| {
            self.domain_named(n)
                .map_err(|e| LinksError::Invalid(format!("domain: {e}")))
        })
        .transpose()
    }

    /// The webhooks the API shows: every one but the event streams' rows,
    /// which the server's options make.
    async fn registered(&self) -> Result<Vec<Webhook>, LinksError> {
        let all = self.inner.store.webhooks().await?;
        Ok(all
            .into_iter()
            .filter(|w| !crate::webhooks::streams::is_stream(&w.url))
            .collect())
    }

    /// Whether `id` is a webhook the API shows.
    async fn is_registered(&self, id: i64) -> Result<bool, LinksError> {
        Ok(self.registered().await?.iter().any(|w| w.id == id))
    }

    pub(crate) async fn webhooks(
        &self,
        caller: &Principal,
    ) -> Result<Vec<WebhookView>, LinksError> {
        admin(caller)?;
        let all = self.registered().await?;
        Ok(all.into_iter().map(|w| self.webhook_view(w)).collect())
    }

    pub(crate) async fn webhook(
        &self,
        caller: &Principal,
        id: i64,
    ) -> Result<Option<WebhookView>, LinksError> {
        admin(caller)?;
        let all = self.registered().await?;
        Ok(all
            .into_iter()
            .find(|w| w.id == id)
            .map(|w| self.webhook_view(w)))
    }

    pub(crate) async fn add_webhook(
        &self,
        caller: &Principal,
        body: NewWebhookBody,
    ) -> Result<CreatedWebhook, LinksError> {
        admin(caller)?;
        self.check_webhook_url(&body.url)?;
        events_given(&body.events)?;
        let domain = self.webhook_domain(body.domain.as_deref())?;
        let secret = sign::new_secret();
        let written = self
            .inner
            .store
            .write_webhook(WebhookWrite::Add {
                url: body.url.as_str().to_owned(),
                events: body.events,
                domain,
                secret: secret.clone(),
            })
            .await?
            .ok_or_else(|| {
                crate::store::StoreError::Task("a new webhook was not read back".into())
            })?;
        Ok(CreatedWebhook {
            webhook: self.webhook_view(written),
            secret,
        })
    }

    pub(crate) async fn change_webhook(
        &self,
        caller: &Principal,
        id: i64,
        body: WebhookPatchBody,
    ) -> Result<Option<WebhookView>, LinksError> {
        admin(caller)?;
        if !self.is_registered(id).await? {
            return Ok(None);
        }
        if let Some(url) = &body.url {
            self.check_webhook_url(url)?;
        }
        if let Some(events) = &body.events {
            events_given(events)?;
        }
        let domain = match body.domain.into_option() {
            None => None,
            Some(None) => Some(None),
            Some(Some(name)) => Some(self.webhook_domain(Some(&name))?),
        };
        let written = self
            .inner
            .store
            .write_webhook(WebhookWrite::Set {
                id,
                url: body.url.map(|u| u.as_str().to_owned()),
                events: body.events,
                domain,
                enabled: body.enabled,
            })
            .await?;
        Ok(written.map(|w| self.webhook_view(w)))
    }

    pub(crate) async fn remove_webhook(
        &self,
        caller: &Principal,
        id: i64,
    ) -> Result<bool, LinksError> {
        admin(caller)?;
        if !self.is_registered(id).await? {
            return Ok(false);
        }
        Ok(self.inner.store.remove_webhook(id).await?)
    }

    /// A new secret; the old one signs too for [`ROTATION_OVERLAP`].
    pub(crate) async fn rotate_webhook(
        &self,
        caller: &Principal,
        id: i64,
    ) -> Result<Option<CreatedWebhook>, LinksError> {
        admin(caller)?;
        if !self.is_registered(id).await? {
            return Ok(None);
        }
        let (secret, write) = crate::webhooks::rotation(id);
        let written = self.inner.store.write_webhook(write).await?;
        Ok(written.map(|w| CreatedWebhook {
            webhook: self.webhook_view(w),
            secret,
        }))
    }

    /// A webhook's last attempts, newest first; `None`: no such webhook.
    pub(crate) async fn deliveries(
        &self,
        caller: &Principal,
        id: i64,
    ) -> Result<Option<Vec<DeliveryView>>, LinksError> {
        if self.webhook(caller, id).await?.is_none() {
            return Ok(None);
        }
        let attempts = self.inner.store.attempts(id).await?;
        Ok(Some(
            attempts
                .into_iter()
                .map(|a| DeliveryView {
                    id: a.id,
                    event: a.attempt.event,
                    kind: a.kind,
                    at: a.attempt.at,
                    status: a.attempt.status,
                    duration_ms: a.attempt.duration_ms,
                    error: a.attempt.error,
                    state: a.state.as_str(),
                })
                .collect(),
        ))
    }

    /// Sends one of a webhook's events again, now; `false`: no such event.
    pub(crate) async fn retry_delivery(
        &self,
        caller: &Principal,
        id: i64,
        event: i64,
    ) -> Result<bool, LinksError> {
        admin(caller)?;
        if !self.is_registered(id).await? {
            return Ok(false);
        }
        Ok(self.inner.store.retry_event(id, event).await?)
    }
}
