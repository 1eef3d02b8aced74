package pgharness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ArchiveDir is the directory the archive_command of a server started with
// [Options.Archive] copies WAL segments into ("" otherwise).
func (s *Server) ArchiveDir() string {
	if s.dir == "" {
		return ""
	}
	return filepath.Join(s.dir, "archive")
}

// failFlag is the file whose presence makes archive_command fail.
func (s *Server) failFlag() string { return filepath.Join(s.dir, "archive.fail") }

// archiveCommand copies %p into ArchiveDir unless the fail flag exists
// (then it exits 1, and PostgreSQL keeps the segment and retries).
func (s *Server) archiveCommand() string {
	return fmt.Sprintf("test ! -e '%s' && cp %%p '%s/%%f'", s.failFlag(), s.ArchiveDir())
}

func (s *Server) makeArchiveDir() error {
	d := s.ArchiveDir()
	if err := os.MkdirAll(d, 0o700); err != nil {
		return fmt.Errorf("pgharness: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgharness: %w", err)
		}
	}
	return nil
}

// SetArchiveFailing makes the archive_command of a server started with
// [Options.Archive] fail (true) — as a full or unreachable archive would —
// or work again (false). While it fails PostgreSQL keeps every unarchived
// WAL segment in pg_wal and retries; pg_stat_archiver counts the failures.
func (s *Server) SetArchiveFailing(fail bool) error {
	if !s.owned || s.dir == "" {
		return errors.New("pgharness: archiving is controlled only on a throwaway server")
	}
	if _, err := os.Stat(s.ArchiveDir()); err != nil {
		return errors.New("pgharness: the server was not started with Options.Archive")
	}
	if fail {
		f, err := os.Create(s.failFlag())
		if err != nil {
			return fmt.Errorf("pgharness: %w", err)
		}
		return f.Close()
	}
	if err := os.Remove(s.failFlag()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pgharness: %w", err)
	}
	return nil
}
