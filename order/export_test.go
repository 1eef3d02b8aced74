package order

// Test hooks into unexported state.

// DueForExpirySQL returns the statement DueForExpiry runs.
func (s *Store) DueForExpirySQL() string { return s.sql.dueForExpiry }

// CancelExpiredSQL returns the statement CancelExpired runs.
func (s *Store) CancelExpiredSQL() string { return s.sql.cancelExpired }
