//! `litelink doctor --store postgres://...`.

use super::PostgresSettings;

/// `doctor --store postgres://...`: can this database be reached, which
/// schema does it hold, and can it be written (not a replica)?
pub(crate) fn run(settings: &PostgresSettings) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let (mut config, connector, _) = super::connect_config(&settings.url)?;
        config.connect_timeout(settings.wait);
        let (client, connection) = config.connect(connector).await?;
        let task = tokio::spawn(connection);
        let version: String = client.query_one("SHOW server_version", &[]).await?.get(0);
        println!("PostgreSQL version: {version}");
        let schema: Option<i32> = match client
            .query_opt("SELECT version FROM litelink_schema", &[])
            .await
        {
            Ok(row) => row.map(|r| r.get(0)),
            Err(_) => None,
        };
        let latest = super::migrations::LATEST;
        let mut ok = true;
        match schema {
            None => println!("schema version:     none yet (`litelink serve` makes it)"),
            Some(v) if v > latest => {
                println!("schema version:     {v} of {latest} (newer than this litelink)");
                ok = false;
            }
            Some(v) => println!("schema version:     {v} of {latest}"),
        }
        if schema.is_some() {
            let links: i64 = client
                .query_one("SELECT count(*) FROM links WHERE deleted_at IS NULL", &[])
                .await?
                .get(0);
            let tombstones: i64 = client
                .query_one(
                    "SELECT count(*) FROM links WHERE deleted_at IS NOT NULL",
                    &[],
                )
                .await?
                .get(0);
            println!(
                "links:              {links} (and {tombstones} deleted codes kept as tombstones)"
            );
        }
        let replica: bool = client
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await?
            .get(0);
        println!(
            "writable:           {}",
            if replica {
                "no (a replica in recovery)"
            } else {
                "yes"
            }
        );
        ok &= !replica;
        println!(
            "result:             {}",
            if ok { "ok" } else { "PROBLEMS FOUND" }
        );
        drop(client);
        let _ = task.await;
        Ok(ok)
    })
}
