//! What `keys`, `users`, `export` and `import` do: each opens the store,
//! works, and closes it.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use litelink_service::domain::Role;
use litelink_service::domain::user::{check_user_name, fold_name};
use litelink_service::domain::{DomainId, DomainRedirects, Host, TargetPolicy, TargetUrl};
use litelink_service::domains::{DomainRegistry, DomainSettings};
use litelink_service::keys;
use litelink_service::startup::open_tool_store;
use litelink_service::store::outbox::{EventKind, WebhookWrite};
use litelink_service::store::{
    Existing, ImportRow, LinkStore, NewUser, Purpose, User, UserChange, UserWrite,
};
use litelink_service::transfer::{self, Checker};
use litelink_service::users::{hash_password, one_time_password};
use litelink_service::webhooks::streams::is_stream;
use litelink_service::webhooks::{rotation, sign, url_problem};

use crate::cli::{
    DomainsCommand, ExportArgs, ImportArgs, KeysCommand, RedirectArgs, UsersCommand,
    WebhooksCommand,
};

/// Rows per import transaction: large enough that a commit (and its sync)
/// is a small share of the time, and that named codes landing at random
/// places of their index share its pages (each dirty page is written to
/// the WAL once per transaction).
const IMPORT_BATCH: usize = 100_000;

/// Batches handed to the writer and not yet answered; bounds memory.
const IMPORT_IN_FLIGHT: usize = 3;

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

pub fn keys(command: KeysCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        match command {
            KeysCommand::Create {
                name,
                user,
                admin,
                domain,
                yourls_secret_file,
                store,
            } => {
                keys::check_name(&name).map_err(anyhow::Error::msg)?;
                let yourls = yourls_secret_file
                    .as_deref()
                    .map(keys::YourlsSecret::read)
                    .transpose()
                    .map_err(anyhow::Error::msg)?;
                if user.is_none() {
                    check_user_name(&name)
                        .map_err(|e| anyhow::anyhow!("{e}: name the key's user with --user"))?;
                }
                let store = open_tool_store(&store.settings(), Purpose::Tool).await?;
                let created = async {
                    let domain = match &domain {
                        Some(name) => Some(named_domain(&registry(&store).await?, name)?),
                        None => None,
                    };
                    // Checked before a user is made for it, which would
                    // otherwise stay behind without a key.
                    if store.keys().await?.iter().any(|k| k.name == name) {
                        anyhow::bail!("a key named '{name}' exists");
                    }
                    let owner = match &user {
                        Some(user) => find_user(&store, user).await?.id,
                        None => {
                            let new = NewUser {
                                name: name.clone(),
                                email: None,
                                role: if admin { Role::Admin } else { Role::Member },
                                domain,
                                password: None,
                                must_change: false,
                            };
                            made_user(store.write_user(UserWrite::Create(new)).await, &name)?.id
                        }
                    };
                    let (secret, hash) = keys::new_secret();
                    let key = store.create_key(&name, owner, hash, domain).await?;
                    anyhow::Ok((secret, key))
                }
                .await;
                store.close().await;
                let (secret, key) = created?;
                println!("{secret}");
                if let Some(yourls) = &yourls {
                    println!("signature token: {}", yourls.token(key.id, &key.hash));
                }
                eprintln!(
                    "key '{}' created for the user '{}' ({}){}; this is the only time it is shown",
                    key.name,
                    key.user_name,
                    key.role.as_str(),
                    domain.map_or(String::new(), |d| format!(" for the domain {d}"))
                );
                Ok(ExitCode::SUCCESS)
            }
            KeysCommand::List { store } => {
                let store = open_tool_store(&store.settings(), Purpose::Tool).await?;
                let listed =
                    async { anyhow::Ok((store.keys().await?, store.domains().await?)) }.await;
                store.close().await;
                let (keys, domains) = listed?;
                let show = |t: Option<litelink_service::domain::Timestamp>| {
                    t.map_or_else(|| "-".to_owned(), |t| t.to_string())
                };
                println!(
                    "{:<24} {:<24} {:<6} {:<24} {:<24} {:<24} {:<24}",
                    "name", "user", "role", "domain", "created", "last used", "revoked"
                );
                for k in keys {
                    println!(
                        "{:<24} {:<24} {:<6} {:<24} {:<24} {:<24} {:<24}",
                        k.name,
                        k.user_name,
                        k.role.as_str(),
                        domain_label(&domains, k.domain),
                        k.created_at,
                        show(k.last_used_at),
                        show(k.revoked_at)
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            KeysCommand::Revoke { name, store } => {
                let store = open_tool_store(&store.settings(), Purpose::Tool).await?;
                let revoked = store.revoke_key(&name).await;
                store.close().await;
                if revoked? {
                    eprintln!("key '{name}' revoked");
                    Ok(ExitCode::SUCCESS)
                } else {
                    eprintln!("no active key named '{name}'");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
    })
}

/// A domain as the tools show it: `-` for none, `default`, or its host.
fn domain_label(domains: &[litelink_service::domain::Domain], id: Option<DomainId>) -> String {
    match id {
        None => "-".to_owned(),
        Some(id) if id.is_default() => "default".to_owned(),
        Some(id) => domains
            .iter()
            .find(|d| d.id == id)
            .and_then(|d| d.host.as_ref())
            .map_or_else(|| "(removed)".to_owned(), |h| h.to_string()),
    }
}

/// The user `name` names, regardless of case, or an error saying so.
async fn find_user(store: &Arc<dyn LinkStore>, name: &str) -> anyhow::Result<User> {
    let folded = fold_name(name);
    store
        .users()
        .await?
        .into_iter()
        .find(|u| fold_name(&u.name) == folded)
        .ok_or_else(|| anyhow::anyhow!("no user '{name}' (see `litelink users list`)"))
}

/// A user just written, or why not.
fn made_user(
    written: Result<Option<User>, litelink_service::store::StoreError>,
    name: &str,
) -> anyhow::Result<User> {
    written?.ok_or_else(|| anyhow::anyhow!("no user '{name}' (see `litelink users list`)"))
}

pub fn users(command: UsersCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        match command {
            UsersCommand::Create {
                name,
                role,
                email,
                domain,
                local_login,
                store,
            } => {
                check_user_name(&name).map_err(anyhow::Error::msg)?;
                let email = email
                    .map(|e| litelink_service::users::Email::try_from(e).map(|e| e.into_string()))
                    .transpose()
                    .map_err(anyhow::Error::msg)?;
                let password = match local_login.is_on() {
                    true => Some(one_time_password()),
                    false => None,
                };
                let hash = match &password {
                    Some(p) => Some(hash_password(p.clone()).await.map_err(anyhow::Error::msg)?),
                    None => None,
                };
                let store = open_tool_store(&store.settings(), Purpose::Tool).await?;
                let created = async {
                    let domain = match &domain {
                        Some(name) => Some(named_domain(&registry(&store).await?, name)?),
                        None => None,
                    };
                    let new = NewUser {
                        name: name.clone(),
                        email,
                        role,
                        domain,
                        must_change: hash.is_some(),
                        password: hash,
                    };
                    made_user(store.write_user(UserWrite::Create(new)).await, &name)
                }
                .await;
                store.close().await;
                let user = created?;
                match password {
                    Some(password) => {
                        println!("{password}");
                        eprintln!(
                            "user '{}' created ({}); this one-time password is shown once and must be changed at first sign-in",
                            user.name,
                            user.role.as_str()
                        );
                    }
                    None => eprintln!(
                        "user '{}' created ({}) without a password: local passwords are off",
                        user.name,
                        user.role.as_str()
                    ),
                }
                Ok(ExitCode::SUCCESS)
            }
            UsersCommand::List { store } => {
                let store = open_tool_store(&store.settings(), Purpose::Tool).await?;
                let listed =
                    async { anyhow::Ok((store.users().await?, store.domains().await?)) }.await;
                store.close().await;
                let (users, domains) = listed?;
                println!(
                    "{:<24} {:<6} {:<24} {:<32} {:<8} {:<9} {:<24}",
                    "name", "role", "domain", "email", "disabled", "suspended", "created"
                );
                for u in users {
                    println!(
                        "{:<24} {:<6} {:<24} {:<32} {:<8} {:<9} {:<24}",
                        u.name,
                        u.role.as_str(),
                        domain_label(&domains, u.domain),
                        u.email.as_deref().unwrap_or("-"),
                        if u.disabled { "yes" } else { "no" },
                        if u.suspended { "yes" } else { "no" },
                        u.created_at
                    );
                }
                Ok(ExitCode::SUCCESS)
            }
            UsersCommand::SetRole { name, role, store } => {
                let change = UserChange {
                    role: Some(role),
                    ..UserChange::default()
                };
                let user = change_user(&store.settings(), &name, change).await?;
                eprintln!("user '{}' is now {}", user.name, user.role.as_str());
                Ok(ExitCode::SUCCESS)
            }
            UsersCommand::ResetPassword { name, store } => {
                let password = one_time_password();
                let hash = hash_password(password.clone())
                    .await
                    .map_err(anyhow::Error::msg)?;
                let change = UserChange {
                    password: Some((Some(hash), true)),
                    ..UserChange::default()
                };
                let user = change_user(&store.settings(), &name, change).await?;
                end_sessions(&store.settings(), user.id).await?;
                println!("{password}");
                eprintln!(
                    "user '{}' has a new one-time password, shown once; it must be changed at the next sign-in",
                    user.name
                );
                Ok(ExitCode::SUCCESS)
            }
            UsersCommand::Disable { name, store } => {
                let change = UserChange {
                    disabled: Some(true),
                    ..UserChange::default()
                };
                let user = change_user(&store.settings(), &name, change).await?;
                eprintln!("user '{}' disabled: their keys and sessions stop", user.name);
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// Ends every session of `user` (after a password reset).
async fn end_sessions(
    settings: &litelink_service::store::StoreSettings,
    user: litelink_service::domain::UserId,
) -> anyhow::Result<()> {
    let store = open_tool_store(settings, Purpose::Tool).await?;
    let ended = store
        .write_session(litelink_service::store::SessionWrite::EndOthers { user, keep: None })
        .await;
    store.close().await;
    Ok(ended?)
}

/// Applies `change` to the user `name` names.
async fn change_user(
    settings: &litelink_service::store::StoreSettings,
    name: &str,
    change: UserChange,
) -> anyhow::Result<User> {
    let store = open_tool_store(settings, Purpose::Tool).await?;
    let changed = async {
        let user = find_user(&store, name).await?;
        let write = UserWrite::Update {
            name: user.name.clone(),
            change,
        };
        made_user(store.write_user(write).await, name)
    }
    .await;
    store.close().await;
    changed
}

/// The domains of a store, as a server sees them (no default host: the
/// tools are not told one).
async fn registry(store: &Arc<dyn LinkStore>) -> anyhow::Result<DomainRegistry> {
    Ok(DomainRegistry::load(Arc::clone(store), DomainSettings::default()).await?)
}

/// The domain `name` names (a host, or `default`), or an error saying so.
fn named_domain(registry: &DomainRegistry, name: &str) -> anyhow::Result<DomainId> {
    registry
        .named(name)
        .ok_or_else(|| anyhow::anyhow!("no domain '{name}' (see `litelink domains list`)"))
}

/// A redirect option's value: a URL, or none for an empty string.
fn redirect(name: &str, raw: &str) -> anyhow::Result<Option<TargetUrl>> {
    if raw.is_empty() {
        return Ok(None);
    }
    TargetUrl::parse(raw)
        .map(Some)
        .map_err(|e| anyhow::anyhow!("--{name}: {e}"))
}

/// `current` with the redirects `args` give changed.
fn redirects(args: &RedirectArgs, mut current: DomainRedirects) -> anyhow::Result<DomainRedirects> {
    for (name, given, slot) in [
        ("root-redirect", &args.root_redirect, &mut current.root),
        (
            "not-found-redirect",
            &args.not_found_redirect,
            &mut current.not_found,
        ),
        (
            "expired-redirect",
            &args.expired_redirect,
            &mut current.expired,
        ),
    ] {
        if let Some(raw) = given {
            *slot = redirect(name, raw)?;
        }
    }
    Ok(current)
}

/// A domain's redirects, each checked as a link's target is (the deny
/// list, private addresses, this service's own host).
fn checked(redirects: &DomainRedirects, policy: &TargetPolicy) -> anyhow::Result<()> {
    for (name, url) in [
        ("root-redirect", &redirects.root),
        ("not-found-redirect", &redirects.not_found),
        ("expired-redirect", &redirects.expired),
    ] {
        if let Some(url) = url {
            policy
                .check(url, None)
                .map_err(|e| anyhow::anyhow!("--{name}: {e}"))?;
        }
    }
    Ok(())
}

pub fn domains(command: DomainsCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let store_args = match &command {
            DomainsCommand::Add { store, .. }
            | DomainsCommand::List { store }
            | DomainsCommand::Set { store, .. }
            | DomainsCommand::Remove { store, .. } => store.clone(),
        };
        let store = open_tool_store(&store_args.settings(), Purpose::Tool).await?;
        let done = run_domains(&store, command).await;
        store.close().await;
        done
    })
}

async fn run_domains(
    store: &Arc<dyn LinkStore>,
    command: DomainsCommand,
) -> anyhow::Result<ExitCode> {
    let registry = registry(store).await?;
    let show = |t: &Option<TargetUrl>| t.as_ref().map_or("-", |t| t.as_str()).to_owned();
    match command {
        DomainsCommand::Add {
            host,
            redirects: r,
            targets,
            ..
        } => {
            let host = Host::parse(&host).map_err(|e| anyhow::anyhow!("{host}: {e}"))?;
            let wanted = redirects(&r, DomainRedirects::default())?;
            checked(&wanted, &targets.policy()?)?;
            let added = registry.add(&host, wanted).await?;
            eprintln!(
                "domain '{}' added",
                added
                    .domain
                    .host
                    .map_or_else(String::new, |h| h.to_string())
            );
        }
        DomainsCommand::List { .. } => {
            println!(
                "{:<32} {:<32} {:<32} {:<32}",
                "domain", "root redirect", "not-found redirect", "expired redirect"
            );
            for d in registry.list() {
                let name = match (&d.host, d.default) {
                    (_, true) => "default".to_owned(),
                    (Some(h), false) => h.to_string(),
                    (None, false) => "-".to_owned(),
                };
                let r = &d.domain.redirects;
                println!(
                    "{:<32} {:<32} {:<32} {:<32}",
                    name,
                    show(&r.root),
                    show(&r.not_found),
                    show(&r.expired)
                );
            }
        }
        DomainsCommand::Set {
            host,
            redirects: r,
            targets,
            ..
        } => {
            let id = named_domain(&registry, &host)?;
            let wanted = redirects(&r, registry.redirects(id))?;
            checked(&wanted, &targets.policy()?)?;
            registry.set(id, wanted).await?;
            eprintln!("domain '{host}' changed");
        }
        DomainsCommand::Remove { host, force, .. } => {
            let id = named_domain(&registry, &host)?;
            if id.is_default() {
                anyhow::bail!("the default domain cannot be removed");
            }
            match registry.remove(id, force).await? {
                Some(gone) => eprintln!("domain '{host}' removed ({} links deleted)", gone.len()),
                None => anyhow::bail!("no domain '{host}'"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn export(args: ExportArgs) -> anyhow::Result<ExitCode> {
    let out: Box<dyn Write + Send> = match &args.out {
        Some(path) => Box::new(BufWriter::new(
            // Only its owner's: an export holds password hashes and
            // protected targets.
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?,
        )),
        None => Box::new(BufWriter::new(std::io::stdout())),
    };
    let writer = Arc::new(Mutex::new(Some(transfer::Writer::new(args.format, out)?)));
    // Links the format cannot carry whole: left out, or with --lossy
    // written without what it cannot carry; named either way.
    let partial: Arc<Mutex<Vec<String>>> = Arc::default();
    let lossy = args.lossy;
    runtime()?.block_on(async move {
        let store = open_tool_store(&args.store.settings(), Purpose::Tool).await?;
        let sink = Arc::clone(&writer);
        let named = Arc::clone(&partial);
        let exported = store
            .export(Box::new(move |record| {
                let mut w = sink.lock().unwrap_or_else(|e| e.into_inner());
                let Some(w) = w.as_mut() else {
                    return Ok(());
                };
                if !w.carries(&record) {
                    let mut named = named.lock().unwrap_or_else(|e| e.into_inner());
                    named.push(link_name(&record));
                    if !lossy {
                        return Ok(());
                    }
                }
                w.write(&record)
            }))
            .await;
        store.close().await;
        let n = exported?;
        let w = writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = w {
            w.finish()?;
        }
        let partial = std::mem::take(&mut *partial.lock().unwrap_or_else(|e| e.into_inner()));
        if !partial.is_empty() && !lossy {
            if let Some(path) = &args.out {
                let _ = std::fs::remove_file(path);
            }
            anyhow::bail!(
                "{} links have a password, rules or an expired_url, which CSV cannot carry: {}; \
                 export them as jsonl, or pass --lossy to write them without (a re-import makes them public)",
                partial.len(),
                partial.join(", ")
            );
        }
        for name in &partial {
            eprintln!("{name}: written without its password, rules and expired_url");
        }
        eprintln!("exported {n} records");
        Ok(ExitCode::SUCCESS)
    })
}

/// A record's link as `domain/code`, or its code on the default domain.
fn link_name(r: &litelink_service::store::Record) -> String {
    let code = r.code.as_deref().unwrap_or("?");
    match &r.domain {
        Some(d) => format!("{d}/{code}"),
        None => code.to_owned(),
    }
}

pub fn import(args: ImportArgs) -> anyhow::Result<ExitCode> {
    use litelink_service::import::{self, Item, Source, SourceOptions};
    if args.from != Source::Litelink && args.format.is_some() {
        anyhow::bail!(
            "--format is for --from litelink; --from {} has its own",
            args.from
        );
    }
    let options = SourceOptions {
        table_prefix: args.table_prefix.clone(),
        drop_unsupported_rules: args.drop_unsupported_rules,
    };
    let database = args
        .files
        .first()
        .and_then(|f| f.to_str())
        .filter(|f| f.starts_with("mysql://") || f.starts_with("mariadb://"))
        .map(|f| f.replacen("mariadb://", "mysql://", 1));
    runtime()?.block_on(async move {
        let mut csv = false;
        let items: import::Items = match (&args.api_url, &database) {
            (Some(_), _) if !args.files.is_empty() => {
                anyhow::bail!("--api-url reads the API: give no file beside it")
            }
            (Some(url), _) => {
                let token = api_token(&args)?;
                let bar = progress("{spinner} {pos} links read from the API");
                let items = import::api::read(
                    args.from,
                    url,
                    &token,
                    args.api_ca_file.as_deref(),
                    &options,
                    &|n| bar.set_position(n),
                )
                .await;
                bar.finish_and_clear();
                items?
            }
            (None, Some(url)) if args.from == Source::Yourls => {
                import::read_yourls_database(url, &options).await?
            }
            (None, Some(_)) => anyhow::bail!("a database is read with --from yourls only"),
            (None, None) if args.files.is_empty() => {
                anyhow::bail!("name a file to import (or --api-url)")
            }
            (None, None) if args.from == Source::Litelink => {
                let [file] = args.files.as_slice() else {
                    anyhow::bail!("--from litelink reads one file");
                };
                let input = BufReader::new(
                    File::open(file).with_context(|| format!("opening {}", file.display()))?,
                );
                csv = args.format == Some(transfer::Format::Csv);
                Box::new(
                    transfer::read(args.format.unwrap_or(transfer::Format::Jsonl), input).map(
                        |(line, r)| {
                            let item = match r {
                                Ok(r) => Item::Link(Box::new(r)),
                                Err(why) => Item::Invalid(why),
                            };
                            (line, item)
                        },
                    ),
                )
            }
            (None, None) => {
                // CSV rows are numbered by line; pages and dumps by link.
                csv = args
                    .files
                    .iter()
                    .any(|f| f.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")));
                import::read_files(args.from, &args.files, &options)?
            }
        };
        let settings = args.store.settings();
        // A SQLite file has one writer, so import takes its lock;
        // PostgreSQL takes imports beside servers.
        let targets = args.targets.policy()?;
        let store = open_tool_store(&settings, Purpose::Import).await?;
        let overwrite = args.on_conflict == crate::cli::OnConflict::Overwrite;
        // The rate counts from the store's opening: what reading a file
        // and storing it take, not the checks of opening a database.
        let started = Instant::now();
        let outcome = async {
            let mut checker =
                Checker::new(&store.users().await?, &store.domains().await?, targets);
            if let Some(owner) = &args.owner {
                checker = checker.owned_by(owner).map_err(anyhow::Error::msg)?;
            }
            if let Some(host) = &args.source_default_domain {
                let host = Host::parse(host)
                    .map_err(|e| anyhow::anyhow!("--source-default-domain {host}: {e}"))?;
                checker = checker.default_host(host);
            }
            let unit = args.from.unit(csv);
            let s = import_into(&store, items, checker, args.create_domains, overwrite, unit)
                .await?;
            // One event for the whole import, not one for each link.
            let counts = serde_json::json!({
                "source": args.from.to_string(),
                "imported": s.links,
                "tombstones": s.tombstones,
                "unchanged": s.unchanged.count,
                "skipped": s.skipped.count,
                "conflicts": s.conflicts.count,
                "overwritten": s.overwritten.count,
                "invalid": s.invalid.count,
            });
            store
                .record_event(EventKind::LinksImported, counts.to_string())
                .await?;
            anyhow::Ok(s)
        }
        .await;
        store.close().await;
        let mut s = outcome?;
        s.seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "imported {} links and {} tombstones; {} unchanged, {} skipped, {} conflicts, {} overwritten, {} invalid; {:.1} s, {:.0} records/s",
            s.links,
            s.tombstones,
            s.unchanged.count,
            s.skipped.count,
            s.conflicts.count,
            s.overwritten.count,
            s.invalid.count,
            s.seconds,
            (s.links + s.tombstones) as f64 / s.seconds.max(1e-9)
        );
        let unit = args.from.unit(csv);
        for (kind, lines) in [
            ("unchanged (the same code and target)", &s.unchanged),
            ("skipped", &s.skipped),
            ("conflicts (the code exists with another target; skipped)", &s.conflicts),
            ("overwritten", &s.overwritten),
            ("invalid", &s.invalid),
        ] {
            if lines.count > 0 {
                eprintln!("{kind}: {unit} {}", lines.first_lines());
            }
        }
        Ok(if s.invalid.count + s.conflicts.count == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        })
    })
}

/// The source API's token: from `--api-token-file`, else the environment.
fn api_token(args: &ImportArgs) -> anyhow::Result<litelink_service::import::api::Token> {
    const VAR: &str = "LITELINK_IMPORT_API_TOKEN";
    let token = match &args.api_token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading --api-token-file {}", path.display()))?,
        None => std::env::var(VAR).map_err(|_| {
            anyhow::anyhow!("an API token is needed: --api-token-file FILE, or {VAR}")
        })?,
    };
    anyhow::ensure!(!token.trim().is_empty(), "the API token is empty");
    Ok(litelink_service::import::api::Token::new(token))
}

#[derive(Default)]
struct ImportSummary {
    links: u64,
    tombstones: u64,
    unchanged: Lines,
    skipped: Lines,
    conflicts: Lines,
    overwritten: Lines,
    invalid: Lines,
    seconds: f64,
}

/// How many lines are of one kind, and the first [`Lines::SHOWN`] of them.
#[derive(Default)]
struct Lines {
    count: u64,
    first: Vec<u64>,
}

impl Lines {
    const SHOWN: usize = 20;

    fn add(&mut self, line: u64) {
        self.count += 1;
        if self.first.len() < Self::SHOWN {
            self.first.push(line);
        }
    }

    fn first_lines(&self) -> String {
        let mut first = self.first.clone();
        first.sort_unstable();
        let shown: Vec<String> = first.iter().map(u64::to_string).collect();
        let more = self.count - first.len() as u64;
        if more > 0 {
            format!("{} and {more} more", shown.join(", "))
        } else {
            shown.join(", ")
        }
    }
}

async fn import_into(
    store: &Arc<dyn LinkStore>,
    mut records: litelink_service::import::Items,
    mut checker: Checker,
    create_domains: bool,
    overwrite: bool,
    unit: &str,
) -> anyhow::Result<ImportSummary> {
    use litelink_service::import::Item;
    let one = unit.trim_end_matches('s');
    let bar = progress("{spinner} {pos} records stored ({per_sec})");
    let mut s = ImportSummary::default();
    let mut batch: Vec<ImportRow> = Vec::with_capacity(IMPORT_BATCH);
    // Batches queue at the writer while the next ones are read and checked,
    // so that the writer never waits for the parser.
    let mut storing: std::collections::VecDeque<
        tokio::task::JoinHandle<anyhow::Result<BatchOutcome>>,
    > = std::collections::VecDeque::new();
    loop {
        let next = records.next();
        let finished = next.is_none();
        if create_domains
            && let Some((_, Item::Link(record))) = &next
            && let Ok(Some(host)) = checker.new_domain(record)
        {
            let domain = store.add_domain(&host, DomainRedirects::default()).await?;
            say(&bar, format!("added the domain {host}"));
            checker.learn(host, domain.id);
        }
        // The first few of each kind are said with why.
        let report = |lines: &mut Lines, line: u64, why: &str| {
            if lines.count < Lines::SHOWN as u64 {
                say(&bar, format!("{one} {line}: {why}; skipped"));
            }
            lines.add(line);
        };
        match next {
            Some((line, Item::Invalid(why))) => report(&mut s.invalid, line, &why),
            Some((line, Item::Skip(why))) => report(&mut s.skipped, line, &why),
            Some((line, Item::Link(record))) => match checker.missing_domain(&record) {
                Some(why) => report(&mut s.skipped, line, &why),
                None => match checker.check(line, *record) {
                    Ok((row, warn)) => {
                        if let Some(name) = warn {
                            say(
                                &bar,
                                format!(
                                    "warning: no user named '{name}' here; its links are imported without an owner"
                                ),
                            );
                        }
                        batch.push(row);
                    }
                    Err(why) => report(&mut s.invalid, line, &why),
                },
            },
            None => {}
        }
        if batch.len() >= IMPORT_BATCH || (finished && !batch.is_empty()) {
            if storing.len() >= IMPORT_IN_FLIGHT
                && let Some(oldest) = storing.pop_front()
            {
                tally(&mut s, oldest.await??, &bar);
            }
            let rows = std::mem::replace(&mut batch, Vec::with_capacity(IMPORT_BATCH));
            let store = Arc::clone(store);
            storing.push_back(tokio::spawn(async move {
                store_batch(&store, rows, overwrite).await
            }));
        }
        if finished {
            break;
        }
    }
    while let Some(next) = storing.pop_front() {
        tally(&mut s, next.await??, &bar);
    }
    bar.finish_and_clear();
    Ok(s)
}

struct BatchOutcome {
    links: u64,
    tombstones: u64,
    existing: Vec<(u64, Existing)>,
}

async fn store_batch(
    store: &Arc<dyn LinkStore>,
    rows: Vec<ImportRow>,
    overwrite: bool,
) -> anyhow::Result<BatchOutcome> {
    let tombstones_in = rows.iter().filter(|r| r.deleted_at.is_some()).count() as u64;
    let lines_tomb: std::collections::HashSet<u64> = rows
        .iter()
        .filter(|r| r.deleted_at.is_some())
        .map(|r| r.line)
        .collect();
    let total = rows.len() as u64;
    let existing = store.import(rows, overwrite).await?;
    let skipped_tombs = existing
        .iter()
        .filter(|(l, _)| lines_tomb.contains(l))
        .count() as u64;
    let tombstones = tombstones_in - skipped_tombs;
    Ok(BatchOutcome {
        links: total - existing.len() as u64 - tombstones,
        tombstones,
        existing,
    })
}

fn tally(s: &mut ImportSummary, b: BatchOutcome, bar: &indicatif::ProgressBar) {
    for (line, what) in b.existing {
        match what {
            Existing::Unchanged => s.unchanged.add(line),
            Existing::Conflict => s.conflicts.add(line),
            Existing::Overwritten => s.overwritten.add(line),
        }
    }
    s.links += b.links;
    s.tombstones += b.tombstones;
    bar.inc(b.links + b.tombstones);
}

/// A line about the import: above the progress bar, or on stderr.
fn say(bar: &indicatif::ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// A counter on a terminal, drawn with `template`; nothing otherwise
/// (lines still print).
fn progress(template: &str) -> indicatif::ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar
}

/// How long `litelink health` waits for the whole answer.
const HEALTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `litelink health`: 0 when the server says it is ready, else 1.
pub fn health(args: crate::cli::HealthArgs) -> anyhow::Result<ExitCode> {
    let port = args.listen.port();
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(litelink_service::http::probe::ready(port, HEALTH_TIMEOUT));
    Ok(match answer {
        Ok(status) if status == 200 => {
            println!("ready");
            ExitCode::SUCCESS
        }
        Ok(status) => {
            println!("not ready: {status}");
            ExitCode::FAILURE
        }
        Err(why) => {
            println!("not ready: {why}");
            ExitCode::FAILURE
        }
    })
}

pub fn webhooks(command: WebhooksCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async move {
        let store_args = match &command {
            WebhooksCommand::Add { store, .. }
            | WebhooksCommand::List { store }
            | WebhooksCommand::Remove { store, .. }
            | WebhooksCommand::Enable { store, .. }
            | WebhooksCommand::Disable { store, .. }
            | WebhooksCommand::Rotate { store, .. } => store.clone(),
        };
        let store = open_tool_store(&store_args.settings(), Purpose::Tool).await?;
        let done = run_webhooks(&store, command).await;
        store.close().await;
        done
    })
}

async fn run_webhooks(
    store: &Arc<dyn LinkStore>,
    command: WebhooksCommand,
) -> anyhow::Result<ExitCode> {
    let no_such = |id: i64| anyhow::anyhow!("no webhook {id} (see `litelink webhooks list`)");
    // The event streams' rows are the server options' to make and change.
    let streams: Vec<i64> = store
        .webhooks()
        .await?
        .iter()
        .filter(|w| is_stream(&w.url))
        .map(|w| w.id)
        .collect();
    if let WebhooksCommand::Remove { id, .. }
    | WebhooksCommand::Enable { id, .. }
    | WebhooksCommand::Disable { id, .. }
    | WebhooksCommand::Rotate { id, .. } = &command
        && streams.contains(id)
    {
        return Err(no_such(*id));
    }
    let set = |id: i64, enabled: bool| WebhookWrite::Set {
        id,
        url: None,
        events: None,
        domain: None,
        enabled: Some(enabled),
    };
    match command {
        WebhooksCommand::Add {
            url,
            events,
            domain,
            webhooks_allow_private,
            targets,
            ..
        } => {
            let url = TargetUrl::parse(&url).map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
            if let Some(problem) = url_problem(&url, &targets.policy()?, webhooks_allow_private) {
                anyhow::bail!("{url}: {problem}");
            }
            let events = events
                .iter()
                .map(|name| {
                    EventKind::parse(name.trim())
                        .ok_or_else(|| anyhow::anyhow!("--events: unknown event '{name}'"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let domain = match domain {
                Some(name) => Some(named_domain(&registry(store).await?, &name)?),
                None => None,
            };
            let secret = sign::new_secret();
            let added = store
                .write_webhook(WebhookWrite::Add {
                    url: url.as_str().to_owned(),
                    events,
                    domain,
                    secret: secret.clone(),
                })
                .await?
                .context("the new webhook was not read back")?;
            eprintln!(
                "webhook {} added; its signing secret, shown only now:",
                added.id
            );
            println!("{secret}");
        }
        WebhooksCommand::List { .. } => {
            let registry = registry(store).await?;
            println!(
                "{:<6} {:<8} {:<40} {:<20} url",
                "id", "enabled", "events", "domain"
            );
            for w in store
                .webhooks()
                .await?
                .into_iter()
                .filter(|w| !is_stream(&w.url))
            {
                let events: Vec<&str> = w.events.iter().map(|e| e.as_str()).collect();
                let domain = w.domain.map_or_else(
                    || "all".to_owned(),
                    |d| {
                        registry
                            .host_of(d)
                            .filter(|_| !d.is_default())
                            .map_or_else(|| "default".to_owned(), |h| h.to_string())
                    },
                );
                println!(
                    "{:<6} {:<8} {:<40} {:<20} {}",
                    w.id,
                    if w.enabled { "yes" } else { "no" },
                    events.join(","),
                    domain,
                    w.url
                );
            }
        }
        WebhooksCommand::Remove { id, .. } => {
            if !store.remove_webhook(id).await? {
                return Err(no_such(id));
            }
            eprintln!("webhook {id} removed");
        }
        WebhooksCommand::Enable { id, .. } => {
            store
                .write_webhook(set(id, true))
                .await?
                .ok_or_else(|| no_such(id))?;
            eprintln!("webhook {id} enabled");
        }
        WebhooksCommand::Disable { id, .. } => {
            store
                .write_webhook(set(id, false))
                .await?
                .ok_or_else(|| no_such(id))?;
            eprintln!("webhook {id} disabled");
        }
        WebhooksCommand::Rotate { id, .. } => {
            let (secret, write) = rotation(id);
            store
                .write_webhook(write)
                .await?
                .ok_or_else(|| no_such(id))?;
            eprintln!(
                "webhook {id}: a new signing secret, shown only now (the old one signs too for 24 hours):"
            );
            println!("{secret}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
