package pgtx

import (
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// callbackResults is what the caller's result callbacks read in
// [RunBatch]. pgx keeps the first error a batch's rows met, a Scan error
// on the client included, and returns it for every later result of the
// batch, COMMIT's too: a committed batch would look like a break during
// COMMIT. The rows handed out here decode with pgx.ScanRow, which leaves
// the rows without an error, so a callback's scan error stays the
// callback's own and the later results are read as the server sent them.
type callbackResults struct{ pgx.BatchResults }

// Query returns the next result's rows, with a Scan that does not mark
// them failed.
func (c callbackResults) Query() (pgx.Rows, error) {
	rows, err := c.BatchResults.Query()
	if err != nil {
		return rows, err
	}
	return callbackRows{rows}, nil
}

// QueryRow returns the next result as a row read like pgx's QueryRow.
func (c callbackResults) QueryRow() pgx.Row {
	rows, _ := c.BatchResults.Query() // a failed Query's rows report its error
	return callbackRow{callbackRows{rows}}
}

type callbackRows struct{ pgx.Rows }

// Scan decodes the current row into dest.
func (r callbackRows) Scan(dest ...any) error {
	if len(dest) == 1 {
		if rs, ok := dest[0].(pgx.RowScanner); ok {
			return rs.ScanRow(r)
		}
	}
	return pgx.ScanRow(r.Conn().TypeMap(), r.FieldDescriptions(), r.RawValues(), dest...)
}

type callbackRow struct{ rows callbackRows }

// Scan reads the first row into dest and closes the rows: pgx.ErrNoRows
// when there is none, the statement's error when it failed.
func (r callbackRow) Scan(dest ...any) error {
	for _, d := range dest {
		if _, ok := d.(*pgtype.DriverBytes); ok {
			r.rows.Close()
			return fmt.Errorf("pgtx: cannot scan into *pgtype.DriverBytes from QueryRow")
		}
	}
	return scanFirst(r.rows, dest...)
}

// scanFirst reads the first row of rows into dest and closes them, with
// pgx's QueryRow semantics: pgx.ErrNoRows when there is none, the
// statement's error when it failed.
func scanFirst(rows pgx.Rows, dest ...any) error {
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
