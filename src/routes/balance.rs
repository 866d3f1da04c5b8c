use actix_web::{HttpRequest, HttpResponse, web};

use super::authenticate::Authenticated;
use super::events::json;
use super::input::{NoQuery, Query};
use crate::db::ledger::ListFilter;
use crate::domain::TransactionId;
use crate::error::ApiError;
use crate::ledger::{self, Kind};
use crate::state::AppState;

/// What the merchant holds, per currency: `available` (may be paid out) and `pending`
/// (charges whose `available_on` has not come yet), exact at this moment.
#[utoipa::path(
    get,
    path = "/v1/balance",
    operation_id = "get_balance",
    tag = "balance",
    security(("api_key" = [])),
    responses(
        (status = 200, description = "The balance", body = crate::ledger::view::Balance),
        super::problems::BalanceProblems,
    )
)]
pub async fn get_balance(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
) -> Result<HttpResponse, ApiError> {
    Ok(json(ledger::reads::balance(&state, &merchant).await?))
}

/// Every movement of the merchant's money, newest first.
#[utoipa::path(
    get,
    path = "/v1/balance_transactions",
    operation_id = "list_balance_transactions",
    tag = "balance",
    security(("api_key" = [])),
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 100, description = "Page size, 1 to 100 (default 10)"),
        ("starting_after" = Option<String>, Query, description = "A balance transaction id (`txn_…`): the page after it"),
        ("type" = Option<crate::ledger::view::TransactionType>, Query, description = "Only transactions of this type"),
        ("source" = Option<String>, Query, description = "Only the transactions of this object (`pay_…`, `re_…`, `po_…`, `dp_…`)"),
    ),
    responses(
        (status = 200, description = "A page of balance transactions", body = crate::ledger::view::TransactionList),
        (status = 404, description = "`not_found`: `starting_after` names no balance transaction of yours", body = crate::error::Problem, content_type = "application/problem+json"),
        super::problems::ListProblems,
    )
)]
pub async fn list_transactions(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let query = Query::parse(&req, &["limit", "starting_after", "type", "source"])?;
    let limit = query.limit()?;
    let starting_after =
        query.starting_after("a balance transaction id", TransactionId::is_valid)?;
    let txn_type = query
        .get("type")
        .map(|v| {
            Kind::parse(v)
                .map(|k| k.as_str().to_owned())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "type",
                        "`type` must be a balance transaction type, e.g. charge",
                    )
                })
        })
        .transpose()?;
    let source_id = query
        .get("source")
        .map(|v| {
            ledger::is_source_id(v)
                .then(|| v.to_owned())
                .ok_or_else(|| {
                    ApiError::invalid(
                        "source",
                        "`source` must be the id of a payment (pay_…), a refund (re_…), a payout (po_…) \
                         or a dispute (dp_…)",
                    )
                })
        })
        .transpose()?;
    let filter = ListFilter {
        txn_type,
        source_id,
    };
    Ok(json(
        ledger::reads::list(&state, &merchant, limit, starting_after, filter).await?,
    ))
}

/// One balance transaction.
#[utoipa::path(
    get,
    path = "/v1/balance_transactions/{id}",
    operation_id = "get_balance_transaction",
    tag = "balance",
    security(("api_key" = [])),
    params(("id" = String, Path, description = "Balance transaction id (`txn_…`)")),
    responses(
        (status = 200, description = "The balance transaction", body = crate::ledger::view::TransactionObject),
        super::problems::TransactionNotFoundProblems,
    )
)]
pub async fn get_transaction(
    state: web::Data<AppState>,
    Authenticated(merchant): Authenticated,
    _: NoQuery,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    if !TransactionId::is_valid(&id) {
        return Err(ApiError::NotFound("no such balance transaction".to_owned()));
    }
    Ok(json(ledger::reads::get(&state, &merchant, id).await?))
}
