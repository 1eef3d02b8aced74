package migrate

// Test-only access to unexported parts of the package.

// Migration is migration, for the tests of what a component's files hold.
type Migration = migration

// Migrations returns the component's migrations ordered by version, each
// split into its statements (what Apply sends).
func (c Component) Migrations() ([]Migration, error) { return c.migrations() }

// Latest returns the highest version the component embeds (0 if none).
func (c Component) Latest() (int, error) { return c.latest() }

// Statements returns the statements of the file in order.
func (m migration) Statements() []string { return m.statements() }

// ReservedWords is reservedWords, for the comparison with the server's
// key words.
var ReservedWords = reservedWords
