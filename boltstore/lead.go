package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/leasehq/lease"
)

// The lead's copy (PATH-lead).
//
// The lead (floor.go) is what keeps a store's tokens above the host clock
// after a restore's bump or an accepted loss, and it lives in lease.db. A
// lease.db that is missing, emptied or cut short before the page that
// holds it takes it along, and a new file floored at the clock alone
// would issue again every token issued in the lead's span (2^40
// microseconds, some twelve days, after a restore). So every Open that
// serves keeps a copy of the lead beside the file, written (synced, and
// renamed into place) before it answers anything, and the next Open
// takes the larger of the two: a lease.db lost or rolled back without
// its copy still floors the new one at clock plus lead. The copy also
// says that a store lived here: lease.db and its log both missing beside
// it is refused as damage (AcceptLogLoss starts a new store above the
// clock plus the copy's lead), where it used to start a new store at
// token 1.
//
// The file: leadMagic, then the lead sealed as a meta value of key
// "clock-lead" is (8 bytes big-endian and the CRC-32C of key and value).

// leadMagic begins a lead copy.
const leadMagic = "lease lead copy\n"

// leadPath is the lead copy of the store at path.
func leadPath(path string) string { return path + "-lead" }

// readLeadCopy returns the lead in the copy beside the store at path:
// found reports whether a copy is there at all, ok whether it holds a
// lead (intact, below lease.MaxToken). The copy must have passed
// checkOwnInfo (open checks it first).
func readLeadCopy(path string) (lead uint64, found, ok bool, err error) {
	f, err := os.OpenFile(leadPath(path), os.O_RDONLY|oNoFollow, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, unavailablef(err, "boltstore: cannot open %s", leadPath(path))
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, true, false, unavailablef(err, "boltstore: cannot read %s", leadPath(path))
	}
	rest, magic := bytes.CutPrefix(b, []byte(leadMagic))
	if !magic {
		return 0, true, false, nil
	}
	v, intact := unseal(keyClockLead, rest)
	if !intact || len(v) != 8 || binary.BigEndian.Uint64(v) >= uint64(lease.MaxToken) {
		return 0, true, false, nil
	}
	return binary.BigEndian.Uint64(v), true, true, nil
}

// writeLeadCopy makes the copy beside the store at path hold lead: a new
// file, synced, renamed over the old one, and the directory synced.
func writeLeadCopy(path string, lead uint64) error {
	to := leadPath(path)
	tmp := to + ".tmp"
	// What a crash left of an earlier write. Never a link followed: the
	// new file is made with O_EXCL, and only this name is removed.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return unavailablef(err, "boltstore: cannot keep the lead's copy %s", to)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o600)
	if err != nil {
		return unavailablef(err, "boltstore: cannot keep the lead's copy %s", to)
	}
	b := append([]byte(leadMagic), seal(keyClockLead, binary.BigEndian.AppendUint64(nil, lead))...)
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, to)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return unavailablef(err, "boltstore: cannot keep the lead's copy %s", to)
	}
	return nil
}
