//! Inserting many rows of one table.
//!
//! On PostgreSQL a slice of rows goes as one statement whatever its length: `INSERT INTO t
//! (a, b, …) SELECT * FROM unnest($1, $2, …)`, one array per column. Its text is the same for
//! every batch size, so each connection prepares it once and never parses or plans it again
//! (diesel's multi-row `VALUES` was a new text per batch size, parsed and planned on every
//! group-commit batch: part of the fifth of PostgreSQL's time that went to parsing and
//! planning, docs/benchmark.md). SQLite inserts row by row (diesel's connection over both
//! backends has no multi-row insert for it, and there is no network round trip to save).

/// Defines `$name<$lt>`, the PostgreSQL insert of a slice of `$row` into `$table` as one
/// array per column: `column: SqlType = |row| value` for each column, in the table's order.
/// `then "…" returning SqlType` ends the statement with that text (`ON CONFLICT …
/// RETURNING …`), and the statement is a query of that type.
macro_rules! unnest_insert {
    (
        $(#[$meta:meta])*
        $name:ident<$lt:lifetime> for $row:ty => $table:literal
        $(then $suffix:literal returning $returning:ty)? {
            $($column:ident: $sql:ty = |$r:ident| -> $rust:ty { $get:expr }),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $name<$lt> {
            $($column: Vec<$rust>,)+
        }

        impl<$lt> $name<$lt> {
            pub fn new(rows: &$lt [$row]) -> Self {
                Self {
                    $($column: rows.iter().map(|$r| -> $rust { $get }).collect(),)+
                }
            }
        }

        impl diesel::query_builder::QueryId for $name<'_> {
            type QueryId = $name<'static>;
            const HAS_STATIC_QUERY_ID: bool = true;
        }

        impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for $name<'_> {
            fn walk_ast<'b>(
                &'b self,
                mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
            ) -> diesel::QueryResult<()> {
                out.push_sql(concat!("INSERT INTO ", $table, " ("));
                let mut first = true;
                $(
                    if !std::mem::take(&mut first) {
                        out.push_sql(", ");
                    }
                    out.push_sql(stringify!($column));
                )+
                out.push_sql(") SELECT * FROM unnest(");
                first = true;
                $(
                    if !std::mem::take(&mut first) {
                        out.push_sql(", ");
                    }
                    out.push_bind_param::<diesel::sql_types::Array<$sql>, _>(&self.$column)?;
                )+
                out.push_sql(")");
                $(out.push_sql($suffix);)?
                Ok(())
            }
        }

        $(
            impl diesel::query_builder::Query for $name<'_> {
                type SqlType = $returning;
            }
        )?

        impl diesel::RunQueryDsl<diesel::PgConnection> for $name<'_> {}
    };
}

/// Inserts the slice `$rows` into `$table`: one statement on PostgreSQL however many rows
/// (`$unnest`, made by [`unnest_insert`]), one statement per row on SQLite, none when there
/// are no rows. Evaluates to `QueryResult<()>`.
macro_rules! insert_rows {
    ($conn:expr, $table:path, $rows:expr, $unnest:ident) => {{
        let rows = $rows;
        match $conn {
            _ if rows.is_empty() => Ok(()),
            $crate::db::pool::DbConnection::Postgres(pg) => {
                diesel::RunQueryDsl::execute($unnest::new(rows), pg).map(|_| ())
            }
            conn => rows.iter().try_for_each(|row| {
                diesel::insert_into($table)
                    .values(row.clone())
                    .execute(conn)
                    .map(|_| ())
            }),
        }
    }};
}

pub(crate) use insert_rows;
pub(crate) use unnest_insert;

/// `WITH written AS (<first>) <then>`: an insert and the statement after it in one round trip
/// (PostgreSQL). Both run on one snapshot: `then` does not see the rows `first` writes, and
/// the constraints of both (foreign keys included) are checked when the statement ends, so
/// rows that reference the inserted ones may be inserted by `then`.
pub struct AndThen<F, T> {
    pub first: F,
    pub then: T,
}

impl<F: diesel::query_builder::QueryId, T: diesel::query_builder::QueryId>
    diesel::query_builder::QueryId for AndThen<F, T>
{
    type QueryId = AndThen<F::QueryId, T::QueryId>;
    const HAS_STATIC_QUERY_ID: bool = F::HAS_STATIC_QUERY_ID && T::HAS_STATIC_QUERY_ID;
}

impl<F, T> diesel::query_builder::QueryFragment<diesel::pg::Pg> for AndThen<F, T>
where
    F: diesel::query_builder::QueryFragment<diesel::pg::Pg>,
    T: diesel::query_builder::QueryFragment<diesel::pg::Pg>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> diesel::QueryResult<()> {
        out.push_sql("WITH written AS (");
        self.first.walk_ast(out.reborrow())?;
        out.push_sql(") ");
        self.then.walk_ast(out.reborrow())
    }
}

impl<F, T: diesel::query_builder::Query> diesel::query_builder::Query for AndThen<F, T> {
    type SqlType = T::SqlType;
}

impl<F, T> diesel::RunQueryDsl<diesel::PgConnection> for AndThen<F, T> {}
