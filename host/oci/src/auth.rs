//! Registry credentials from the files operators already have: a Docker
//! `config.json` (`docker login`, `oras login` and CI systems write it) and a
//! token file (one registry token). The files are read by the caller (as its
//! other secrets files are); this reads their text.

use base64::Engine as _;
use serde::Deserialize;

use crate::client::Credentials;

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, Entry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: std::collections::BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// The credentials a Docker `config.json` holds for `registry`; `None` when it
/// has none for it (the registry is then asked anonymously).
///
/// # Errors
///
/// The text is not a Docker config, its entry for the registry cannot be read,
/// or the registry's credentials are only in a credential helper (which would
/// mean running a program this server does not run).
pub fn from_docker_config(text: &str, registry: &str) -> Result<Option<Credentials>, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not a Docker config.json: {e}"))?;
    if !value.is_object() {
        return Err("not a Docker config.json: not a JSON object".to_owned());
    }
    let config: DockerConfig =
        serde_json::from_value(value).map_err(|e| format!("not a Docker config.json: {e}"))?;
    // Entries are keyed by host, sometimes as a URL (`https://host/v1/`).
    let entry = config.auths.iter().find(|(key, _)| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next() == Some(registry)
    });
    let helper = config
        .cred_helpers
        .get(registry)
        .or(config.creds_store.as_ref());
    let helper_only = || {
        format!(
            "the credentials of {registry} are in the credential helper `{}`, which this server does not run: give them in `auths` or in a token file",
            helper.map(String::as_str).unwrap_or_default()
        )
    };
    let Some((_, entry)) = entry else {
        // A helper named for this registry holds its credentials; a global
        // `credsStore` (Docker Desktop's default) says nothing of a registry
        // docker never logged in to: asked anonymously.
        if config.cred_helpers.contains_key(registry) {
            return Err(helper_only());
        }
        return Ok(None);
    };
    let empty = entry.auth.as_deref().is_none_or(str::is_empty)
        && entry.username.is_none()
        && entry.registrytoken.as_deref().is_none_or(str::is_empty)
        && entry.identitytoken.as_deref().is_none_or(str::is_empty);
    if empty && helper.is_some() {
        // `docker login` with a helper leaves an empty entry behind.
        return Err(helper_only());
    }
    if let Some(token) = entry.registrytoken.as_deref().filter(|t| !t.is_empty()) {
        return Ok(Some(Credentials::Bearer(token.to_owned())));
    }
    if entry
        .identitytoken
        .as_deref()
        .is_some_and(|t| !t.is_empty())
    {
        return Err(format!(
            "the entry of {registry} holds an identity token (an OAuth refresh token), which this server does not exchange: give a user and password or a token file"
        ));
    }
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some(Credentials::Basic {
            username: username.clone(),
            password: password.clone(),
        }));
    }
    let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) else {
        return Ok(None);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| format!("the `auth` of {registry} is not base64 of user:password"))?;
    let (username, password) = decoded
        .split_once(':')
        .ok_or_else(|| format!("the `auth` of {registry} is not base64 of user:password"))?;
    Ok(Some(Credentials::Basic {
        username: username.to_owned(),
        password: password.to_owned(),
    }))
}

/// A token file's token: its text without surrounding whitespace.
///
/// # Errors
///
/// The file is empty, or holds more than one line or a character a header
/// cannot carry.
pub fn from_token_file(text: &str) -> Result<Credentials, String> {
    let token = text.trim();
    if token.is_empty() {
        return Err("the token file is empty".to_owned());
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "the token file holds more than one token (or a space or control character)".to_owned(),
        );
    }
    Ok(Credentials::Bearer(token.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(credentials: Option<Credentials>) -> Option<(String, String)> {
        match credentials {
            Some(Credentials::Basic { username, password }) => Some((username, password)),
            _ => None,
        }
    }

    #[test]
    fn docker_config_entries_read_as_docker_writes_them() -> Result<(), String> {
        // "alice:s3cret:x" in base64: the password may hold a colon.
        let config = r#"{"auths": {
            "registry.example:5000": {"auth": "YWxpY2U6czNjcmV0Ong="},
            "https://index.example/v1/": {"username": "bob", "password": "pw"},
            "tokens.example": {"registrytoken": "abc"},
            "refresh.example": {"identitytoken": "r"}
        }}"#;
        assert_eq!(
            basic(from_docker_config(config, "registry.example:5000")?),
            Some(("alice".to_owned(), "s3cret:x".to_owned()))
        );
        assert_eq!(
            basic(from_docker_config(config, "index.example")?),
            Some(("bob".to_owned(), "pw".to_owned()))
        );
        assert!(matches!(
            from_docker_config(config, "tokens.example")?,
            Some(Credentials::Bearer(token)) if token == "abc"
        ));
        assert!(from_docker_config(config, "other.example")?.is_none());
        assert_eq!(
            from_docker_config(config, "refresh.example").err(),
            Some("the entry of refresh.example holds an identity token (an OAuth refresh token), which this server does not exchange: give a user and password or a token file".to_owned())
        );
        let helper = r#"{"auths": {}, "credHelpers": {"ecr.example": "ecr-login"}}"#;
        assert_eq!(
            from_docker_config(helper, "ecr.example").err(),
            Some("the credentials of ecr.example are in the credential helper `ecr-login`, which this server does not run: give them in `auths` or in a token file".to_owned())
        );
        // A global store says nothing of registries never logged in to; an
        // empty entry beside it is a login the store holds.
        let store = r#"{"auths": {"logged.example": {}}, "credsStore": "desktop"}"#;
        assert!(from_docker_config(store, "public.example")?.is_none());
        assert_eq!(
            from_docker_config(store, "logged.example").err(),
            Some("the credentials of logged.example are in the credential helper `desktop`, which this server does not run: give them in `auths` or in a token file".to_owned())
        );
        assert!(from_docker_config("[]", "x").is_err());
        Ok(())
    }

    #[test]
    fn a_token_file_holds_one_token() {
        assert!(matches!(from_token_file(" t0ken\n"), Ok(Credentials::Bearer(t)) if t == "t0ken"));
        assert!(from_token_file("\n").is_err());
        assert!(from_token_file("a\nb").is_err());
    }
}
