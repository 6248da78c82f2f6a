//! What both writers share: the bounded queue in front of a group-commit
//! writer (a full queue is [`StoreError::Busy`], a gone writer
//! [`StoreError::Closed`]), the counters `/stats` and the metrics show,
//! and how many fresh codes one create may draw after collisions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::StoreError;

/// Fresh codes one create may draw after collisions before it fails with
/// [`StoreError::CodeSpaceExhausted`]. With 62^10 codes a second draw is
/// already astronomically rare; hitting the bound means the code length
/// is too short for the table.
pub(crate) const MAX_CODE_ATTEMPTS: u32 = 16;

/// Where a writer answers one queued request.
pub(crate) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// A writer's counters, kept as it commits.
#[derive(Debug, Default)]
pub(crate) struct WriteCounters {
    commits: AtomicU64,
    rows: AtomicU64,
    largest_batch: AtomicU64,
    failed_batches: AtomicU64,
    code_collisions: AtomicU64,
    rejected_full: AtomicU64,
}

/// The `/stats` view of [`WriteCounters`].
#[derive(Debug, Clone, Serialize)]
pub struct WriteCounts {
    pub commits: u64,
    pub rows: u64,
    pub largest_batch: u64,
    pub failed_batches: u64,
    pub code_collisions: u64,
    pub rejected_queue_full: u64,
}

impl WriteCounters {
    /// A batch of `rows` new links committed.
    pub(crate) fn committed(&self, rows: u64) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.largest_batch.fetch_max(rows, Ordering::Relaxed);
        metrics::histogram!("litelink_write_batch_size").record(rows as f64);
    }

    /// A transaction of another kind (an edit, a delete) committed.
    pub(crate) fn committed_other(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// A batch rolled back as a whole.
    pub(crate) fn failed(&self) {
        self.failed_batches.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` drawn codes were taken and others drawn.
    pub(crate) fn collided(&self, n: u64) {
        self.code_collisions.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    pub(crate) fn counts(&self) -> WriteCounts {
        WriteCounts {
            commits: self.commits.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            largest_batch: self.largest_batch.load(Ordering::Relaxed),
            failed_batches: self.failed_batches.load(Ordering::Relaxed),
            code_collisions: self.code_collisions.load(Ordering::Relaxed),
            rejected_queue_full: self.rejected_full.load(Ordering::Relaxed),
        }
    }
}

/// The queue in front of a writer: messages of type `M`, each carrying
/// the [`Reply`] its caller waits on.
pub(crate) struct WriteQueue<M> {
    tx: mpsc::Sender<M>,
    capacity: usize,
    counters: Arc<WriteCounters>,
}

impl<M> WriteQueue<M> {
    /// A queue of `capacity` messages, and its receiving end for the writer.
    pub(crate) fn new(capacity: usize) -> (Self, mpsc::Receiver<M>) {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::channel(capacity);
        let queue = Self {
            tx,
            capacity,
            counters: Arc::default(),
        };
        (queue, rx)
    }

    /// Queues the message `message` makes around a reply and waits for the
    /// answer: [`StoreError::Busy`] at once when the queue is full,
    /// [`StoreError::Closed`] when the writer is gone.
    pub(crate) async fn ask<T>(
        &self,
        message: impl FnOnce(Reply<T>) -> M,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        match self.tx.try_send(message(reply)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.counters.rejected_full.fetch_add(1, Ordering::Relaxed);
                return Err(StoreError::Busy);
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(StoreError::Closed),
        }
        // The writer drops a reply unanswered only if it dies mid-batch.
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Queues `message` once there is room (a shutdown: it comes after
    /// everything queued); `false` when the writer is gone.
    pub(crate) async fn send(&self, message: M) -> bool {
        self.tx.send(message).await.is_ok()
    }

    /// A sender that does not keep the queue open.
    pub(crate) fn downgrade(&self) -> mpsc::WeakSender<M> {
        self.tx.downgrade()
    }

    /// Messages waiting now.
    pub(crate) fn len(&self) -> usize {
        self.capacity - self.tx.capacity()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn counters(&self) -> &Arc<WriteCounters> {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_is_busy_and_a_gone_writer_closed() {
        let (queue, mut rx) = WriteQueue::<Reply<u32>>::new(1);
        let queue = Arc::new(queue);
        // The first waits in the queue; the second finds it full.
        let first = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move { queue.ask(|reply| reply).await }
        });
        let reply = rx.recv().await.unwrap();
        let _ = reply.send(Ok(7));
        assert_eq!(first.await.unwrap().unwrap(), 7);

        let waiting = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move { queue.ask(|reply| reply).await }
        });
        while queue.is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(matches!(queue.ask(|r| r).await, Err(StoreError::Busy)));
        assert!(queue.counters().counts().rejected_queue_full >= 1);
        // A reply dropped unanswered, then a closed queue.
        drop(rx.recv().await.unwrap());
        assert!(matches!(waiting.await.unwrap(), Err(StoreError::Closed)));
        drop(rx);
        assert!(matches!(queue.ask(|r| r).await, Err(StoreError::Closed)));
    }
}
