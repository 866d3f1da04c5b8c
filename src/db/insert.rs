//! Inserting many rows of one table.

/// Inserts the slice `$rows` into `$table`: one statement on PostgreSQL however many rows,
/// one statement per row on SQLite (diesel's connection over both backends has no
/// multi-row insert for SQLite). The rows are inserted as owned values: rows whose typed
/// columns are written through `serialize_as` have no insert by reference. Evaluates to
/// `QueryResult<()>`.
macro_rules! insert_rows {
    ($conn:expr, $table:path, $rows:expr) => {{
        let rows = $rows;
        match $conn {
            $crate::db::pool::DbConnection::Postgres(pg) if rows.len() > 1 => {
                diesel::insert_into($table)
                    .values(rows.to_vec())
                    .execute(pg)
                    .map(|_| ())
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
