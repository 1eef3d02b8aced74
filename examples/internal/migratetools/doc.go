// Package migratetools holds the test that applies the library's
// migration files with goose and golang-migrate, the tools a service may
// already use, and compares the result with migrate.Apply's.
package migratetools
