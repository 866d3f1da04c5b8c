//! Reading endpoints, and listing their deliveries.

use super::endpoint::no_such_endpoint;
use super::view;
use crate::auth::Merchant;
use crate::db::deliveries as delivery_rows;
use crate::db::webhook_endpoints as rows;
use crate::domain::{DeliveryStatus, EndpointId};
use crate::error::ApiError;
use crate::state::AppState;

pub async fn get(state: &AppState, merchant: &Merchant, id: String) -> Result<String, ApiError> {
    if !EndpointId::is_valid(&id) {
        return Err(no_such_endpoint());
    }
    let merchant_id = merchant.id.clone();
    let row = state
        .db
        .run(move |conn| rows::find(conn, &merchant_id, &id))
        .await?
        .ok_or_else(no_such_endpoint)?;
    Ok(view::render(&row, false))
}

pub async fn list(
    state: &AppState,
    merchant: &Merchant,
    starting_after: Option<String>,
    limit: i64,
) -> Result<String, ApiError> {
    let merchant_id = merchant.id.clone();
    let found = state
        .db
        .run(move |conn| rows::list(conn, &merchant_id, starting_after.as_deref(), limit))
        .await?
        .ok_or_else(|| ApiError::unknown_cursor("webhook endpoint"))?;
    let (found, has_more) = crate::db::page(found, limit);
    Ok(view::render_list(&found, has_more))
}

pub async fn list_deliveries(
    state: &AppState,
    merchant: &Merchant,
    id: String,
    status: Option<DeliveryStatus>,
    starting_after: Option<String>,
    limit: i64,
) -> Result<String, ApiError> {
    if !EndpointId::is_valid(&id) {
        return Err(no_such_endpoint());
    }
    let merchant_id = merchant.id.clone();
    let found = state
        .db
        .run(move |conn| {
            if rows::find(conn, &merchant_id, &id)?.is_none() {
                return Ok(Err(no_such_endpoint()));
            }
            let page = delivery_rows::list_for_endpoint(
                conn,
                &id,
                status,
                starting_after.as_deref(),
                limit,
            )?;
            Ok(page.ok_or_else(|| ApiError::unknown_cursor("delivery of this endpoint")))
        })
        .await??;
    let (found, has_more) = crate::db::page(found, limit);
    Ok(view::render_deliveries(&found, has_more))
}
