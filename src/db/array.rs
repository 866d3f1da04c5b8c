//! A column of a batch, bound to a PostgreSQL statement as one array and serialized in one
//! piece.
//!
//! The group-commit statements bind one array per column (`unnest_insert!`, the finish's
//! update). diesel writes an array element by element into a buffer that starts empty and
//! doubles as it fills: about ten reallocations, each a copy of what was written so far, per
//! array. Counted by callgrind, that was the largest single cost of a new payment in the
//! service, a sixth of its instructions (docs/benchmark.md, "Instructions per request"). A
//! [`Column`] knows each element's size before it writes anything, so it writes the array
//! into a buffer of its exact size and hands it over in one write.
//!
//! The bytes are PostgreSQL's binary format for the array and for each element, as diesel
//! writes them (its own encodings of text, integers and timestamps); the tests compare the
//! two on a real server.

use std::io::Write;

use chrono::NaiveDateTime;
use diesel::pg::Pg;
use diesel::serialize::{self, IsNull, Output, ToSql};
use diesel::sql_types::{Array, BigInt, HasSqlType, Integer, Nullable, Text, Timestamp};

/// One column of a batch: bound as an array of `ST` where its elements are [`Element<ST>`].
#[derive(Debug)]
pub struct Column<T>(Vec<T>);

impl<T> FromIterator<T> for Column<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Self(iter.into_iter().collect())
    }
}

/// What writing an element can fail with (a timestamp too far from 2000).
type Written = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// A value PostgreSQL reads as an `ST` in binary format.
pub trait Element<ST> {
    /// Its size in bytes, or `None` for NULL.
    fn size(&self) -> Option<usize>;
    /// Appends exactly [`Element::size`] bytes (nothing for NULL).
    fn write(&self, out: &mut Vec<u8>) -> Written;
}

impl Element<Text> for &str {
    fn size(&self) -> Option<usize> {
        Some(self.len())
    }

    fn write(&self, out: &mut Vec<u8>) -> Written {
        out.extend_from_slice(self.as_bytes());
        Ok(())
    }
}

/// Integers: their bytes, most significant first.
macro_rules! big_endian {
    ($($sql:ty: $rust:ty),+) => {$(
        impl Element<$sql> for $rust {
            fn size(&self) -> Option<usize> {
                Some(std::mem::size_of::<$rust>())
            }

            fn write(&self, out: &mut Vec<u8>) -> Written {
                out.extend_from_slice(&self.to_be_bytes());
                Ok(())
            }
        }
    )+};
}

big_endian!(BigInt: i64, Integer: i32);

/// Microseconds since PostgreSQL's epoch, 2000-01-01 00:00:00 (diesel's encoding).
impl Element<Timestamp> for NaiveDateTime {
    fn size(&self) -> Option<usize> {
        Some(8)
    }

    fn write(&self, out: &mut Vec<u8>) -> Written {
        let epoch = chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
            .and_then(|day| day.and_hms_opt(0, 0, 0))
            .ok_or("PostgreSQL's epoch is a date")?;
        let micros = (*self - epoch)
            .num_microseconds()
            .ok_or("timestamp too far from the year 2000 to send")?;
        out.extend_from_slice(&micros.to_be_bytes());
        Ok(())
    }
}

impl<ST, T: Element<ST>> Element<Nullable<ST>> for Option<T> {
    fn size(&self) -> Option<usize> {
        self.as_ref().and_then(Element::size)
    }

    fn write(&self, out: &mut Vec<u8>) -> Written {
        match self {
            Some(value) => value.write(out),
            None => Ok(()),
        }
    }
}

impl<ST, T> ToSql<Array<ST>, Pg> for Column<T>
where
    Pg: HasSqlType<ST>,
    T: Element<ST> + std::fmt::Debug,
{
    fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, Pg>) -> serialize::Result {
        let header = 5 * 4;
        let elements: usize = self.0.iter().map(|e| 4 + e.size().unwrap_or(0)).sum();
        let mut bytes = Vec::with_capacity(header + elements);
        let element_type = <Pg as HasSqlType<ST>>::metadata(out.metadata_lookup()).oid()?;
        bytes.extend_from_slice(&1i32.to_be_bytes()); // dimensions
        bytes.extend_from_slice(&0i32.to_be_bytes()); // flags
        bytes.extend_from_slice(&element_type.to_be_bytes());
        bytes.extend_from_slice(&i32::try_from(self.0.len())?.to_be_bytes());
        bytes.extend_from_slice(&1i32.to_be_bytes()); // lower bound
        for element in &self.0 {
            match element.size() {
                None => bytes.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(size) => {
                    bytes.extend_from_slice(&i32::try_from(size)?.to_be_bytes());
                    element.write(&mut bytes)?;
                }
            }
        }
        out.write_all(&bytes)?;
        Ok(IsNull::No)
    }
}

#[cfg(test)]
mod tests {
    use diesel::prelude::*;
    use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamp};

    use super::Column;

    /// The tests' PostgreSQL (see `test_postgres`: CI fails rather than skip without one).
    fn postgres() -> Option<PgConnection> {
        let url = crate::db::migrate::tests::test_postgres()?;
        PgConnection::establish(&url).ok()
    }

    #[derive(QueryableByName)]
    struct Same {
        #[diesel(sql_type = Bool)]
        same: bool,
    }

    /// `$1 IS NOT DISTINCT FROM $2`, the first bound as a [`Column`], the second by diesel.
    macro_rules! same_as_diesel {
        ($conn:expr, $sql:ty, $values:expr) => {{
            let values = $values;
            let column: Column<_> = values.iter().cloned().collect();
            diesel::sql_query("SELECT $1 IS NOT DISTINCT FROM $2 AS same")
                .bind::<Array<$sql>, _>(&column)
                .bind::<Array<$sql>, _>(&values)
                .get_result::<Same>($conn)
                .expect("the statement runs")
                .same
        }};
    }

    #[test]
    fn every_element_type_reaches_postgresql_as_diesel_sends_it() {
        let Some(mut conn) = postgres() else { return };
        let conn = &mut conn;
        let moment = |text: &str| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f")
                .expect("a timestamp")
        };
        assert!(same_as_diesel!(
            conn,
            Text,
            vec!["pay_1", "", "é — ünïcode", "x"]
        ));
        assert!(same_as_diesel!(conn, Text, Vec::<&str>::new()));
        assert!(same_as_diesel!(
            conn,
            Nullable<Text>,
            vec![Some("a"), None, Some("")]
        ));
        assert!(same_as_diesel!(
            conn,
            BigInt,
            vec![0i64, -1, i64::MAX, i64::MIN]
        ));
        assert!(same_as_diesel!(conn, Integer, vec![0i32, 200, i32::MIN]));
        assert!(same_as_diesel!(
            conn,
            Nullable<Integer>,
            vec![None, Some(402i32)]
        ));
        assert!(same_as_diesel!(
            conn,
            Timestamp,
            vec![
                moment("2026-11-29 01:02:03.456789"),
                moment("1999-12-31 23:59:59.999999"),
                moment("2000-01-01 00:00:00.0"),
            ]
        ));
        assert!(same_as_diesel!(
            conn,
            Nullable<Timestamp>,
            vec![None, Some(moment("1970-01-01 00:00:00.000001"))]
        ));
        // The comparison can fail: a different array is not the same.
        let column: Column<&str> = ["a", "b"].into_iter().collect();
        let same = diesel::sql_query("SELECT $1 IS NOT DISTINCT FROM $2 AS same")
            .bind::<Array<Text>, _>(&column)
            .bind::<Array<Text>, _>(vec!["a", "c"])
            .get_result::<Same>(conn)
            .expect("the statement runs")
            .same;
        assert!(!same);
    }
}
