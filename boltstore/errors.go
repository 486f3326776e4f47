package boltstore

import (
	"errors"
	"fmt"

	"github.com/leasehq/lease"
)

// ErrCorrupt is matched by the error Open returns when the log holds damage
// that a crash cannot explain: records acknowledged after it may be lost,
// and serving without them could issue their tokens again (I1). The error
// is a *CorruptError, and matches lease.ErrUnavailable too.
var ErrCorrupt = errors.New("boltstore: the log is damaged")

// CorruptError describes damage found in the log. Open refuses the store
// with it, unless AcceptLogLoss is given, which drops the records from
// Offset on, sets Floor, and hands it to AcceptLogLoss's report.
type CorruptError struct {
	// Log is the log file.
	Log string
	// Offset is where in Log the damage is: a damaged block, or the record
	// that later records show is missing.
	Offset int64
	// Reason says what was found there.
	Reason string
	// Lost bounds how many tokens the records that could not be read may
	// have issued for any one key.
	Lost uint64
	// Floor is set when the loss was accepted: every key's next token,
	// whether or not the store knows the key, is above it.
	Floor lease.Token
}

func (e *CorruptError) Error() string {
	if e.Floor > 0 {
		return fmt.Sprintf("boltstore: the log %s is damaged at offset %d (%s); accepted the loss of the records from there on, which may have issued up to %d tokens per key: every key's next token is now above %d", e.Log, e.Offset, e.Reason, e.Lost, e.Floor)
	}
	return fmt.Sprintf("boltstore: the log %s is damaged at offset %d (%s): records acknowledged from there on may be lost, and serving without them could issue their tokens again; keep a copy of the data directory, then start with --accept-log-loss (boltstore.AcceptLogLoss) to drop them and raise every key's next token above any they could have issued", e.Log, e.Offset, e.Reason)
}

// Unwrap makes the error match ErrCorrupt and lease.ErrUnavailable.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, lease.ErrUnavailable} }
