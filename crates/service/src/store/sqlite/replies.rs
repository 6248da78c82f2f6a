//! How a create's caller hears the outcome: the reply channel, and sending
//! a batch of outcomes from the writer's thread.
//!
//! A batch's answers go to the runtime as one task rather than one wake-up
//! per create, which had cost a context switch per reply (docs/benchmarks.md,
//! "Answers as one task").

use tokio::runtime::Handle;

use crate::domain::Link;
use crate::store::{ApiKey, StoreError};

/// What a write did, for its caller.
#[derive(Debug)]
pub(super) enum Done {
    /// A link was created, or changed (`None`: there was no such link).
    Link(Link),
    MaybeLink(Option<Link>),
    /// Whether a delete or revoke found what it was to remove.
    Found(bool),
    Key(ApiKey),
    /// A user as written (`None`: there was no such user).
    User(Option<crate::store::User>),
    /// A domain added or changed (`None`: there was no such domain).
    Domain(Option<crate::domain::Domain>),
    /// A domain removal: `None` when there was no such domain, else the
    /// codes of the links deleted with it.
    Removed(Option<Vec<crate::domain::ShortCode>>),
    /// A sign-in flow taken (`None`: no such flow, or a write that
    /// answers none).
    Flow(Option<crate::store::LoginFlow>),
    /// Import: the lines whose code existed already, and what became of
    /// each.
    Imported(Vec<(u64, crate::store::Existing)>),
    /// A webhook as written (`None`: there was no such webhook).
    Webhook(Option<crate::store::outbox::Webhook>),
    /// Outbox events claimed for delivery.
    Events(Vec<crate::store::outbox::OutboxEvent>),
    /// How many rows a write removed.
    Count(u64),
    Nothing,
}

/// Where the writer sends one write's outcome.
pub(super) type Reply = crate::store::queue::Reply<Done>;

pub(super) type Outcome = (Reply, Result<Done, StoreError>);

#[derive(Clone)]
pub(super) struct Replies {
    /// The runtime that serves requests; `None` when the store was opened
    /// outside one (tools, some tests), and then replies go out directly.
    runtime: Option<Handle>,
}

impl Replies {
    pub(super) fn new() -> Self {
        Self {
            runtime: Handle::try_current().ok(),
        }
    }

    /// Replies that always go out from the calling thread.
    pub(super) fn direct() -> Self {
        Self { runtime: None }
    }

    /// Answers every one of `replies` with the same error.
    pub(super) fn fail_all(
        &self,
        replies: impl IntoIterator<Item = Reply>,
        error: impl Fn() -> StoreError,
    ) {
        self.send(
            replies
                .into_iter()
                .map(|reply| (reply, Err(error())))
                .collect(),
        );
    }

    pub(super) fn send(&self, outcomes: Vec<Outcome>) {
        match &self.runtime {
            // A runtime that is shutting down drops the task, and with it
            // the senders: their receivers see the store as closed.
            Some(rt) if outcomes.len() > 1 => {
                rt.spawn(async move { send_now(outcomes) });
            }
            _ => send_now(outcomes),
        }
    }
}

fn send_now(outcomes: Vec<Outcome>) {
    for (reply, outcome) in outcomes {
        let _ = reply.send(outcome);
    }
}
