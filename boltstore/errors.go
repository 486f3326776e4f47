package boltstore

import (
	"errors"
	"fmt"

	"github.com/leasehq/lease"
)

// ErrCorrupt is matched by the error Open returns when the store's files
// hold damage that a crash cannot explain, or do not vouch for each other:
// a damaged log, a lease.db record that fails its checksum, a lease.db
// missing, empty, cut short or older than its log, a log missing or of
// another size than lease.db recorded. Writes acknowledged before may be
// lost, and serving without them could issue their tokens again (I1). The
// error is a *CorruptError, and matches lease.ErrUnavailable too.
var ErrCorrupt = errors.New("boltstore: the store is damaged")

// CorruptError describes damage found in the store's files. Open refuses
// the store with it, unless AcceptLogLoss is given, which drops what
// cannot be trusted, sets Floor, and hands it to AcceptLogLoss's report.
type CorruptError struct {
	// File is the damaged file: the log, or the bbolt file.
	File string
	// Log is the log file.
	Log string
	// Offset is where in the log the damage is (a damaged block, or the
	// record that later records show is missing), or -1 when the damage
	// is not at one place in the log.
	Offset int64
	// Reason says what was found.
	Reason string
	// Lost bounds how many tokens the writes that could not be read may
	// have issued above the highest token the store still knows.
	Lost uint64
	// Floor is set when the loss was accepted: every key's next token,
	// whether or not the store knows the key, is above it.
	Floor lease.Token

	aside bool // File is a bbolt file that cannot be opened: AcceptLogLoss moves it aside (dbDamaged)
	// salvaged is what AcceptLogLoss read of the file it moved aside
	// (salvage).
	salvaged salvaged
}

// what names the damage: the file and what is wrong with it.
func (e *CorruptError) what() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("the log %s is damaged at offset %d (%s)", e.File, e.Offset, e.Reason)
	}
	return fmt.Sprintf("%s %s", e.File, e.Reason)
}

func (e *CorruptError) Error() string {
	if e.Floor > 0 {
		return fmt.Sprintf("boltstore: %s; accepted the loss of what could not be read, which may have issued up to %d tokens above the highest the store knows: every key's next token is now above %d", e.what(), e.Lost, e.Floor)
	}
	return fmt.Sprintf("boltstore: %s: writes acknowledged before may be lost, and serving without them could issue their tokens again; keep a copy of the data directory, then start with --accept-log-loss (boltstore.AcceptLogLoss) to drop them and raise every key's next token above any they could have issued", e.what())
}

// Unwrap makes the error match ErrCorrupt and lease.ErrUnavailable.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, lease.ErrUnavailable} }

// dbDamaged is the refusal of the bbolt file at path, as damage that
// AcceptLogLoss moves aside: reason, formatted.
func dbDamaged(path, format string, args ...any) *CorruptError {
	return &CorruptError{File: path, Log: walPath(path), Offset: -1, aside: true, Reason: fmt.Sprintf(format, args...)}
}
