package migrate

import "sort"

// Test-only access to unexported parts of the package.

// Migration is migration, for the tests of what a component's files hold.
type Migration = migration

// Migrations returns the component's migrations ordered by version, each
// split into its statements (what Apply sends).
func (c Component) Migrations() ([]Migration, error) { return c.migrations() }

// Latest returns the highest version the component embeds (0 if none).
func (c Component) Latest() (int, error) {
	ms, err := c.migrations()
	if err != nil || len(ms) == 0 {
		return 0, err
	}
	return ms[len(ms)-1].Version, nil
}

// Statements returns the statements of the file in order, each without its
// terminating semicolon: what Apply sends, one statement per query.
func (m migration) Statements() []string {
	out := make([]string, len(m.stmts))
	for i, st := range m.stmts {
		out[i] = st.sql
	}
	return out
}

// ReservedWords returns the key words ValidateSchema rejects, sorted, for
// the comparison with the server's.
func ReservedWords() []string {
	out := make([]string, 0, len(reserved))
	for w := range reserved {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}
