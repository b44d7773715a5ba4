//! The single-use tokens of approvals' states, claimed in Redis so that a
//! state answered on one replica is spent on all.

use std::time::Duration;

use redis::aio::ConnectionManager;

use super::super::task::Unavailable;
use super::connection::ask;
use super::keys::CLAIM_KEY;
use super::time::millis;

/// Claims `token` for `ttl` (`SET NX PX`): `true` the first time on any
/// replica.
pub(super) async fn claim(
    connection: &ConnectionManager,
    token: &str,
    ttl: Duration,
) -> Result<bool, Unavailable> {
    let key = format!("{CLAIM_KEY}{token}");
    let ttl = millis(ttl).max(1);
    let set: Option<String> = ask("claim a token", || {
        let mut request = redis::cmd("SET");
        request.arg(&key).arg(1).arg("NX").arg("PX").arg(ttl);
        let mut connection = connection.clone();
        async move { request.query_async(&mut connection).await }
    })
    .await?;
    Ok(set.is_some())
}
