//! The subcommands that do not serve: `check`, `pull`, `push` and `sign`
//! (`publish`), `precompile`.

use anyhow::Context;
use codemode_server::{default_cache_dir, oci};

use crate::cli::{Cli, Command, RegistryAccess};

/// `codemode-host check FILE..`: each file's capabilities, or every reason it cannot
/// load, on stdout.
pub(crate) fn check(cli: &Cli, files: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let cache_dir = cli.cache_dir.clone().or_else(default_cache_dir);
    let mut failed = 0;
    for file in files {
        let label = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        match codemode_server::check_plugin(file, &cli.offline_loading(), cache_dir.as_deref()) {
            Ok(capabilities) => {
                let count = capabilities.len();
                println!(
                    "{label}: {count} {}",
                    if count == 1 {
                        "capability"
                    } else {
                        "capabilities"
                    }
                );
                if let Some(provenance) = oci::provenance_of(file, None) {
                    println!(
                        "  pulled from {} ({}), {}",
                        provenance.reference,
                        provenance.digest,
                        match &provenance.key_id {
                            Some(key_id) => format!("signature verified by key {key_id}"),
                            None => "signature not verified".to_owned(),
                        }
                    );
                }
                for capability in capabilities {
                    println!("  {}", capability.signature);
                    println!("    id: {}", capability.id);
                    if !capability.annotations.is_empty() {
                        let hints: Vec<String> = capability
                            .annotations
                            .iter()
                            .map(|(name, value)| format!("{name}={value}"))
                            .collect();
                        println!("    annotations: {}", hints.join(" "));
                    }
                    println!("    {}", capability.summary);
                }
            }
            Err(reasons) => {
                failed += 1;
                println!("{label}: cannot load");
                for reason in reasons {
                    println!("  {reason}");
                }
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} plugin file(s) cannot load");
    Ok(())
}

/// `pull`: one plugin from a registry into the plugins folder.
pub(crate) fn pull(cli: &Cli) -> anyhow::Result<()> {
    let Some(Command::Pull {
        reference,
        name,
        digest,
        registry,
    }) = &cli.command
    else {
        anyhow::bail!("not the pull command");
    };
    let source = oci::PluginSource {
        reference: reference.clone(),
        name: name.clone().unwrap_or_else(|| reference.name().to_owned()),
        pinned: digest.clone(),
        policy: cli.pull.verify,
        keys: cli.pull.verify_keys.clone(),
        auth: registry_auth(registry),
        insecure: registry.insecure,
    };
    let limits = cli.pull_limits();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let pulled = runtime
        .block_on(oci::pull(&source, &cli.plugins, limits))
        .map_err(|failure| anyhow::Error::msg(failure.message))?;
    println!(
        "{}: {} ({}) from {}; {}",
        pulled.file.display(),
        if pulled.changed {
            "pulled"
        } else {
            "already up to date"
        },
        pulled.digest,
        source.reference,
        pulled.verification
    );
    Ok(())
}

/// The registry credentials `--registry-auth` or `--registry-token` name.
fn registry_auth(access: &RegistryAccess) -> oci::RegistryAuth {
    match (&access.registry_auth, &access.registry_token) {
        (_, Some(token)) => oci::RegistryAuth::TokenFile(token.clone()),
        (Some(config), None) => oci::RegistryAuth::DockerConfig(config.clone()),
        (None, None) => oci::RegistryAuth::DockerDefault,
    }
}

/// Where `push` and `sign` publish: `reference`, reached as `access` says.
fn destination(reference: &codemode_oci::Reference, access: &RegistryAccess) -> oci::Destination {
    oci::Destination {
        reference: reference.clone(),
        auth: registry_auth(access),
        insecure: access.insecure,
    }
}

/// `push` and `sign`: a plugin published to a registry.
pub(crate) fn publish(cli: &Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match &cli.command {
        Some(Command::Push {
            file,
            reference,
            key,
            registry,
        }) => {
            let destination = destination(reference, registry);
            let published = runtime
                .block_on(oci::push(
                    file,
                    &destination,
                    key.as_deref(),
                    cli.pull_limits(),
                ))
                .map_err(anyhow::Error::msg)?;
            match &published.key_id {
                Some(key_id) => println!(
                    "pushed {} to {reference} ({}), signed with key {key_id}",
                    file.display(),
                    published.digest
                ),
                None => println!(
                    "pushed {} to {reference} ({})",
                    file.display(),
                    published.digest
                ),
            }
        }
        Some(Command::Sign {
            reference,
            key,
            registry,
        }) => {
            let destination = destination(reference, registry);
            let published = runtime
                .block_on(oci::sign(&destination, key, cli.pull_limits()))
                .map_err(anyhow::Error::msg)?;
            println!(
                "signed {reference} ({}) with key {}",
                published.digest,
                published.key_id.unwrap_or_default()
            );
        }
        _ => anyhow::bail!("not the push or sign command"),
    }
    Ok(())
}

/// `codemode-host precompile`: fills the cache, one line per component on stdout.
pub(crate) fn precompile(cli: &Cli) -> anyhow::Result<()> {
    let cache_dir = cli
        .cache_dir
        .clone()
        .or_else(default_cache_dir)
        .context("no cache folder: pass --cache-dir DIR (HOME and XDG_CACHE_HOME are unset)")?;
    let report = codemode_server::precompile(&cli.plugins, &cache_dir, &cli.offline_loading())?;
    let mut failed = 0;
    for entry in &report {
        match &entry.outcome {
            Ok(true) => println!("{}: already cached", entry.name),
            Ok(false) => println!("{}: compiled in {} ms", entry.name, entry.millis),
            Err(reason) => {
                failed += 1;
                println!("{}: cannot load: {reason}", entry.name);
            }
        }
    }
    println!("cache: {}", cache_dir.display());
    anyhow::ensure!(failed == 0, "{failed} plugin(s) cannot load");
    Ok(())
}
