//! The balance and the balance transactions, as the API reads them.

use super::view;
use crate::db::ledger::{self as rows, ListFilter};
use crate::db::merchants::Merchant;
use crate::db::read_snapshot;
use crate::domain::now;
use crate::error::ApiError;
use crate::state::AppState;

/// `GET /v1/balance`: exact at this moment (pending money whose `available_on` has passed
/// counts as available, with nothing written), its two sums read on one snapshot.
pub async fn balance(state: &AppState, merchant: &Merchant) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let balances = state
        .db
        .run(move |conn| read_snapshot(conn, |conn| rows::balance(conn, &merchant_id, now())))
        .await?;
    view::render_balance(balances).map_err(ApiError::internal)
}

pub async fn list(
    state: &AppState,
    merchant: &Merchant,
    limit: i64,
    starting_after: Option<String>,
    filter: ListFilter,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let page = state
        .db
        .run(move |conn| {
            rows::list(
                conn,
                &merchant_id,
                limit,
                starting_after.as_deref(),
                &filter,
            )
        })
        .await?
        .ok_or_else(|| ApiError::unknown_cursor("balance transaction"))?;
    let (rows, has_more) = crate::db::page(page, limit);
    view::render_list(&rows, has_more, now()).map_err(ApiError::internal)
}

pub async fn get(state: &AppState, merchant: &Merchant, id: String) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let row = state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, &id))
        .await?
        .ok_or_else(|| ApiError::NotFound("no such balance transaction".to_owned()))?;
    view::render(&row, now()).map_err(ApiError::internal)
}
