//! The one test-support tree of the integration tests, for the service's tests and the
//! client's alike: a database of each test's own ([`database`]: SQLite temp files, or
//! PostgreSQL schemas with `TEST_DATABASE_URL`, also behind a pooler), the real server
//! in-process ([`app`], [`requests`]) or restartable for the client ([`service`]), the
//! binary as a child process ([`process`]), providers to call ([`provider`]), PostgreSQL
//! behind a proxy the test cuts ([`pg_proxy`]), and waiting on conditions instead of
//! sleeping ([`wait`]).

pub mod app;
pub mod database;
pub mod pg_proxy;
pub mod process;
pub mod provider;
pub mod requests;
pub mod service;
pub mod wait;
pub mod webdriver;

pub use app::*;
pub use database::*;
pub use pg_proxy::*;
pub use process::*;
pub use provider::*;
pub use requests::*;
pub use service::*;
pub use wait::*;
