package sqlfile

import (
	"fmt"
	"os"
)

// The statements of a test binary built with the build tag sqlmutate can
// be replaced from the environment, for the SQL-guard mutation runs
// (internal/cmd/sqlmutate, docs/mutation.md). Without the tag, textHook
// is nil and nothing here is reachable: a production binary always sends
// the statements as written.
const (
	// EnvMutateStatement names the statement to replace, qualified by the
	// last element of its package's path: "inbox.claim".
	EnvMutateStatement = "SECKILL_SQLMUTATE_STATEMENT"
	// EnvMutateFile names the file holding the replacement text ({schema}
	// still unreplaced).
	EnvMutateFile = "SECKILL_SQLMUTATE_FILE"
	// EnvMutateRecord, when not empty, prefixes every statement with the
	// comment "/* sqlmutate:inbox.claim */ ", so that a server logging its
	// statements tells which statements a test executes.
	EnvMutateRecord = "SECKILL_SQLMUTATE_RECORD"
)

// textHook returns the text Bound.Get sends for st of the package pkg; set
// only under the sqlmutate build tag.
var textHook func(pkg string, st *Statement) string

// Qualified returns "pkg.name", the form EnvMutateStatement and the
// recording comment use.
func Qualified(pkg, name string) string { return pkg + "." + name }

// RecordMarker is the comment EnvMutateRecord puts before the statement
// pkg.name.
func RecordMarker(pkg, name string) string {
	return "/* sqlmutate:" + Qualified(pkg, name) + " */ "
}

// mutatedText is the text of st of package pkg under the environment
// getenv: the replacement file's content when EnvMutateStatement names
// it, prefixed with the record marker when EnvMutateRecord is set. An
// unreadable replacement file panics: a mutation run must not silently
// test the real statement.
func mutatedText(pkg string, st *Statement, getenv func(string) string) string {
	text := st.Text
	if getenv(EnvMutateStatement) == Qualified(pkg, st.Name) {
		b, err := os.ReadFile(getenv(EnvMutateFile))
		if err != nil {
			panic(fmt.Sprintf("sqlfile: %s=%s: %v", EnvMutateStatement, Qualified(pkg, st.Name), err))
		}
		text = string(b)
	}
	if getenv(EnvMutateRecord) != "" {
		text = RecordMarker(pkg, st.Name) + text
	}
	return text
}
