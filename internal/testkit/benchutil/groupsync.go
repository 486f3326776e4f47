package benchutil

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/leasehq/lease/internal/fsync"
)

// groupSyncRegion is a GroupSync log's preallocated size: records overwrite
// it, so a sync changes no metadata.
const groupSyncRegion = 1 << 20

// GroupSync makes fixed-size records durable in groups, the least a durable
// server must do before it answers: the floor rows' stand-in for a store's
// commit. The first caller to find no sync in flight writes every record
// appended so far and fdatasyncs them; callers arriving meanwhile wait for
// the next sync, which one of them runs.
type GroupSync struct {
	f      *os.File
	record int // bytes per Commit

	mu       sync.Mutex
	cond     sync.Cond
	appended uint64 // records appended
	durable  uint64 // records covered by a completed fdatasync
	syncing  bool
	off      int64 // where the next group is written
	buf      []byte

	syncs atomic.Int64 // fdatasyncs done
}

// NewGroupSync creates the log in dir, preallocated and synced, for records
// of record bytes (at most 64 KiB).
func NewGroupSync(dir string, record int) (*GroupSync, error) {
	if record <= 0 || record > 64<<10 {
		return nil, errors.New("benchutil: GroupSync record size out of range")
	}
	f, err := os.OpenFile(filepath.Join(dir, "floor.log"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := f.WriteAt(make([]byte, groupSyncRegion), 0); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	g := &GroupSync{f: f, record: record}
	g.cond.L = &g.mu
	return g, nil
}

// Commit appends one record and returns once an fdatasync covers it.
func (g *GroupSync) Commit() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.appended++
	mine := g.appended
	for g.durable < mine {
		if g.syncing {
			g.cond.Wait()
			continue
		}
		g.syncing = true
		upto := g.appended
		n := min(int(upto-g.durable)*g.record, groupSyncRegion)
		if g.off+int64(n) > groupSyncRegion {
			g.off = 0
		}
		off := g.off
		g.off += int64(n)
		if cap(g.buf) < n {
			g.buf = make([]byte, n)
		}
		buf := g.buf[:n]
		g.mu.Unlock()
		for i := range buf {
			buf[i] = byte(upto)
		}
		_, err := g.f.WriteAt(buf, off)
		if err == nil {
			err = fsync.Data(g.f)
		}
		g.mu.Lock()
		g.syncing = false
		g.cond.Broadcast()
		if err != nil {
			return err
		}
		g.syncs.Add(1)
		g.durable = upto
	}
	return nil
}

// Syncs returns how many fdatasyncs were done.
func (g *GroupSync) Syncs() int64 { return g.syncs.Load() }

// Durable returns how many records an fdatasync covers.
func (g *GroupSync) Durable() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.durable
}

// Size returns the log's size on disk.
func (g *GroupSync) Size() (int64, error) {
	fi, err := g.f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// Close closes the log.
func (g *GroupSync) Close() error { return g.f.Close() }
