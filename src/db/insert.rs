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
            $($column: $crate::db::array::Column<$rust>,)+
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

/// `WITH w0 AS (<first write>), w1 AS (<second>), … <last>`: writes and the statement after
/// them in one round trip (PostgreSQL). `writes` is a tuple of one or three statements. All
/// run on one snapshot: `last` does not see the rows the writes make, and the constraints of
/// all (foreign keys included) are checked when the statement ends, so rows that reference
/// each other's may be inserted together. Each part keeps a static query id, so the whole is
/// prepared once per connection like its parts.
pub struct Together<W, L> {
    pub writes: W,
    pub last: L,
}

/// The writes of a [`Together`]: a tuple of statements, each a common table expression.
pub trait Writes {
    type QueryId: 'static;
    const HAS_STATIC_QUERY_ID: bool;
    fn walk_writes<'b>(
        &'b self,
        out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> diesel::QueryResult<()>;
}

macro_rules! writes_tuple {
    ($($part:ident $index:tt),+) => {
        impl<$($part),+> Writes for ($($part,)+)
        where
            $($part: diesel::query_builder::QueryFragment<diesel::pg::Pg> + diesel::query_builder::QueryId,)+
        {
            type QueryId = ($($part::QueryId,)+);
            const HAS_STATIC_QUERY_ID: bool = true $(&& $part::HAS_STATIC_QUERY_ID)+;
            fn walk_writes<'b>(
                &'b self,
                mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
            ) -> diesel::QueryResult<()> {
                $(
                    out.push_sql(if $index == 0 { "WITH " } else { ", " });
                    out.push_sql(concat!("w", stringify!($index), " AS ("));
                    self.$index.walk_ast(out.reborrow())?;
                    out.push_sql(")");
                )+
                out.push_sql(" ");
                Ok(())
            }
        }
    };
}

writes_tuple!(A 0);
writes_tuple!(A 0, B 1, C 2);

impl<W: Writes, L: diesel::query_builder::QueryId> diesel::query_builder::QueryId
    for Together<W, L>
{
    type QueryId = Together<W::QueryId, L::QueryId>;
    const HAS_STATIC_QUERY_ID: bool = W::HAS_STATIC_QUERY_ID && L::HAS_STATIC_QUERY_ID;
}

impl<W, L> diesel::query_builder::QueryFragment<diesel::pg::Pg> for Together<W, L>
where
    W: Writes,
    L: diesel::query_builder::QueryFragment<diesel::pg::Pg>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> diesel::QueryResult<()> {
        self.writes.walk_writes(out.reborrow())?;
        self.last.walk_ast(out.reborrow())
    }
}

impl<W, L: diesel::query_builder::Query> diesel::query_builder::Query for Together<W, L> {
    type SqlType = L::SqlType;
}

impl<W, L> diesel::RunQueryDsl<diesel::PgConnection> for Together<W, L> {}
