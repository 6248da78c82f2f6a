//! The PostgreSQL backend: what opens a [`PostgresStore`] and what checks
//! its database.

use std::sync::Arc;

use async_trait::async_trait;

use super::{PostgresSettings, PostgresStore, doctor};
use crate::domain::CodeGenerator;
use crate::store::{LinkStore, Purpose};

pub(crate) struct Backend {
    settings: PostgresSettings,
}

impl Backend {
    pub(crate) fn new(settings: PostgresSettings) -> Self {
        Self { settings }
    }
}

#[async_trait]
impl crate::store::Backend for Backend {
    /// Opens the pool (and the replica's); the schema is made or migrated
    /// under an advisory lock, so instances and imports may run beside
    /// each other.
    async fn open(
        &self,
        codes: CodeGenerator,
        _purpose: Purpose,
    ) -> anyhow::Result<Arc<dyn LinkStore>> {
        let store = PostgresStore::open(self.settings.clone(), codes).await?;
        let stats = store.postgres_stats();
        tracing::info!(
            postgres = %stats.server_version,
            pool_size = stats.pool_size,
            batch_max = stats.writer.batch_max,
            "store opened"
        );
        Ok(Arc::new(store))
    }

    fn doctor(&self, _full: bool) -> anyhow::Result<bool> {
        doctor::run(&self.settings)
    }
}
