package boltstore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehq/lease/boltstore"
)

// victim is a file the store must never write to: its content and mode
// are checked after every Open that is pointed at it.
type victim struct {
	path string
	data string
	mode os.FileMode
}

func newVictim(t *testing.T) victim {
	t.Helper()
	v := victim{path: filepath.Join(t.TempDir(), "precious"), data: strings.Repeat("not yours\n", 1000), mode: 0o644}
	if err := os.WriteFile(v.path, []byte(v.data), v.mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(v.path, v.mode); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return v
}

func (v victim) intact(t *testing.T) {
	t.Helper()
	fi, err := os.Stat(v.path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(v.path)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != v.data || fi.Mode().Perm() != v.mode {
		t.Errorf("Open changed %s: %d bytes (%d before), mode %v (%v before)", v.path, len(data), len(v.data), fi.Mode().Perm(), v.mode)
	}
}

// TestOpenRefusesLinks: a symbolic link, or a second hard link, where the
// store's file or its log should be is refused before anything is written,
// and the file it leads to is left as it was. A symbolic link named
// lease.db-wal used to make Open zero that file and set its mode to 0600.
func TestOpenRefusesLinks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		file     string // which of the store's files is the link
		link     func(target, name string) error
		fragment string
	}{
		{"log symlink", "lease.db-wal", os.Symlink, "is a symbolic link"},
		{"file symlink", "lease.db", os.Symlink, "is a symbolic link"},
		{"log hard link", "lease.db-wal", os.Link, "has 2 names (hard links)"},
		{"file hard link", "lease.db", os.Link, "has 2 names (hard links)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newVictim(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "lease.db")
			if tc.file == "lease.db-wal" { // a store that has had a log, closed cleanly
				s, err := boltstore.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(path + "-wal"); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.link(v.path, filepath.Join(dir, tc.file)); err != nil {
				t.Fatal(err)
			}
			wantOpenError(t, path, filepath.Join(dir, tc.file)+" "+tc.fragment)
			v.intact(t)
		})
	}
}

// TestOpenRefusesOthersFiles: a file or log that belongs to another user
// is refused, and left as it was. Needs root, to give a file away.
func TestOpenRefusesOthersFiles(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("gives a file to another user; skipped in -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to give a file to another user: run the full suite as root (as make test does in CI), or with -short")
	}
	for _, file := range []string{"lease.db", "lease.db-wal"} {
		t.Run(file, func(t *testing.T) {
			t.Parallel()
			path := closedStore(t)
			target := filepath.Join(filepath.Dir(path), file)
			if err := os.Chmod(target, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(target, 4242, 4242); err != nil {
				t.Fatal(err)
			}
			before, err := os.ReadFile(target)
			if err != nil {
				t.Fatal(err)
			}
			wantOpenError(t, path, target+" belongs to uid 4242")
			after, err := os.ReadFile(target)
			fi, serr := os.Stat(target)
			if err != nil || serr != nil || string(after) != string(before) || fi.Mode().Perm() != 0o644 {
				t.Errorf("Open changed %s (mode now %v)", target, fi.Mode().Perm())
			}
		})
	}
}

// TestOpenSharedDir: a directory others may write to (and so remove the
// store's files from) is refused unless AllowSharedDir is given; a sticky
// one, where they may not, is not.
func TestOpenSharedDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode   os.FileMode
		refuse bool
	}{
		{0o700, false},
		{0o750, false},
		{0o770, true},
		{0o707, true},
		{0o777 | os.ModeSticky, false},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "lease.db")
			if tc.refuse {
				wantOpenError(t, path, "the directory "+dir+" is writable by other users", "--allow-shared-data-dir")
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("a refused Open created %s", path)
				}
				s, err := openWithin(t, path, boltstore.AllowSharedDir())
				if err != nil {
					t.Fatalf("Open with AllowSharedDir: %v", err)
				}
				_ = s.Close()
				return
			}
			if _, err := openWithin(t, path); err != nil {
				t.Fatalf("Open: %v", err)
			}
		})
	}
}

// TestOpenOthersDir: a directory that belongs to another user, who may
// remove the store's files whatever its mode, is refused. Needs root.
func TestOpenOthersDir(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("gives a directory to another user; skipped in -short")
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to give a directory to another user: run the full suite as root (as make test does in CI), or with -short")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, filepath.Join(dir, "lease.db"), "the directory "+dir+" belongs to uid 4242")
}

// closedStore creates a store, closes it cleanly, and returns its path.
func closedStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.db")
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
