//! [`check_url`]: whether a URL this server's HTTP clients were given may be
//! reached with a credential: absolute, `https` (or `http` on a loopback host),
//! no query, fragment or user info.

/// Why a URL given to a flag or a config key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {url}: {reason}")]
pub struct UrlError {
    /// The flag.
    pub flag: &'static str,
    /// The URL given.
    pub url: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Checks that `url` can be an issuer or a resource URL: absolute, `https`
/// (or `http` on a loopback host), no fragment, no query, no user info.
///
/// # Errors
///
/// [`UrlError`] naming `flag` and what is wrong.
pub fn check_url(flag: &'static str, url: &str) -> Result<url::Url, UrlError> {
    let refuse = |reason| UrlError {
        flag,
        url: url.to_owned(),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|_| refuse("not an absolute URL"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => return Err(refuse("names no host")),
    };
    match parsed.scheme() {
        "https" => {}
        "http" if loopback => {}
        "http" => return Err(refuse("must be https (http only on a loopback host)")),
        _ => return Err(refuse("must be an https URL")),
    }
    if parsed.fragment().is_some() || parsed.query().is_some() {
        return Err(refuse("must have no query and no fragment"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(refuse("must not carry a user name or password"));
    }
    Ok(parsed)
}
