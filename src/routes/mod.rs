//! HTTP only: extract, authenticate, call one flow, answer.

pub mod authenticate;
pub mod balance;
pub mod disputes;
pub mod events;
pub mod health;
pub mod inbound;
pub mod input;
pub mod openapi;
pub mod ops;
pub mod payments;
pub mod payouts;
pub mod problems;
pub mod refunds;
pub mod webhook_endpoints;

use actix_web::http::Method;
use actix_web::{HttpResponse, web};

use crate::error::ApiError;
use crate::routes::openapi::operation;

/// The OpenAPI document of every route in [`ROUTES`].
pub fn document() -> utoipa::openapi::OpenApi {
    openapi::document_of(ROUTES.iter().map(|route| route.doc))
}

/// One route the service serves: what `configure` registers and what the OpenAPI document
/// describes, from the same line, so a route cannot be served undocumented.
pub struct Route {
    pub method: Method,
    /// The actix path template; the OpenAPI path of `doc` must be the same string.
    pub path: &'static str,
    handler: fn() -> actix_web::Route,
    /// Adds the handler's `#[utoipa::path]` operation to the OpenAPI document.
    pub doc: fn(&mut utoipa::openapi::OpenApi),
}

/// Every route, in registration order. Add a route with one line here (its handler carries
/// `#[utoipa::path]`); the `ops` integration test checks the document against this table.
pub const ROUTES: &[Route] = &[
    Route {
        method: Method::POST,
        path: "/v1/payments",
        handler: || web::to(payments::create),
        doc: operation::<payments::__path_create>,
    },
    Route {
        method: Method::GET,
        path: "/v1/payments",
        handler: || web::to(payments::list),
        doc: operation::<payments::__path_list>,
    },
    Route {
        method: Method::GET,
        path: "/v1/payments/{id}",
        handler: || web::to(payments::get),
        doc: operation::<payments::__path_get>,
    },
    Route {
        method: Method::POST,
        path: "/v1/payments/{id}/capture",
        handler: || web::to(payments::capture),
        doc: operation::<payments::__path_capture>,
    },
    Route {
        method: Method::POST,
        path: "/v1/payments/{id}/cancel",
        handler: || web::to(payments::cancel),
        doc: operation::<payments::__path_cancel>,
    },
    Route {
        method: Method::POST,
        path: "/v1/payments/{id}/refunds",
        handler: || web::to(refunds::create),
        doc: operation::<refunds::__path_create>,
    },
    Route {
        method: Method::GET,
        path: "/v1/payments/{id}/refunds",
        handler: || web::to(refunds::list),
        doc: operation::<refunds::__path_list>,
    },
    Route {
        method: Method::GET,
        path: "/v1/balance",
        handler: || web::to(balance::get_balance),
        doc: operation::<balance::__path_get_balance>,
    },
    Route {
        method: Method::GET,
        path: "/v1/balance_transactions",
        handler: || web::to(balance::list_transactions),
        doc: operation::<balance::__path_list_transactions>,
    },
    Route {
        method: Method::GET,
        path: "/v1/balance_transactions/{id}",
        handler: || web::to(balance::get_transaction),
        doc: operation::<balance::__path_get_transaction>,
    },
    Route {
        method: Method::POST,
        path: "/v1/payouts",
        handler: || web::to(payouts::create),
        doc: operation::<payouts::__path_create>,
    },
    Route {
        method: Method::GET,
        path: "/v1/payouts",
        handler: || web::to(payouts::list),
        doc: operation::<payouts::__path_list>,
    },
    Route {
        method: Method::GET,
        path: "/v1/payouts/{id}",
        handler: || web::to(payouts::get),
        doc: operation::<payouts::__path_get>,
    },
    Route {
        method: Method::GET,
        path: "/v1/disputes",
        handler: || web::to(disputes::list),
        doc: operation::<disputes::__path_list>,
    },
    Route {
        method: Method::GET,
        path: "/v1/disputes/{id}",
        handler: || web::to(disputes::get),
        doc: operation::<disputes::__path_get>,
    },
    Route {
        method: Method::POST,
        path: "/v1/disputes/{id}",
        handler: || web::to(disputes::update),
        doc: operation::<disputes::__path_update>,
    },
    Route {
        method: Method::POST,
        path: "/v1/disputes/{id}/close",
        handler: || web::to(disputes::close),
        doc: operation::<disputes::__path_close>,
    },
    Route {
        method: Method::POST,
        path: "/v1/webhooks/provider",
        handler: || web::to(inbound::provider),
        doc: operation::<inbound::__path_provider>,
    },
    Route {
        method: Method::GET,
        path: "/v1/events",
        handler: || web::to(events::list),
        doc: operation::<events::__path_list>,
    },
    Route {
        method: Method::GET,
        path: "/v1/events/{id}",
        handler: || web::to(events::get),
        doc: operation::<events::__path_get>,
    },
    Route {
        method: Method::POST,
        path: "/v1/webhook_endpoints",
        handler: || web::to(webhook_endpoints::create),
        doc: operation::<webhook_endpoints::__path_create>,
    },
    Route {
        method: Method::GET,
        path: "/v1/webhook_endpoints",
        handler: || web::to(webhook_endpoints::list),
        doc: operation::<webhook_endpoints::__path_list>,
    },
    Route {
        method: Method::GET,
        path: "/v1/webhook_endpoints/{id}",
        handler: || web::to(webhook_endpoints::get),
        doc: operation::<webhook_endpoints::__path_get>,
    },
    Route {
        method: Method::POST,
        path: "/v1/webhook_endpoints/{id}",
        handler: || web::to(webhook_endpoints::update),
        doc: operation::<webhook_endpoints::__path_update>,
    },
    Route {
        method: Method::DELETE,
        path: "/v1/webhook_endpoints/{id}",
        handler: || web::to(webhook_endpoints::delete),
        doc: operation::<webhook_endpoints::__path_delete>,
    },
    Route {
        method: Method::POST,
        path: "/v1/webhook_endpoints/{id}/rotate_secret",
        handler: || web::to(webhook_endpoints::rotate_secret),
        doc: operation::<webhook_endpoints::__path_rotate_secret>,
    },
    Route {
        method: Method::GET,
        path: "/v1/webhook_endpoints/{id}/deliveries",
        handler: || web::to(webhook_endpoints::deliveries),
        doc: operation::<webhook_endpoints::__path_deliveries>,
    },
    Route {
        method: Method::POST,
        path: "/v1/webhook_endpoints/{id}/replay",
        handler: || web::to(webhook_endpoints::replay),
        doc: operation::<webhook_endpoints::__path_replay>,
    },
    Route {
        method: Method::POST,
        path: "/v1/webhook_endpoints/{id}/test",
        handler: || web::to(webhook_endpoints::test),
        doc: operation::<webhook_endpoints::__path_test>,
    },
    Route {
        method: Method::GET,
        path: "/health/live",
        handler: || web::to(health::live),
        doc: operation::<health::__path_live>,
    },
    Route {
        method: Method::GET,
        path: "/health/ready",
        handler: || web::to(health::ready),
        doc: operation::<health::__path_ready>,
    },
    Route {
        method: Method::GET,
        path: "/metrics",
        handler: || web::to(ops::metrics),
        doc: operation::<ops::__path_metrics>,
    },
    Route {
        method: Method::GET,
        path: "/openapi.json",
        handler: || web::to(ops::openapi_json),
        doc: operation::<ops::__path_openapi_json>,
    },
    Route {
        method: Method::GET,
        path: "/docs",
        handler: || web::to(ops::docs),
        doc: operation::<ops::__path_docs>,
    },
];

pub fn configure(cfg: &mut web::ServiceConfig) {
    // One resource per path, holding every method of that path (a GET route answers HEAD
    // too); another method is no route of ours: 404 `not_found`, as docs/api.md says.
    //
    // The paths of one collection (`/v1/payments`, `/v1/payments/{id}/capture`, …) are
    // served by one scope. actix tries a request's path against each resource in turn, a
    // template with a parameter by a regular expression (about 1 700 instructions a try):
    // served flat, `GET /health/live` tried every template of the API first, 23k of its
    // 51k instructions. A scope's prefix is static text, compared as such, so a request now
    // tries the templates of its own collection only.
    let mut scopes: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    let mut outside: Vec<&'static str> = Vec::new();
    for route in ROUTES {
        let paths = match collection(route.path) {
            Some(prefix) => {
                let at = scopes
                    .iter()
                    .position(|(p, _)| *p == prefix)
                    .unwrap_or_else(|| {
                        scopes.push((prefix, Vec::new()));
                        scopes.len() - 1
                    });
                &mut scopes[at].1
            }
            None => &mut outside,
        };
        if !paths.contains(&route.path) {
            paths.push(route.path);
        }
    }
    for (prefix, paths) in scopes {
        let scope = paths.into_iter().fold(web::scope(prefix), |scope, path| {
            scope.service(resource(path, &path[prefix.len()..]))
        });
        cfg.service(scope.default_service(web::to(not_found)));
    }
    for path in outside {
        cfg.service(resource(path, path));
    }
    // The docs page's own files (HTML, JS, CSS, embedded in the binary).
    cfg.service(ops::swagger_ui());
}

/// The resource serving every route of `path` at `template` (`path` within its scope).
fn resource(path: &'static str, template: &'static str) -> actix_web::Resource {
    let mut resource = web::resource(template);
    for route in ROUTES.iter().filter(|r| r.path == path) {
        let handler = (route.handler)();
        resource = resource.route(if route.method == Method::GET {
            handler.guard(get_or_head())
        } else {
            handler.method(route.method.clone())
        });
    }
    resource.default_service(web::to(not_found))
}

/// The collection of an API path, the scope that serves it: `/v1/payments` for
/// `/v1/payments` and `/v1/payments/{id}/refunds`; none for a path outside `/v1/`.
fn collection(path: &'static str) -> Option<&'static str> {
    let rest = path.strip_prefix("/v1/")?;
    Some(match rest.find('/') {
        Some(end) => &path[.."/v1/".len() + end],
        None => path,
    })
}

/// What a GET route of ours (the API's and the dashboard's pages) answers: GET, and HEAD,
/// the same answer without its body.
pub fn get_or_head() -> impl actix_web::guard::Guard {
    actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head())
}

pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound("no such route".to_owned()))
}
